//! The Agora envelope: its typed fields, RFC 3339 timestamps, signing (Ed25519 over the
//! RFC 8785 JCS form of the envelope without `sig`, base64url without padding) and the
//! verification every received envelope goes through before it is looked at.
//!
//! Verification works on the JSON *as received*: the signature is checked over the JCS of
//! the received object minus `sig`, so fields this implementation does not know are
//! covered too, and nothing is re-serialized from a typed struct before checking.

use super::didkey;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ed25519_dalek::{Signature, Signer, SigningKey};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// The only protocol version spoken.
pub const VERSION: &str = "1.0";
/// `ts` must lie strictly within this distance of the receiver's clock (spec: ±5 min).
pub const TS_WINDOW_MS: i64 = 5 * 60 * 1000;
/// Largest envelope accepted (bytes of its canonical form).
pub const MAX_ENVELOPE_BYTES: usize = 256 * 1024;
/// Bounds of the envelope's short string fields (bytes): `id` and `thread.id`.
pub const MAX_ID_BYTES: usize = 128;
/// Longest `ts` accepted (bytes).
pub const MAX_TS_BYTES: usize = 64;
/// Longest `sender.name` accepted (bytes).
pub const MAX_NAME_BYTES: usize = 256;
/// Longest `sender.url` accepted (bytes).
pub const MAX_URL_BYTES: usize = 2048;
/// A base64url Ed25519 signature is 86 characters (88 padded).
pub const MAX_SIG_CHARS: usize = 90;
/// Default of `meta.ttl` (seconds).
pub const DEFAULT_TTL_SECS: u64 = 300;
/// Upper bound of `meta.ttl` (seconds): a longer one counts as this long.
pub const MAX_TTL_SECS: u64 = 86_400;

/// The message types of Agora v1.0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum MessageType {
    /// The client asks an agent for work (opens a thread).
    Request,
    /// The agent offers to do the requested work, at a price.
    Offer,
    /// The client takes an offer.
    Accept,
    /// The agent delivers the work's output.
    Result,
    /// Either side ends the thread with a failure.
    Error,
    /// The client withdraws its request.
    Cancel,
}

impl MessageType {
    /// The wire name (`REQUEST`, `OFFER`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            MessageType::Request => "REQUEST",
            MessageType::Offer => "OFFER",
            MessageType::Accept => "ACCEPT",
            MessageType::Result => "RESULT",
            MessageType::Error => "ERROR",
            MessageType::Cancel => "CANCEL",
        }
    }
}

impl std::fmt::Display for MessageType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who sent an envelope (`sender`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sender {
    /// The sender's Ed25519 `did:key`, which the signature must verify against.
    pub id: String,
    /// A display name, if the sender gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Where the sender can be reached, if it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// Whom an envelope is addressed to (`recipient`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recipient {
    /// The recipient's `did:key`.
    pub id: String,
}

/// The thread an envelope belongs to (`thread`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadRef {
    /// The thread id, chosen by the client that opened it.
    pub id: String,
}

/// Delivery metadata of an envelope (`meta`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    /// How long the message stays valid after its `ts` (seconds; at most
    /// [`MAX_TTL_SECS`] counts).
    #[serde(default = "default_ttl")]
    pub ttl: u64,
    /// Relay hop count (this node sends 0).
    #[serde(default)]
    pub hop: u64,
}

fn default_ttl() -> u64 {
    DEFAULT_TTL_SECS
}

/// An envelope without its signature: what is signed, and what a verified envelope
/// is read into.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    /// The protocol version ([`VERSION`]).
    pub version: String,
    /// The message id, unique per sender (replays are told by it).
    pub id: String,
    /// When the message was sent, RFC 3339.
    pub ts: String,
    /// The message type (`type`).
    #[serde(rename = "type")]
    pub kind: MessageType,
    /// Who sent it.
    pub sender: Sender,
    /// Whom it is for.
    pub recipient: Recipient,
    /// The type-specific content (a REQUEST's intent and params, an OFFER's price, …).
    pub payload: Value,
    /// The thread it belongs to.
    pub thread: ThreadRef,
    /// Its time to live and hop count.
    pub meta: Meta,
}

