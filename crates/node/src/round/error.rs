//! Why a step of a round stopped: a typed kind (retry later, fail the round, or stop
//! because the lease is lost) with the error that caused it kept as its source.

use cresolver_store::StoreError;
use cresolver_submit::SubmitError;
use cresolver_submit::txm::TxError;
use std::borrow::Cow;
use std::fmt;

/// Any error a step keeps as its cause.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What a stopped step means for its round, in the manner of reth's
/// `StageError::is_fatal`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepKind {
    /// Worth trying again later: the round stays at its stage and is retried.
    Retry,
    /// The round cannot succeed: it ends `failed` with the error as its reason.
    Fail,
    /// Another node holds the round now: this one stops and writes nothing more.
    LeaseLost,
}

/// A step that could not go on: its kind, what it was doing, and the error's source.
#[derive(Debug)]
pub struct StepError {
    kind: StepKind,
    context: Option<Cow<'static, str>>,
    source: Option<BoxError>,
}

impl StepError {
    fn new(kind: StepKind, context: Option<Cow<'static, str>>, source: Option<BoxError>) -> Self {
        Self {
            kind,
            context,
            source,
        }
    }

    /// A retry with only a description (nothing below it failed).
    pub fn retry(context: impl Into<Cow<'static, str>>) -> Self {
        Self::new(StepKind::Retry, Some(context.into()), None)
    }

    /// A retry caused by `source` while doing `context`.
    pub fn retry_from(context: impl Into<Cow<'static, str>>, source: impl Into<BoxError>) -> Self {
        Self::new(StepKind::Retry, Some(context.into()), Some(source.into()))
    }

    /// A retry whose cause says it all.
    pub fn retry_with(source: impl Into<BoxError>) -> Self {
        Self::new(StepKind::Retry, None, Some(source.into()))
    }

    /// The round fails for the reason given.
    pub fn fail(context: impl Into<Cow<'static, str>>) -> Self {
        Self::new(StepKind::Fail, Some(context.into()), None)
    }

    /// The round fails because of `source` while doing `context`.
    pub fn fail_from(context: impl Into<Cow<'static, str>>, source: impl Into<BoxError>) -> Self {
        Self::new(StepKind::Fail, Some(context.into()), Some(source.into()))
    }

    /// The round fails with `source` as its reason.
    pub fn fail_with(source: impl Into<BoxError>) -> Self {
        Self::new(StepKind::Fail, None, Some(source.into()))
    }

    /// The lease is lost.
    pub fn lease_lost() -> Self {
        Self::new(StepKind::LeaseLost, None, None)
    }

    /// What the error means for the round.
    pub fn kind(&self) -> StepKind {
        self.kind
    }

    /// Whether the round ends `failed` (nothing later can make it succeed).
    pub fn is_fatal(&self) -> bool {
        self.kind == StepKind::Fail
    }

    /// The reason as stored with the round and logged: what the step did, then what
    /// failed under it.
    pub fn reason(&self) -> String {
        match (&self.context, &self.source) {
            (Some(c), Some(s)) => format!("{c}: {s}"),
            _ => self.to_string(),
        }
    }

    /// A transaction manager error: the store's keep their meaning (a lost lease), a
    /// transient one is retried, any other fails the round.
    pub fn from_tx(e: TxError) -> Self {
        match e {
            TxError::Store(e) => e.into(),
            e if e.is_transient() => Self::retry_with(e),
            e => Self::fail_with(e),
        }
    }

    /// A transaction manager error where every kind is retried but the store's.
    pub fn retry_tx(e: TxError) -> Self {
        match e {
            TxError::Store(e) => e.into(),
            e => Self::retry_with(e),
        }
    }

    /// A submission error: a transient one is retried, any other fails the round.
    pub fn from_submit(e: SubmitError) -> Self {
        if e.is_transient() {
            Self::retry_with(e)
        } else {
            Self::fail_with(e)
        }
    }
}

impl fmt::Display for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.context, &self.source) {
            (Some(c), _) => f.write_str(c),
            (None, Some(s)) => s.fmt(f),
            (None, None) => match self.kind {
                StepKind::LeaseLost => f.write_str("the round's lease is lost"),
                StepKind::Retry => f.write_str("the round pauses"),
                StepKind::Fail => f.write_str("the round failed"),
            },
        }
    }
}

impl std::error::Error for StepError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match (&self.context, &self.source) {
            (Some(_), Some(s)) => Some(s.as_ref()),
            // (the display is the source's own: its cause comes next)
            (None, Some(s)) => s.source(),
            _ => None,
        }
    }
}

impl From<StoreError> for StepError {
    fn from(e: StoreError) -> Self {
        if e.is_lease_lost() {
            return Self::lease_lost();
        }
        // a full disk, a database locked for longer than the busy timeout, a shared
        // database restarting: the round pauses and is retried (by this node, or by
        // another once the lease expires)
        match e {
            e @ StoreError::Postgres(_) => Self::retry_from("the shared store", e),
            e => Self::retry_with(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn the_reason_names_the_step_and_its_cause() {
        let cause = StoreError::Corrupt("x".into());
        let e = StepError::retry_from("reading the market", cause);
        assert_eq!(e.kind(), StepKind::Retry);
        assert_eq!(e.to_string(), "reading the market");
        assert_eq!(
            e.reason(),
            "reading the market: database holds unexpected data: x"
        );
        assert!(
            e.source()
                .is_some_and(|s| s.downcast_ref::<StoreError>().is_some())
        );
    }

    #[test]
    fn a_lost_lease_from_the_store_is_its_own_kind() {
        let e: StepError = StoreError::LeaseLost(cresolver_store::RoundKey::new(
            alloy::primitives::Address::ZERO,
            0u64,
        ))
        .into();
        assert_eq!(e.kind(), StepKind::LeaseLost);
        assert!(!e.is_fatal());
        assert!(StepError::fail("no").is_fatal());
    }
}
