//! The relay, as this node speaks to it: its own messages signed and posted
//! (`POST {relay}/events`), and the relay's replies read (to a post, and to a long poll of
//! `GET {relay}/events`), a refusal turned into a typed failure that names the relay's
//! reason.

use super::AgoraNode;
use super::envelope::{
    Envelope, MessageType, Meta, Recipient, Sender, ThreadRef, VERSION, clip, format_ts, new_id,
};
use crate::client::{StageClient, join_endpoint};
use crate::protocol::WorkerFailure;
use serde_json::Value;
use sha2::{Digest, Sha256};
use url::Url;

/// Where one of this node's messages goes: the node it is signed as, the client and relay
/// it is posted through, and the agent and thread it is addressed to.
pub(crate) struct Route<'a> {
    pub node: &'a AgoraNode,
    pub client: &'a StageClient,
    pub relay: &'a Url,
    pub agent: &'a str,
    pub thread: &'a str,
}

/// Signs one of this node's messages in `to.thread` to `to.agent`, stamped `ts_ms`,
/// remembers its id (an agent echoing it with other content is a replay) and posts it to
/// the relay.
pub(crate) async fn post_message(
    to: Route<'_>,
    kind: MessageType,
    payload: Value,
    ts_ms: i64,
) -> Result<(), WorkerFailure> {
    let Route {
        node,
        client,
        relay,
        agent,
        thread,
    } = to;
    let env = Envelope {
        version: VERSION.into(),
        id: new_id("msg"),
        ts: format_ts(ts_ms),
        kind,
        sender: Sender {
            id: node.did(),
            name: Some("cresolver".into()),
            url: None,
        },
        recipient: Recipient {
            id: agent.to_string(),
        },
        payload,
        thread: ThreadRef {
            id: thread.to_string(),
        },
        meta: Meta {
            ttl: node.settings().ttl_secs,
            hop: 0,
        },
    };
    let signed = node.sign(&env).map_err(|e| WorkerFailure::Request {
        detail: e.to_string(),
    })?;
    let digest: [u8; 32] = Sha256::digest(signed.to_string().as_bytes()).into();
    let _ = node.remember(&env.id, digest, ts_ms);
    let url = join_endpoint(relay, "events")?;
    let reply = client.post_json(url, &signed).await?;
    check_post_reply(&reply.body, kind)
}

/// The events of a long poll's reply.
pub fn parse_poll_reply(body: &[u8]) -> Result<Vec<Value>, WorkerFailure> {
    let v: Value = serde_json::from_slice(body).map_err(|e| WorkerFailure::InvalidJson {
        detail: format!("relay reply: {e}"),
    })?;
    let Value::Object(mut obj) = v else {
        return Err(WorkerFailure::schema("relay reply is not a JSON object"));
    };
    if let Some(ok) = obj.get("ok")
        && ok != &Value::Bool(true)
    {
        return Err(WorkerFailure::Request {
            detail: format!("relay refused the subscription: {}", relay_error(&obj)),
        });
    }
    match obj.remove("events") {
        Some(Value::Array(events)) => Ok(events),
        Some(other) => Err(WorkerFailure::schema(format!(
            "relay reply `events` must be an array, got {}",
            crate::protocol::type_name(&other)
        ))),
        None => Err(WorkerFailure::schema("relay reply `events` is missing")),
    }
}

/// Whether the relay took a posted message.
fn check_post_reply(body: &[u8], kind: MessageType) -> Result<(), WorkerFailure> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(());
    }
    let v: Value = serde_json::from_slice(body).map_err(|e| WorkerFailure::InvalidJson {
        detail: format!("relay reply to POST /events: {e}"),
    })?;
    if let Value::Object(obj) = &v
        && let Some(ok) = obj.get("ok")
        && ok != &Value::Bool(true)
    {
        return Err(WorkerFailure::Request {
            detail: format!("relay refused the {kind}: {}", relay_error(obj)),
        });
    }
    Ok(())
}

fn relay_error(obj: &serde_json::Map<String, Value>) -> String {
    let part = |k: &str| obj.get(k).and_then(Value::as_str).map(|s| clip(s, 200));
    match (part("error"), part("message")) {
        (Some(e), Some(m)) => format!("{e}: {m}"),
        (Some(x), None) | (None, Some(x)) => x,
        (None, None) => "no reason given".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relay_replies() {
        assert_eq!(
            parse_poll_reply(br#"{"ok":true,"events":[1,2]}"#)
                .unwrap()
                .len(),
            2
        );
        assert_eq!(parse_poll_reply(br#"{"events":[]}"#).unwrap().len(), 0);
        assert!(matches!(
            parse_poll_reply(br#"{"ok":false,"error":"FORBIDDEN"}"#),
            Err(WorkerFailure::Request { detail }) if detail.contains("FORBIDDEN")
        ));
        assert!(matches!(
            parse_poll_reply(b"nope"),
            Err(WorkerFailure::InvalidJson { .. })
        ));
        assert!(
            parse_poll_reply(br#"{"ok":true}"#)
                .unwrap_err()
                .to_string()
                .contains("`events` is missing")
        );
        assert!(check_post_reply(b"", MessageType::Request).is_ok());
        assert!(check_post_reply(br#"{"ok":true,"id":"m"}"#, MessageType::Request).is_ok());
        assert!(
            check_post_reply(
                br#"{"ok":false,"error":"INVALID_REQUEST"}"#,
                MessageType::Accept
            )
            .unwrap_err()
            .to_string()
            .contains("refused the ACCEPT: INVALID_REQUEST")
        );
    }
}