/// A problem producing a signed envelope (never caused by received data).
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    /// The envelope did not serialize to a JSON object.
    #[error("cannot sign envelope: envelope is not an object")]
    NotAnObject,
    /// The envelope, or its canonical (JCS) form, could not be serialized.
    #[error("cannot sign envelope: {0}")]
    Json(#[source] serde_json::Error),
}

impl Envelope {
    /// Signs the envelope with `key` and returns the JSON to send (the envelope plus
    /// `sig`). The sender's did is not checked against the key here (tests use that
    /// to build wrongly signed envelopes).
    pub fn sign(&self, key: &SigningKey) -> Result<Value, SignError> {
        let mut obj = match serde_json::to_value(self) {
            Ok(Value::Object(o)) => o,
            Ok(_) => return Err(SignError::NotAnObject),
            Err(e) => return Err(SignError::Json(e)),
        };
        let sig = sign_object(&obj, key)?;
        obj.insert("sig".into(), Value::String(sig));
        Ok(Value::Object(obj))
    }
}

/// The base64url signature of a JSON object (which must not hold `sig`).
pub fn sign_object(obj: &Map<String, Value>, key: &SigningKey) -> Result<String, SignError> {
    let canonical = jcs(obj).map_err(SignError::Json)?;
    Ok(URL_SAFE_NO_PAD.encode(key.sign(&canonical).to_bytes()))
}

/// RFC 8785 canonical bytes of a JSON value.
pub fn jcs<T: Serialize>(v: &T) -> Result<Vec<u8>, serde_json::Error> {
    serde_json_canonicalizer::to_vec(v)
}

/// Decodes base64url, with or without `=` padding.
pub fn decode_b64url(s: &str) -> Option<Vec<u8>> {
    let unpadded = s
        .strip_suffix("==")
        .or_else(|| s.strip_suffix('='))
        .unwrap_or(s);
    URL_SAFE_NO_PAD.decode(unpadded).ok()
}

/// A received envelope that passed [`verify`].
#[derive(Debug, Clone, PartialEq)]
pub struct Verified {
    /// The envelope as received, without `sig`.
    pub envelope: Envelope,
    /// `ts` in Unix milliseconds.
    pub ts_ms: i64,
    /// SHA-256 of the canonical form of the whole signed envelope: equal digests are
    /// the same message delivered twice; a different digest under a seen id is a replay.
    pub digest: [u8; 32],
}

/// Why a received envelope was dropped. The `Display` text names the check.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// Not an envelope: not an object, a field missing or of the wrong type, a bound
    /// broken; holds what is wrong.
    #[error("malformed envelope: {0}")]
    Malformed(String),
    /// The canonical form is over [`MAX_ENVELOPE_BYTES`]; holds its size in bytes.
    #[error("envelope is {0} bytes; the limit is {MAX_ENVELOPE_BYTES}")]
    Oversize(usize),
    /// A `version` other than [`VERSION`]; holds it (clipped).
    #[error("unsupported version {0:?} (expected \"1.0\")")]
    Version(String),
    /// `sender.id` is not an Ed25519 `did:key`; holds why.
    #[error("sender id is not an Ed25519 did:key: {0}")]
    SenderDid(String),
    /// `sig` is missing, badly encoded or does not verify; holds which.
    #[error("bad signature: {0}")]
    Signature(String),
    /// `ts` is not RFC 3339 or lies outside the ±5 min window; holds which.
    #[error("stale timestamp: {0}")]
    Timestamp(String),
    /// `ts` plus `meta.ttl` has passed.
    #[error("expired message: {0}")]
    Expired(String),
    /// Sent by someone other than the agent the thread is with.
    #[error("wrong sender: {0}")]
    WrongSender(String),
    /// Addressed to someone other than this node.
    #[error("wrong recipient: {0}")]
    WrongRecipient(String),
    /// Belongs to another thread than the one being negotiated.
    #[error("wrong thread: {0}")]
    WrongThread(String),
    /// A different message under an id already seen; holds the id (clipped).
    #[error("replayed id {0:?}: a different message already used it")]
    ReplayedId(String),
    /// The replay cache has no room, so the id cannot be tracked.
    #[error("replay cache full: message ids cannot be tracked, message refused")]
    ReplayCacheFull,
    /// A message the thread's state does not allow (see [`super::thread`]); holds the
    /// `thread::Violation`'s text and the message id. (Text, not the violation itself:
    /// `thread` imports this module's `MessageType`.)
    #[error("out-of-order message: {0}")]
    OutOfState(String),
    /// A message whose `payload.request_id` is not the id of the thread's REQUEST.
    #[error("request_id mismatch: {0}")]
    RequestId(String),
}

