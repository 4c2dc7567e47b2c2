//! One Agora negotiation, as the client: REQUEST → OFFER(s) → ACCEPT → RESULT over a
//! relay, within the stage budget.
//!
//! Receiving is a long-poll loop on `GET {relay}/events?since=…&recipient=<node did>&thread=<id>&timeout=N`.
//! Every event is verified ([`super::envelope::verify`], then: the sender is the agent,
//! the recipient this node, the thread ours, the id not replayed, the `request_id` ours,
//! the type legal in the thread state). Invalid events are dropped, logged and counted;
//! the reasons end up in the failure (or in the answer's notes).
//!
//! `since` handling, and why:
//! - the first poll uses the REQUEST's time minus ten minutes: the thread is new, so
//!   nothing older can be in it, and an agent whose clock runs a little behind is still
//!   delivered (a stale message is then rejected *by name* rather than never seen);
//! - `since` only advances to the `ts` of an *authenticated* event of this thread, and
//!   never backwards: an injected event with a future `ts` cannot push `since` past the
//!   agent's real replies;
//! - relays differ on whether `since` is inclusive, and an invalid event stays newer than
//!   `since`, so the same event can come back: each distinct event is handled once (a
//!   per-negotiation set of event digests), and a poll that returns early with nothing
//!   new is followed by a short growing pause instead of a busy loop;
//! - the node's own messages in a thread get strictly increasing timestamps, so an agent
//!   subscribed with an exclusive `since` also sees an ACCEPT sent within the same
//!   millisecond as the REQUEST.
//!
//! Ending a thread, and telling the agent:
//! - an envelope only the agent can have sent (signed by it, to this node, in this
//!   thread, with a fresh id) that is refused (wrong `request_id`, a message its state
//!   does not allow, an id it reused) gets a signed `ERROR` with code `INVALID_REQUEST`
//!   and the reason, and the negotiation ends at once (ERROR is terminal). Refusals a
//!   third party could cause (bad signature, wrong sender, recipient or thread, stale
//!   timestamp) are only recorded: answering them would let anyone end the thread;
//! - a thread the node gives up while it is open (its budget ran out, the round no
//!   longer needs the answer and drops the negotiation, the relay failed) gets a signed
//!   `CANCEL`, sent by a task of its own after the negotiation ends, so it never holds
//!   up the round.

use super::AgoraNode;
use super::envelope::{self, Envelope, MessageType, Rejection, clip, format_ts, new_id};
use super::relay::{Route, parse_poll_reply, post_message};
use super::replay::{RETAIN_MS, ReplayVerdict};
use super::thread::ThreadState;
use crate::client::{HttpCall, StageClient, join_endpoint};
use crate::protocol::WorkerFailure;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::time::Duration;
use tokio::time::Instant;
use url::Url;

/// Distinct events handled per negotiation; more is a flood and ends it.
pub const MAX_EVENTS_PER_THREAD: usize = 256;
/// Distinct rejection reasons kept for the failure detail and the notes.
const MAX_REASONS: usize = 8;
/// Notes attached to an answer.
pub const MAX_NOTES: usize = 16;
const BACKOFF_START: Duration = Duration::from_millis(25);
const BACKOFF_MAX: Duration = Duration::from_millis(200);

/// How long a CANCEL sent after a negotiation ended may take.
pub const CANCEL_WITHIN: Duration = Duration::from_secs(10);

/// Whether a RESULT's `output` can be used; a refusal is told to the agent (ERROR).
pub(crate) type OutputCheck = fn(&Value) -> Result<(), WorkerFailure>;

/// What to ask an agent.
pub(crate) struct Ask<'a> {
    pub node: &'a std::sync::Arc<AgoraNode>,
    pub agent_did: &'a str,
    pub client: &'a StageClient,
    pub relay: &'a Url,
    pub intent: &'a str,
    pub title: String,
    pub description: &'a str,
    pub params: Value,
    pub check: OutputCheck,
}

/// A RESULT with status `success`: its (not yet validated) `output`, and what the
/// negotiation noticed on the way.
#[derive(Debug)]
pub(crate) struct Delivered {
    pub output: Value,
    pub notes: Vec<String>,
}

