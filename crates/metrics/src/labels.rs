//! Label values that are enums, not free strings: each variant is one value of a
//! series' label, spelled once here (`as_str`), so a call site cannot invent a value.

use prometheus_client::encoding::{EncodeLabelValue, LabelValueEncoder};

/// What kind of failure an RPC call or head probe had (label `kind` of
/// `cresolver_rpc_errors_total`).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum RpcErrorKind {
    /// No answer within the call's deadline.
    Timeout,
    /// The connection could not be made, or broke.
    Connect,
    /// The endpoint refused the call for its rate limit (HTTP 429, JSON-RPC -32005).
    RateLimited,
    /// Anything else.
    Other,
}

impl RpcErrorKind {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Timeout => "timeout",
            Self::Connect => "connect",
            Self::RateLimited => "rate_limited",
            Self::Other => "other",
        }
    }
}

impl EncodeLabelValue for RpcErrorKind {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        EncodeLabelValue::encode(&self.as_str(), encoder)
    }
}