impl Rejection {
    /// A short stable label (for logs and counters).
    pub fn kind(&self) -> &'static str {
        match self {
            Rejection::Malformed(_) => "malformed",
            Rejection::Oversize(_) => "oversize",
            Rejection::Version(_) => "version",
            Rejection::SenderDid(_) => "sender_did",
            Rejection::Signature(_) => "signature",
            Rejection::Timestamp(_) => "timestamp",
            Rejection::Expired(_) => "expired",
            Rejection::WrongSender(_) => "wrong_sender",
            Rejection::WrongRecipient(_) => "wrong_recipient",
            Rejection::WrongThread(_) => "wrong_thread",
            Rejection::ReplayedId(_) => "replayed_id",
            Rejection::ReplayCacheFull => "replay_cache_full",
            Rejection::OutOfState(_) => "out_of_state",
            Rejection::RequestId(_) => "request_id",
        }
    }
}

/// Checks one received envelope: structure and bounds, version, the sender's did:key,
/// the Ed25519 signature over the JCS form without `sig`, the ±5 min timestamp window
/// and `meta.ttl`. Who sent it, to which thread, replays and the thread state are the
/// caller's checks (they need context).
pub fn verify(raw: &Value, now_ms: i64) -> Result<Verified, Rejection> {
    let obj = raw
        .as_object()
        .ok_or_else(|| Rejection::Malformed("envelope is not a JSON object".into()))?;
    let sig = match obj.get("sig") {
        Some(Value::String(s)) => s,
        Some(_) => return Err(Rejection::Malformed("`sig` must be a string".into())),
        None => return Err(Rejection::Signature("`sig` is missing".into())),
    };
    if sig.len() > MAX_SIG_CHARS {
        return Err(Rejection::Signature(format!(
            "`sig` is {} characters; an Ed25519 signature is 86",
            sig.len()
        )));
    }
    let mut unsigned = obj.clone();
    unsigned.remove("sig");
    let canonical = jcs(&unsigned).map_err(|e| Rejection::Malformed(e.to_string()))?;
    if canonical.len() > MAX_ENVELOPE_BYTES {
        return Err(Rejection::Oversize(canonical.len()));
    }
    let envelope: Envelope =
        serde_path_to_error::deserialize(Value::Object(unsigned)).map_err(|e| {
            let path = e.path().to_string();
            Rejection::Malformed(format!(
                "`{path}`: {}",
                clip(&e.into_inner().to_string(), 160)
            ))
        })?;
    check_bounds(&envelope)?;
    if envelope.version != VERSION {
        return Err(Rejection::Version(clip(&envelope.version, 16)));
    }
    let key = didkey::did_to_verifying_key(&envelope.sender.id)
        .map_err(|e| Rejection::SenderDid(e.to_string()))?;
    let sig_bytes =
        decode_b64url(sig).ok_or_else(|| Rejection::Signature("`sig` is not base64url".into()))?;
    let sig_bytes: [u8; 64] = sig_bytes.as_slice().try_into().map_err(|_| {
        Rejection::Signature(format!(
            "`sig` decodes to {} bytes, not 64",
            sig_bytes.len()
        ))
    })?;
    key.verify_strict(&canonical, &Signature::from_bytes(&sig_bytes))
        .map_err(|_| {
            Rejection::Signature(format!(
                "does not verify against the sender's did:key (message {})",
                clip(&envelope.id, 64)
            ))
        })?;
    let ts_ms = parse_ts(&envelope.ts).ok_or_else(|| {
        Rejection::Timestamp(format!(
            "`ts` {:?} is not an RFC 3339 timestamp",
            clip(&envelope.ts, 40)
        ))
    })?;
    let skew = now_ms.saturating_sub(ts_ms);
    if skew.unsigned_abs() >= TS_WINDOW_MS as u64 {
        return Err(Rejection::Timestamp(format!(
            "`ts` {} is {} s {} the local clock; the window is ±{} s",
            envelope.ts,
            skew.unsigned_abs() / 1000,
            if skew > 0 { "behind" } else { "ahead of" },
            TS_WINDOW_MS / 1000
        )));
    }
    let ttl_ms = (envelope.meta.ttl.min(MAX_TTL_SECS) as i64) * 1000;
    if now_ms > ts_ms.saturating_add(ttl_ms) {
        return Err(Rejection::Expired(format!(
            "`ts` {} + `meta.ttl` {} s has passed",
            envelope.ts, envelope.meta.ttl
        )));
    }
    let mut full = canonical;
    full.extend_from_slice(sig.as_bytes());
    let digest: [u8; 32] = Sha256::digest(&full).into();
    Ok(Verified {
        envelope,
        ts_ms,
        digest,
    })
}