/// Runs one negotiation within `client.limits().timeout`.
pub(crate) async fn run(ask: Ask<'_>) -> Result<Delivered, WorkerFailure> {
    let budget = ask.client.limits().timeout;
    let mut n = Negotiation::new(ask, budget);
    let deadline = n.deadline;
    let out = match tokio::time::timeout_at(deadline, n.drive()).await {
        // A relay call cut by the client's own stage timeout (which can fire in the same
        // timer tick as the deadline) is the same event: the budget ran out.
        Ok(Err(WorkerFailure::Timeout { .. })) | Err(_) => {
            n.cancel_reason = Some(format!(
                "the client's budget of {} ms ran out waiting for the agent's {}",
                budget.as_millis(),
                n.waiting_for()
            ));
            Err(n.timeout_failure())
        }
        Ok(result) => result,
    };
    if let Err(f) = &out
        && n.cancel_reason.is_none()
    {
        n.cancel_reason = Some(format!(
            "the client gave up the thread: {}",
            clip(&f.to_string(), 300)
        ));
    }
    // `n` is dropped here: a thread still open is cancelled (see `Drop`)
    out
}

struct Negotiation<'a> {
    ask: Ask<'a>,
    node_did: String,
    budget: Duration,
    deadline: Instant,
    thread_id: String,
    request_id: String,
    state: ThreadState,
    /// `(ms, as sent by the agent)`.
    since: (i64, String),
    /// `ts` of the node's last message in this thread.
    last_sent_ms: i64,
    seen: HashSet<[u8; 32]>,
    rejected: Vec<String>,
    rejected_count: usize,
    skipped: Vec<String>,
    notes: Vec<String>,
    /// Why the thread is given up, for the CANCEL (none: the round dropped it).
    cancel_reason: Option<String>,
}

/// A thread still open when its negotiation ends is cancelled, by a task of its own: a
/// negotiation that timed out, failed, or was dropped because the round no longer needs
/// the answer does not leave the agent's thread open, and the round does not wait for it.
impl Drop for Negotiation<'_> {
    fn drop(&mut self) {
        if !matches!(self.state, ThreadState::Pending | ThreadState::Active) {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let node = self.ask.node.clone();
        let (client, relay) = (self.ask.client.clone(), self.ask.relay.clone());
        let (agent, thread) = (self.ask.agent_did.to_string(), self.thread_id.clone());
        let ts = node.now_ms().max(self.last_sent_ms.saturating_add(1));
        let reason = self
            .cancel_reason
            .take()
            .unwrap_or_else(|| "the round ended without needing this answer".into());
        let payload = json!({
            "request_id": self.request_id,
            "reason": reason,
            "cancelled_at": format_ts(ts),
        });
        rt.spawn(async move {
            let sent = tokio::time::timeout(
                CANCEL_WITHIN,
                post_message(
                    Route {
                        node: &node,
                        client: &client,
                        relay: &relay,
                        agent: &agent,
                        thread: &thread,
                    },
                    MessageType::Cancel,
                    payload,
                    ts,
                ),
            )
            .await;
            match sent {
                Ok(Ok(())) => tracing::debug!(%agent, %thread, "agora: CANCEL sent"),
                Ok(Err(e)) => tracing::info!(%agent, %thread, error = %e, "agora: the CANCEL could not be sent"),
                Err(_) => tracing::info!(%agent, %thread, "agora: the CANCEL timed out"),
            }
        });
    }
}

impl<'a> Negotiation<'a> {
    fn new(ask: Ask<'a>, budget: Duration) -> Self {
        let node_did = ask.node.did();
        Self {
            ask,
            node_did,
            budget,
            deadline: Instant::now() + budget,
            thread_id: new_id("thread"),
            request_id: new_id("req"),
            state: ThreadState::Open,
            since: (i64::MIN, String::new()),
            last_sent_ms: i64::MIN,
            seen: HashSet::new(),
            rejected: vec![],
            rejected_count: 0,
            skipped: vec![],
            notes: vec![],
            cancel_reason: None,
        }
    }

