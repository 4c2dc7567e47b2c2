//! What kind of failure an RPC call's error is (a timeout, a connection, a rate limit),
//! read from its types: alloy's transport error kinds, the HTTP status, the JSON-RPC
//! error code, and the typed errors a transport wraps (the deadline's, reqwest's, I/O's,
//! the websocket's). Never from its text: "rate" is also in "generate".

use alloy::transports::{RpcError, TransportError, TransportErrorKind};
pub use cresolver_metrics::RpcErrorKind;
use std::error::Error as StdError;
use std::time::Duration;

/// JSON-RPC's "limit exceeded" (EIP-1474), which providers answer a rate limit with.
const LIMIT_EXCEEDED: i64 = -32005;

/// A call that got no answer within its deadline (see [`crate::deadline`]).
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("RPC request timed out after {} ms", .after.as_millis())]
pub struct DeadlineExceeded {
    /// The deadline.
    pub after: Duration,
}

/// An error whose text was redacted (a URL in it may carry a provider's key), with the
/// kind its typed original had.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{text}")]
pub struct Redacted {
    /// The text, with its causes, every URL in it redacted.
    pub text: String,
    /// What kind of failure the original was.
    pub kind: RpcErrorKind,
}

/// What kind of failure `e` is.
pub fn classify(e: &TransportError) -> RpcErrorKind {
    match e {
        RpcError::Transport(k) => transport_kind(k),
        RpcError::ErrorResp(p) if p.code == 429 || p.code == LIMIT_EXCEEDED => {
            RpcErrorKind::RateLimited
        }
        _ => RpcErrorKind::Other,
    }
}

fn transport_kind(k: &TransportErrorKind) -> RpcErrorKind {
    match k {
        TransportErrorKind::HttpError(h) if h.status == 429 => RpcErrorKind::RateLimited,
        TransportErrorKind::HttpErrorWithRetryAfter { error, .. } if error.status == 429 => {
            RpcErrorKind::RateLimited
        }
        TransportErrorKind::BackendGone | TransportErrorKind::PubsubUnavailable => {
            RpcErrorKind::Connect
        }
        TransportErrorKind::Custom(b) | TransportErrorKind::NonRetryable(b) => {
            wrapped_kind(b.as_ref())
        }
        _ => RpcErrorKind::Other,
    }
}

/// The kind of the first error in `e`'s chain of sources that tells one.
fn wrapped_kind(e: &(dyn StdError + 'static)) -> RpcErrorKind {
    let mut cause = Some(e);
    while let Some(c) = cause {
        if let Some(kind) = own_kind(c) {
            return kind;
        }
        cause = c.source();
    }
    RpcErrorKind::Other
}

fn own_kind(c: &(dyn StdError + 'static)) -> Option<RpcErrorKind> {
    use std::io::ErrorKind as Io;
    use tokio_tungstenite::tungstenite::Error as Ws;
    if c.is::<DeadlineExceeded>() {
        return Some(RpcErrorKind::Timeout);
    }
    if let Some(r) = c.downcast_ref::<Redacted>() {
        return Some(r.kind);
    }
    if let Some(t) = c.downcast_ref::<TransportErrorKind>() {
        return Some(transport_kind(t)).filter(|k| *k != RpcErrorKind::Other);
    }
    if let Some(r) = c.downcast_ref::<reqwest::Error>() {
        if r.is_timeout() {
            return Some(RpcErrorKind::Timeout);
        }
        if r.is_connect() {
            return Some(RpcErrorKind::Connect);
        }
        if r.status().is_some_and(|s| s.as_u16() == 429) {
            return Some(RpcErrorKind::RateLimited);
        }
    }
    if let Some(io) = c.downcast_ref::<std::io::Error>() {
        return match io.kind() {
            Io::TimedOut => Some(RpcErrorKind::Timeout),
            Io::ConnectionRefused
            | Io::ConnectionReset
            | Io::ConnectionAborted
            | Io::NotConnected
            | Io::BrokenPipe
            | Io::AddrNotAvailable
            | Io::UnexpectedEof => Some(RpcErrorKind::Connect),
            _ => None,
        };
    }
    if let Some(ws) = c.downcast_ref::<Ws>() {
        return match ws {
            Ws::ConnectionClosed | Ws::AlreadyClosed => Some(RpcErrorKind::Connect),
            Ws::Http(r) if r.status().as_u16() == 429 => Some(RpcErrorKind::RateLimited),
            _ => None,
        };
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy::rpc::json_rpc::ErrorPayload;

    #[test]
    fn kinds_come_from_types_not_text() {
        let deadline = TransportErrorKind::custom(DeadlineExceeded {
            after: Duration::from_millis(10),
        });
        assert_eq!(classify(&deadline), RpcErrorKind::Timeout);
        assert_eq!(
            classify(&TransportErrorKind::http_error(429, "slow down".into())),
            RpcErrorKind::RateLimited
        );
        assert_eq!(
            classify(&TransportErrorKind::http_error(500, "rate".into())),
            RpcErrorKind::Other
        );
        let limit = RpcError::ErrorResp(ErrorPayload {
            code: LIMIT_EXCEEDED,
            message: "limit exceeded".into(),
            data: None,
        });
        assert_eq!(classify(&limit), RpcErrorKind::RateLimited);
        // the words do not count: a revert message that says "rate" or "timed out"
        let text = RpcError::ErrorResp(ErrorPayload {
            code: 3,
            message: "execution reverted: separate rate generator timed out".into(),
            data: None,
        });
        assert_eq!(classify(&text), RpcErrorKind::Other);
        assert_eq!(
            classify(&TransportErrorKind::custom_str(
                "connection refused, rate limited"
            )),
            RpcErrorKind::Other
        );
        let io =
            TransportErrorKind::custom(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_eq!(classify(&io), RpcErrorKind::Connect);
        assert_eq!(
            classify(&TransportErrorKind::backend_gone()),
            RpcErrorKind::Connect
        );
    }

    #[test]
    fn a_redacted_error_keeps_its_kind() {
        let e = TransportErrorKind::custom(Redacted {
            text: "error sending request for url (http://[redacted]/)".into(),
            kind: RpcErrorKind::Connect,
        });
        assert_eq!(classify(&e), RpcErrorKind::Connect);
    }

    #[tokio::test]
    async fn a_refused_connection_is_connect() {
        // a port nothing listens on: reqwest's own connect error, through its sources
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap();
        let err = reqwest::Client::new()
            .get(format!("http://127.0.0.1:{port}/"))
            .send()
            .await
            .unwrap_err();
        assert_eq!(
            classify(&TransportErrorKind::custom(err)),
            RpcErrorKind::Connect
        );
    }
}
