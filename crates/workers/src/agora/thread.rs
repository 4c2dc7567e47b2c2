//! The thread state machine of the Agora spec, from the client's side:
//! `OPEN -REQUEST-> PENDING -OFFER*-> PENDING -ACCEPT-> ACTIVE -RESULT-> COMPLETED`,
//! with an `ERROR` message (or a `CANCEL` by the client) ending in `ERROR`. The spec's
//! table names CANCEL for `ACTIVE`; a client that gives up a `PENDING` request (its
//! budget ran out before an acceptable offer) withdraws it with a CANCEL too, so the
//! agent's thread does not stay open.
//! Who may send what: the client sends REQUEST, ACCEPT and CANCEL; the agent sends
//! OFFER and RESULT; either side may send ERROR.

use super::envelope::MessageType;

/// Where a thread stands (the spec's thread states).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThreadState {
    /// Nothing sent yet.
    Open,
    /// The REQUEST is out; offers may arrive.
    Pending,
    /// An offer was accepted; the RESULT is awaited.
    Active,
    /// The RESULT arrived.
    Completed,
    /// Ended by an ERROR or a CANCEL.
    Error,
}

impl ThreadState {
    /// The spec's name (`OPEN`, `PENDING`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            ThreadState::Open => "OPEN",
            ThreadState::Pending => "PENDING",
            ThreadState::Active => "ACTIVE",
            ThreadState::Completed => "COMPLETED",
            ThreadState::Error => "ERROR",
        }
    }

    /// Whether the thread has ended (no message may follow).
    pub fn is_terminal(self) -> bool {
        matches!(self, ThreadState::Completed | ThreadState::Error)
    }

    /// The state after the client (this node) sends `kind`.
    pub fn on_sent(self, kind: MessageType) -> Result<ThreadState, String> {
        use MessageType as M;
        use ThreadState as S;
        match (self, kind) {
            (S::Open, M::Request) => Ok(S::Pending),
            (S::Pending, M::Accept) => Ok(S::Active),
            (S::Pending | S::Active, M::Cancel) => Ok(S::Error),
            (S::Pending | S::Active, M::Error) => Ok(S::Error),
            (s, k) => Err(format!(
                "the client may not send {k} in state {}",
                s.as_str()
            )),
        }
    }

    /// The state after the agent's `kind` arrives; `Err` names the violation.
    pub fn on_received(self, kind: MessageType) -> Result<ThreadState, String> {
        use MessageType as M;
        use ThreadState as S;
        match (self, kind) {
            (S::Pending, M::Offer) => Ok(S::Pending),
            (S::Active, M::Result) => Ok(S::Completed),
            (S::Pending | S::Active, M::Error) => Ok(S::Error),
            (_, M::Request | M::Accept | M::Cancel) => Err(format!(
                "{kind} is a client message; the agent may not send it"
            )),
            (s, k) => Err(format!("{k} is not allowed in thread state {}", s.as_str())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use MessageType as M;
    use ThreadState as S;

    #[test]
    fn happy_path() {
        let s = S::Open.on_sent(M::Request).unwrap();
        assert_eq!(s, S::Pending);
        let s = s.on_received(M::Offer).unwrap();
        let s = s.on_received(M::Offer).unwrap();
        assert_eq!(s, S::Pending);
        let s = s.on_sent(M::Accept).unwrap();
        assert_eq!(s, S::Active);
        assert_eq!(s.on_received(M::Result).unwrap(), S::Completed);
    }

    #[test]
    fn violations_are_named() {
        assert!(
            S::Pending
                .on_received(M::Result)
                .unwrap_err()
                .contains("PENDING")
        );
        assert!(
            S::Active
                .on_received(M::Offer)
                .unwrap_err()
                .contains("ACTIVE")
        );
        assert!(S::Completed.on_received(M::Result).is_err());
        assert!(S::Error.on_received(M::Error).is_err());
        assert!(
            S::Pending
                .on_received(M::Accept)
                .unwrap_err()
                .contains("client message")
        );
        assert!(S::Open.on_received(M::Offer).is_err());
        assert!(S::Active.on_sent(M::Accept).is_err());
        assert_eq!(S::Active.on_sent(M::Cancel).unwrap(), S::Error);
        assert_eq!(S::Pending.on_sent(M::Cancel).unwrap(), S::Error);
        assert!(S::Completed.on_sent(M::Cancel).is_err());
        assert_eq!(S::Pending.on_received(M::Error).unwrap(), S::Error);
        assert_eq!(S::Active.on_received(M::Error).unwrap(), S::Error);
        assert!(S::Error.is_terminal() && S::Completed.is_terminal());
    }
}