    /// The agent's message the thread waits for.
    fn waiting_for(&self) -> &'static str {
        match self.state {
            ThreadState::Active => "RESULT",
            _ => "OFFER",
        }
    }

    fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    async fn drive(&mut self) -> Result<Delivered, WorkerFailure> {
        let max_latency_ms = self.budget.as_millis() as u64;
        let request = json!({
            "request_id": self.request_id,
            "intent": self.ask.intent,
            "title": self.ask.title,
            "description": self.ask.description,
            "params": self.ask.params,
            "constraints": {
                "max_cost_usd": self.ask.node.settings().max_cost_usd,
                "max_latency_ms": max_latency_ms,
            },
        });
        let sent_ms = self.send(MessageType::Request, request).await?;
        let first_since = sent_ms.saturating_sub(RETAIN_MS);
        self.since = (first_since, format_ts(first_since));

        let events_url = join_endpoint(self.ask.relay, "events")?;
        let max_poll = self.ask.node.settings().poll_timeout.as_secs().clamp(1, 60);
        let mut backoff = BACKOFF_START;
        loop {
            // Whole seconds, at least 1: the last poll may be cut by the stage budget,
            // which the caller's timeout enforces.
            let poll_secs = self.remaining().as_secs().clamp(1, max_poll);
            let mut url = events_url.clone();
            url.query_pairs_mut()
                .append_pair("since", &self.since.1)
                .append_pair("recipient", &self.node_did)
                .append_pair("thread", &self.thread_id)
                .append_pair("timeout", &poll_secs.to_string());
            let started = Instant::now();
            let reply = self
                .ask
                .client
                .call(HttpCall {
                    url,
                    body: None,
                    headers: vec![],
                })
                .await?;
            let events = parse_poll_reply(&reply.body)?;
            let mut fresh = 0usize;
            for event in &events {
                let digest: [u8; 32] = Sha256::digest(event.to_string().as_bytes()).into();
                if !self.seen.insert(digest) {
                    continue;
                }
                fresh += 1;
                if self.seen.len() > MAX_EVENTS_PER_THREAD {
                    return Err(WorkerFailure::Envelope {
                        detail: format!(
                            "more than {MAX_EVENTS_PER_THREAD} events in thread {}; giving up{}",
                            self.thread_id,
                            self.reasons_suffix()
                        ),
                    });
                }
                if let Some(done) = self.handle(event).await? {
                    return Ok(done);
                }
            }
            if fresh == 0 && started.elapsed() < Duration::from_secs(poll_secs) / 2 {
                tokio::time::sleep(backoff.min(self.remaining())).await;
                backoff = (backoff * 2).min(BACKOFF_MAX);
            } else {
                backoff = BACKOFF_START;
            }
        }
    }

    /// Handles one distinct event: `Some` ends the negotiation with an answer, `Err` with
    /// a failure, `None` keeps waiting.
    async fn handle(&mut self, raw: &Value) -> Result<Option<Delivered>, WorkerFailure> {
        let now = self.ask.node.now_ms();
        let verified = match envelope::verify(raw, now) {
            Ok(v) => v,
            Err(r) => return self.reject(r),
        };
        let env = &verified.envelope;
        if let Err(r) = self.check_route(env) {
            return self.reject(r);
        }
        match self.ask.node.remember(&env.id, verified.digest, now) {
            ReplayVerdict::Fresh => {}
            ReplayVerdict::Duplicate => {
                tracing::debug!(id = %clip(&env.id, 64), "agora: duplicate delivery ignored");
                return Ok(None);
            }
            ReplayVerdict::Replayed => {
                return self.refuse(Rejection::ReplayedId(clip(&env.id, 64))).await;
            }
            ReplayVerdict::Full => return self.reject(Rejection::ReplayCacheFull),
        }
        if verified.ts_ms > self.since.0 {
            self.since = (verified.ts_ms, env.ts.clone());
        }
        let kind = env.kind;
        let id = clip(&env.id, 64);
        match (kind, env.payload.get("request_id")) {
            (MessageType::Error, None) => {}
            (_, Some(Value::String(r))) if *r == self.request_id => {}
            (_, other) => {
                let got = match other {
                    Some(Value::String(s)) => format!("{:?}", clip(s, 64)),
                    Some(v) => crate::protocol::type_name(v).to_string(),
                    None => "no `payload.request_id`".to_string(),
                };
                return self
                    .refuse(Rejection::RequestId(format!(
                        "{kind} {id} carries {got}; expected {:?}",
                        self.request_id
                    )))
                    .await;
            }
        }
        if kind == MessageType::Offer && self.state == ThreadState::Active {
            // Several offers may be in flight when the ACCEPT goes out: not a violation.
            self.note(format!(
                "agora: late offer {id} ignored (an offer was already accepted)"
            ));
            return Ok(None);
        }
        let next = match self.state.on_received(kind) {
            Ok(next) => next,
            Err(violation) => {
                return self
                    .refuse(Rejection::OutOfState(format!("{violation} (message {id})")))
                    .await;
            }
        };
        self.act_on(verified.envelope, next, now).await
    }

    /// Checks that an authenticated envelope is for this negotiation: sent by the agent,
    /// to this node, in this thread. `Err` names the first check it fails.
    fn check_route(&self, env: &Envelope) -> Result<(), Rejection> {
        if env.sender.id != self.ask.agent_did {
            return Err(Rejection::WrongSender(format!(
                "{} is not the agent {}",
                clip(&env.sender.id, 64),
                self.ask.agent_did
            )));
        }
        if env.recipient.id != self.node_did {
            return Err(Rejection::WrongRecipient(format!(
                "{} is not this node",
                clip(&env.recipient.id, 64)
            )));
        }
        if env.thread.id != self.thread_id {
            return Err(Rejection::WrongThread(format!(
                "{} is not {}",
                clip(&env.thread.id, 64),
                self.thread_id
            )));
        }
        Ok(())
    }

    /// Acts on an agent's message that passed every check, `next` being the thread
    /// state it leads to: an OFFER is considered, a RESULT's output checked and
    /// delivered (or refused), an ERROR ends the negotiation with the agent's failure.
    async fn act_on(
        &mut self,
        env: Envelope,
        next: ThreadState,
        now: i64,
    ) -> Result<Option<Delivered>, WorkerFailure> {
        match env.kind {
            MessageType::Offer => {
                self.consider_offer(&env, now).await?;
                Ok(None)
            }
            MessageType::Result => match self.result(env) {
                Ok(done) => match (self.ask.check)(&done.output) {
                    Ok(()) => {
                        self.state = next;
                        Ok(Some(done))
                    }
                    Err(f) => self.refuse_result(f).await,
                },
                // the agent's own report of a failed job: the thread is complete
                Err(f @ WorkerFailure::Rejected { .. }) => {
                    self.state = next;
                    Err(f)
                }
                Err(f) => self.refuse_result(f).await,
            },
            MessageType::Error => {
                self.state = next;
                Err(error_failure(&env.payload))
            }
            // Client messages are refused by the state machine in `handle`.
            MessageType::Request | MessageType::Accept | MessageType::Cancel => Ok(None),
        }
    }

    fn reject(&mut self, r: Rejection) -> Result<Option<Delivered>, WorkerFailure> {
        tracing::warn!(
            agent = %self.ask.agent_did,
            thread = %self.thread_id,
            check = r.kind(),
            reason = %r,
            "agora: envelope rejected"
        );
        self.rejected_count += 1;
        let reason = r.to_string();
        if self.rejected.len() < MAX_REASONS && !self.rejected.contains(&reason) {
            self.rejected.push(reason);
        }
        Ok(None)
    }

    /// Refuses an envelope only the agent can have sent: a signed ERROR
    /// (`INVALID_REQUEST`, the reason) tells it why and ends the thread, and the
    /// negotiation ends with the refusal instead of waiting out its budget.
    async fn refuse(&mut self, r: Rejection) -> Result<Option<Delivered>, WorkerFailure> {
        let waiting_for = self.waiting_for();
        let reason = r.to_string();
        let _ = self.reject(r.clone());
        let error = json!({
            "request_id": self.request_id,
            "code": "INVALID_REQUEST",
            "message": clip(&reason, 500),
            "details": {"check": r.kind()},
        });
        let told = match self.send(MessageType::Error, error).await {
            Ok(_) => "the agent was told with a signed ERROR (INVALID_REQUEST)".to_string(),
            Err(e) => format!("the ERROR to the agent could not be sent: {e}"),
        };
        Err(WorkerFailure::Envelope {
            detail: format!("no valid {waiting_for}: refused {reason}; {told}"),
        })
    }

    /// Refuses a RESULT whose content cannot be used: a signed ERROR
    /// (`INVALID_REQUEST`, the reason) tells the agent, and the failure stands.
    async fn refuse_result(
        &mut self,
        f: WorkerFailure,
    ) -> Result<Option<Delivered>, WorkerFailure> {
        let error = json!({
            "request_id": self.request_id,
            "code": "INVALID_REQUEST",
            "message": clip(&f.to_string(), 500),
            "details": {"check": f.kind()},
        });
        if let Err(e) = self.send(MessageType::Error, error).await {
            tracing::info!(agent = %self.ask.agent_did, error = %e, "agora: the ERROR for a refused RESULT could not be sent");
        }
        Err(f)
    }

    fn note(&mut self, note: String) {
        if self.notes.len() < MAX_NOTES {
            self.notes.push(note);
        }
    }

    /// Accepts the offer if it fits the budget and is still valid; otherwise records why
    /// it was skipped and keeps waiting for another.
    async fn consider_offer(&mut self, env: &Envelope, now: i64) -> Result<(), WorkerFailure> {
        let id = clip(&env.id, 64);
        let max = self.ask.node.settings().max_cost_usd;
        let verdict = super::offer::check(&env.payload, max, now);
        let amount = match verdict {
            Ok(a) => a,
            Err(why) => {
                tracing::info!(agent = %self.ask.agent_did, offer = %id, %why, "agora: offer skipped");
                if self.skipped.len() < MAX_REASONS {
                    self.skipped.push(format!("offer {id}: {why}"));
                }
                return Ok(());
            }
        };
        let remaining_ms = self.remaining().as_millis() as i64;
        let accept = json!({
            "request_id": self.request_id,
            "offer_id": env.id,
            "accepted_at": format_ts(now),
            "terms": {
                "price_usd": amount,
                "deadline": format_ts(now.saturating_add(remaining_ms)),
            },
        });
        self.send(MessageType::Accept, accept).await?;
        self.note(format!("agora: accepted offer {id} at {amount} USD"));
        Ok(())
    }

    fn result(&mut self, env: Envelope) -> Result<Delivered, WorkerFailure> {
        let mut p = env.payload;
        let status = match p.get("status") {
            Some(Value::String(s)) => s.clone(),
            Some(v) => {
                return Err(WorkerFailure::schema(format!(
                    "RESULT `payload.status` must be a string, got {}",
                    crate::protocol::type_name(v)
                )));
            }
            None => return Err(WorkerFailure::schema("RESULT `payload.status` is missing")),
        };
        if status != "success" {
            let why = p
                .get("error")
                .or_else(|| p.get("message"))
                .map(|v| match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .unwrap_or_else(|| "no reason given".to_string());
            return Err(WorkerFailure::Rejected {
                code: clip_code(&status),
                detail: format!(
                    "RESULT status {:?}: {}",
                    clip(&status, 32),
                    clip(&why, 1024)
                ),
            });
        }
        let output = match p.get_mut("output") {
            Some(v) => v.take(),
            None => return Err(WorkerFailure::schema("RESULT `payload.output` is missing")),
        };
        let mut notes = std::mem::take(&mut self.notes);
        for s in &self.skipped {
            notes.push(format!("agora: skipped {s}"));
        }
        for r in &self.rejected {
            notes.push(format!("agora: dropped envelope: {r}"));
        }
        if self.rejected_count > self.rejected.len() {
            notes.push(format!(
                "agora: {} envelope(s) dropped in total",
                self.rejected_count
            ));
        }
        notes.truncate(MAX_NOTES);
        Ok(Delivered { output, notes })
    }

    /// Signs and posts one of this node's messages, advancing the thread state; returns
    /// the message's `ts` (Unix ms).
    async fn send(&mut self, kind: MessageType, payload: Value) -> Result<i64, WorkerFailure> {
        let next = self
            .state
            .on_sent(kind)
            .map_err(|v| WorkerFailure::Request {
                detail: v.to_string(),
            })?;
        // Strictly increasing within the thread: an agent polling with an exclusive
        // `since` (the REQUEST's ts) would never see an ACCEPT stamped in the same ms.
        let now = self
            .ask
            .node
            .now_ms()
            .max(self.last_sent_ms.saturating_add(1));
        self.last_sent_ms = now;
        let to = Route {
            node: self.ask.node,
            client: self.ask.client,
            relay: self.ask.relay,
            agent: self.ask.agent_did,
            thread: &self.thread_id,
        };
        post_message(to, kind, payload, now).await?;
        self.state = next;
        Ok(now)
    }

    fn reasons_suffix(&self) -> String {
        if self.rejected.is_empty() {
            String::new()
        } else {
            format!(
                "; {} envelope(s) rejected: {}",
                self.rejected_count,
                self.rejected.join("; ")
            )
        }
    }

    /// The failure when the budget ran out: rejected envelopes are named (they are the
    /// likely reason no answer came), else unacceptable offers, else a plain timeout.
    fn timeout_failure(&self) -> WorkerFailure {
        let ms = self.budget.as_millis() as u64;
        let waiting_for = self.waiting_for();
        if self.rejected_count > 0 {
            WorkerFailure::Envelope {
                detail: format!(
                    "no valid {waiting_for} within {ms} ms; {} envelope(s) rejected: {}",
                    self.rejected_count,
                    self.rejected.join("; ")
                ),
            }
        } else if !self.skipped.is_empty() && self.state == ThreadState::Pending {
            WorkerFailure::Rejected {
                code: "NO_ACCEPTABLE_OFFER".into(),
                detail: format!(
                    "no acceptable offer within {ms} ms: {}",
                    self.skipped.join("; ")
                ),
            }
        } else {
            WorkerFailure::Timeout { after_ms: ms }
        }
    }
}