fn check_bounds(e: &Envelope) -> Result<(), Rejection> {
    let short = |name: &str, v: &str, max: usize, required: bool| {
        if required && v.is_empty() {
            return Err(Rejection::Malformed(format!("`{name}` is empty")));
        }
        if v.len() > max {
            return Err(Rejection::Malformed(format!(
                "`{name}` is {} bytes; the limit is {max}",
                v.len()
            )));
        }
        if v.chars().any(char::is_control) {
            return Err(Rejection::Malformed(format!(
                "`{name}` holds control characters"
            )));
        }
        Ok(())
    };
    short("version", &e.version, 16, true)?;
    short("id", &e.id, MAX_ID_BYTES, true)?;
    short("ts", &e.ts, MAX_TS_BYTES, true)?;
    short("sender.id", &e.sender.id, didkey::MAX_DID_LEN, true)?;
    if let Some(n) = &e.sender.name {
        short("sender.name", n, MAX_NAME_BYTES, false)?;
    }
    if let Some(u) = &e.sender.url {
        short("sender.url", u, MAX_URL_BYTES, false)?;
    }
    short("recipient.id", &e.recipient.id, didkey::MAX_DID_LEN, true)?;
    short("thread.id", &e.thread.id, MAX_ID_BYTES, true)?;
    Ok(())
}

/// At most `max` characters of untrusted text, control characters replaced.
pub fn clip(s: &str, max: usize) -> String {
    let mut out: String = s
        .chars()
        .take(max)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if s.chars().nth(max).is_some() {
        out.push('…');
    }
    out
}

/// Unix milliseconds as RFC 3339 UTC with milliseconds (`2026-02-02T15:30:00.000Z`).
pub fn format_ts(ms: i64) -> String {
    const FORMAT: &[time::format_description::BorrowedFormatItem<'static>] = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
    );
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| t.format(FORMAT).ok())
        .unwrap_or_else(|| "1970-01-01T00:00:00.000Z".to_string())
}