/// The failure an agent's ERROR message stands for.
fn error_failure(p: &Value) -> WorkerFailure {
    let code = match p.get("code") {
        Some(Value::String(c)) if !c.trim().is_empty() => clip_code(c),
        Some(v) => {
            return WorkerFailure::schema(format!(
                "ERROR `payload.code` must be a non-empty string, got {}",
                crate::protocol::type_name(v)
            ));
        }
        None => return WorkerFailure::schema("ERROR `payload.code` is missing"),
    };
    let detail = match p.get("message") {
        Some(Value::String(m)) => clip(m, 1024),
        _ => "no message".to_string(),
    };
    WorkerFailure::Rejected { code, detail }
}

/// An error code as a short identifier (`[A-Za-z0-9_.-]`, at most 64 characters).
fn clip_code(s: &str) -> String {
    s.chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_message_maps_to_rejected() {
        let f = error_failure(&json!({"code": "INSUFFICIENT_BUDGET", "message": "too low"}));
        assert_eq!(
            f,
            WorkerFailure::Rejected {
                code: "INSUFFICIENT_BUDGET".into(),
                detail: "too low".into()
            }
        );
        let f = error_failure(&json!({"code": "bad code\n<script>", "message": 3}));
        assert_eq!(
            f,
            WorkerFailure::Rejected {
                code: "bad_code__script_".into(),
                detail: "no message".into()
            }
        );
        assert!(
            error_failure(&json!({"message": "x"}))
                .to_string()
                .contains("`payload.code` is missing")
        );
    }

    #[test]
    fn ids_are_random_and_prefixed() {
        let a = new_id("msg");
        assert!(a.starts_with("msg_") && a.len() == 36, "{a}");
        assert_ne!(a, new_id("msg"));
    }
}