/// Parses an RFC 3339 date-time (`YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`) into Unix
/// milliseconds (fractions beyond milliseconds are truncated). `None` if invalid.
pub fn parse_ts(s: &str) -> Option<i64> {
    // the `T` separator is required (RFC 3339 lets applications accept a space; the
    // protocol's envelopes use `T`)
    if s.len() > MAX_TS_BYTES || !matches!(s.as_bytes().get(10), Some(b'T' | b't')) {
        return None;
    }
    let t = time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok()?;
    i64::try_from(t.unix_timestamp_nanos().div_euclid(1_000_000)).ok()
}

/// `prefix_` + 32 random hex digits.
pub(crate) fn new_id(prefix: &str) -> String {
    let bytes: [u8; 16] = rand::random();
    let mut s = String::with_capacity(prefix.len() + 33);
    s.push_str(prefix);
    s.push('_');
    for b in bytes {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// RFC 8785, section 3.2.2: numbers, string escaping, literals (and the top-level
    /// property sorting that puts `literals` first).
    #[test]
    fn jcs_rfc8785_section_3_2_2() {
        let input = r#"{
          "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
          "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
          "literals": [null, true, false]
        }"#;
        let v: Value = serde_json::from_str(input).unwrap();
        let out = String::from_utf8(jcs(&v).unwrap()).unwrap();
        let expected = "{\"literals\":[null,true,false],\"numbers\":[333333333.3333333,1e+30,4.5,0.002,1e-27],\"string\":\"€$\\u000f\\nA'B\\\"\\\\\\\\\\\"/\"}";
        assert_eq!(out, expected);
    }

    /// RFC 8785, section 3.2.3: properties sorted by UTF-16 code units (the emoji's
    /// surrogate pair sorts before U+FB33, unlike in UTF-8 or code point order).
    #[test]
    fn jcs_rfc8785_section_3_2_3_sorting() {
        let input = r#"{
          "\u20ac": "Euro Sign",
          "\r": "Carriage Return",
          "\ufb33": "Hebrew Letter Dalet With Dagesh",
          "1": "One",
          "\ud83d\ude00": "Emoji: Grinning Face",
          "\u0080": "Control",
          "\u00f6": "Latin Small Letter O With Diaeresis"
        }"#;
        let v: Value = serde_json::from_str(input).unwrap();
        let out = String::from_utf8(jcs(&v).unwrap()).unwrap();
        let order: Vec<&str> = out
            .split("\":\"")
            .skip(1)
            .map(|s| s.split('"').next().unwrap())
            .collect();
        assert_eq!(
            order,
            [
                "Carriage Return",
                "One",
                "Control",
                "Latin Small Letter O With Diaeresis",
                "Euro Sign",
                "Emoji: Grinning Face",
                "Hebrew Letter Dalet With Dagesh"
            ]
        );
    }

    /// The JCS reference test data (cyberphone/json-canonicalization, by the RFC's
    /// author): `testdata/input/weird.json` → `testdata/output/weird.json`.
    #[test]
    fn jcs_reference_weird() {
        let input = r#"{
          "\u20ac": "Euro Sign",
          "1": "One",
          "\u0080": "Control\u007f",
          "\ud83d\ude02": "Smiley",
          "\u00f6": "Latin Small Letter O With Diaeresis",
          "\ufb33": "Hebrew Letter Dalet With Dagesh",
          "</script>": "Browser Challenge"
        }"#;
        let v: Value = serde_json::from_str(input).unwrap();
        let out = String::from_utf8(jcs(&v).unwrap()).unwrap();
        let expected = "{\"1\":\"One\",\"</script>\":\"Browser Challenge\",\"\u{80}\":\"Control\u{7f}\",\"\u{f6}\":\"Latin Small Letter O With Diaeresis\",\"\u{20ac}\":\"Euro Sign\",\"\u{1f602}\":\"Smiley\",\"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"}";
        assert_eq!(out, expected);
    }

    #[test]
    fn timestamps_parse_and_format() {
        assert_eq!(parse_ts("2026-02-02T15:30:00Z"), Some(1_770_046_200_000));
        assert_eq!(
            parse_ts("2026-02-02T16:30:00+01:00"),
            Some(1_770_046_200_000)
        );
        assert_eq!(parse_ts("2026-02-02t15:30:00.5z"), Some(1_770_046_200_500));
        assert_eq!(
            parse_ts("2026-02-02T15:30:00.123456789Z"),
            Some(1_770_046_200_123)
        );
        assert_eq!(parse_ts("2000-02-29T23:59:59.999Z"), Some(951_868_799_999));
        assert_eq!(parse_ts("1969-12-31T23:59:59Z"), Some(-1000));
        for bad in [
            "2026-02-30T00:00:00Z",
            "2026-13-01T00:00:00Z",
            "2026-02-02 15:30:00Z",
            "2026-02-02T15:30:00",
            "2026-02-02T24:00:00Z",
            "2026-02-02T15:30:00.Z",
            "2026-02-02T15:30:00+0100",
            "2026-02-02T15:30:00Zjunk",
            "2025-02-29T00:00:00Z",
            "+2026-02-02T15:30:00Z",
        ] {
            assert_eq!(parse_ts(bad), None, "{bad}");
        }
        assert_eq!(format_ts(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_ts(1_770_046_200_123), "2026-02-02T15:30:00.123Z");
        for ms in [
            -1000,
            0,
            951_868_799_999,
            1_770_046_200_123,
            4_102_444_800_000,
        ] {
            assert_eq!(parse_ts(&format_ts(ms)), Some(ms));
        }
    }

    fn key(seed: u8) -> SigningKey {
        SigningKey::from_bytes(&[seed; 32])
    }

    fn envelope(k: &SigningKey, ts_ms: i64) -> Envelope {
        Envelope {
            version: VERSION.into(),
            id: "msg_1".into(),
            ts: format_ts(ts_ms),
            kind: MessageType::Offer,
            sender: Sender {
                id: didkey::public_key_to_did(&k.verifying_key().to_bytes()),
                name: Some("agent".into()),
                url: None,
            },
            recipient: Recipient {
                id: didkey::public_key_to_did(&key(9).verifying_key().to_bytes()),
            },
            payload: json!({"request_id": "req_1", "price": {"amount": 0.005, "currency": "USD"}}),
            thread: ThreadRef {
                id: "thread_1".into(),
            },
            meta: Meta { ttl: 300, hop: 0 },
        }
    }

    const NOW: i64 = 1_770_046_200_000;

    #[test]
    fn sign_and_verify_roundtrip() {
        let k = key(1);
        let signed = envelope(&k, NOW).sign(&k).unwrap();
        let sig = signed["sig"].as_str().unwrap();
        assert_eq!(sig.len(), 86);
        assert!(!sig.contains(['=', '+', '/']));
        let v = verify(&signed, NOW + 1000).unwrap();
        assert_eq!(v.envelope, envelope(&k, NOW));
        assert_eq!(v.ts_ms, NOW);
        // A padded signature is accepted too.
        let mut padded = signed.clone();
        padded["sig"] = json!(format!("{sig}=="));
        assert_eq!(verify(&padded, NOW).unwrap().envelope.id, "msg_1");
        // Key order and whitespace on the wire do not matter (JCS).
        let text = serde_json::to_string_pretty(&signed).unwrap();
        let reparsed: Value = serde_json::from_str(&text).unwrap();
        assert!(verify(&reparsed, NOW).is_ok());
    }

    #[test]
    fn tampering_is_caught_by_name() {
        let k = key(1);
        let signed = envelope(&k, NOW).sign(&k).unwrap();
        let mut tampered = signed.clone();
        tampered["payload"]["price"]["amount"] = json!(0.0);
        let err = verify(&tampered, NOW).unwrap_err();
        assert_eq!(err.kind(), "signature", "{err}");
        // An unknown top-level field is covered by the signature as well.
        let mut extra = signed.clone();
        extra["note"] = json!("added later");
        assert_eq!(verify(&extra, NOW).unwrap_err().kind(), "signature");
        // Signed by another key than the sender's did.
        let other = envelope(&k, NOW).sign(&key(2)).unwrap();
        assert_eq!(verify(&other, NOW).unwrap_err().kind(), "signature");
        let mut nosig = signed.clone();
        nosig.as_object_mut().unwrap().remove("sig");
        assert!(
            verify(&nosig, NOW)
                .unwrap_err()
                .to_string()
                .contains("`sig` is missing")
        );
        let mut badsig = signed.clone();
        badsig["sig"] = json!("not base64!");
        assert!(
            verify(&badsig, NOW)
                .unwrap_err()
                .to_string()
                .contains("base64url")
        );
    }

    #[test]
    fn timestamp_window_version_and_structure() {
        let k = key(1);
        let signed = envelope(&k, NOW).sign(&k).unwrap();
        // ±5 minutes, exclusive.
        assert!(verify(&signed, NOW + TS_WINDOW_MS - 1).is_ok());
        let late = verify(&signed, NOW + TS_WINDOW_MS).unwrap_err();
        assert_eq!(late.kind(), "timestamp");
        assert!(late.to_string().contains("stale timestamp"), "{late}");
        assert_eq!(
            verify(&signed, NOW - TS_WINDOW_MS).unwrap_err().kind(),
            "timestamp"
        );
        assert!(verify(&signed, NOW - TS_WINDOW_MS + 1).is_ok());
        // ttl shorter than the window.
        let mut short = envelope(&k, NOW);
        short.meta.ttl = 10;
        let short = short.sign(&k).unwrap();
        assert_eq!(verify(&short, NOW + 11_000).unwrap_err().kind(), "expired");
        // Version must match exactly.
        let mut v2 = envelope(&k, NOW);
        v2.version = "1.1".into();
        let err = verify(&v2.sign(&k).unwrap(), NOW).unwrap_err();
        assert_eq!(err.kind(), "version");
        assert!(err.to_string().contains("\"1.1\""));
        // Structure: unknown type, missing thread, oversize.
        let mut t = signed.clone();
        t["type"] = json!("BID");
        assert!(verify(&t, NOW).unwrap_err().to_string().contains("`type`"));
        let mut t = signed.clone();
        t.as_object_mut().unwrap().remove("thread");
        assert!(verify(&t, NOW).unwrap_err().to_string().contains("thread"));
        let mut big = envelope(&k, NOW);
        big.payload = json!({"blob": "x".repeat(MAX_ENVELOPE_BYTES)});
        assert_eq!(
            verify(&big.sign(&k).unwrap(), NOW).unwrap_err().kind(),
            "oversize"
        );
        let mut sender = envelope(&k, NOW);
        sender.sender.id = "did:web:example.com".into();
        assert_eq!(
            verify(&sender.sign(&k).unwrap(), NOW).unwrap_err().kind(),
            "sender_did"
        );
        assert_eq!(verify(&json!([1]), NOW).unwrap_err().kind(), "malformed");
    }

    #[test]
    fn digest_tells_duplicates_from_replays() {
        let k = key(1);
        let a = envelope(&k, NOW).sign(&k).unwrap();
        let mut b = envelope(&k, NOW);
        b.payload = json!({"request_id": "req_1", "status": "success"});
        let b = b.sign(&k).unwrap();
        let da = verify(&a, NOW).unwrap().digest;
        assert_eq!(da, verify(&a.clone(), NOW).unwrap().digest);
        assert_ne!(da, verify(&b, NOW).unwrap().digest);
    }

    #[test]
    fn clip_bounds_untrusted_text() {
        assert_eq!(clip("ab\ncd", 10), "ab?cd");
        assert_eq!(clip("abcdef", 3), "abc…");
    }
}
