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
    pub fn on_sent(self, kind: MessageType) -> Result<ThreadState, Violation> {
        use MessageType as M;
        use ThreadState as S;
        match (self, kind) {
            (S::Open, M::Request) => Ok(S::Pending),
            (S::Pending, M::Accept) => Ok(S::Active),
            (S::Pending | S::Active, M::Cancel) => Ok(S::Error),
            (S::Pending | S::Active, M::Error) => Ok(S::Error),
            (state, kind) => Err(Violation::ClientMayNotSend { kind, state }),
        }
    }

    /// The state after the agent's `kind` arrives; `Err` names the violation.
    pub fn on_received(self, kind: MessageType) -> Result<ThreadState, Violation> {
        use MessageType as M;
        use ThreadState as S;
        match (self, kind) {
            (S::Pending, M::Offer) => Ok(S::Pending),
            (S::Active, M::Result) => Ok(S::Completed),
            (S::Pending | S::Active, M::Error) => Ok(S::Error),
            (_, M::Request | M::Accept | M::Cancel) => Err(Violation::ClientMessage { kind }),
            (state, kind) => Err(Violation::NotAllowed { kind, state }),
        }
    }
}

impl std::fmt::Display for ThreadState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A message the thread's state does not allow. The `Display` text is what the agent is
/// told in the refusing ERROR and what the failure and the notes record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Violation {
    /// This node was about to send a message its side may not send in this state.
    #[error("the client may not send {kind} in state {state}")]
    ClientMayNotSend {
        /// The message.
        kind: MessageType,
        /// The thread's state.
        state: ThreadState,
    },
    /// The agent sent a message only the client sends.
    #[error("{kind} is a client message; the agent may not send it")]
    ClientMessage {
        /// The message.
        kind: MessageType,
    },
    /// The agent sent a message its side may send, but not in this state.
    #[error("{kind} is not allowed in thread state {state}")]
    NotAllowed {
        /// The message.
        kind: MessageType,
        /// The thread's state.
        state: ThreadState,
    },
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
        assert_eq!(
            S::Pending.on_received(M::Result).unwrap_err().to_string(),
            "RESULT is not allowed in thread state PENDING"
        );
        assert_eq!(
            S::Active.on_received(M::Offer).unwrap_err(),
            Violation::NotAllowed {
                kind: M::Offer,
                state: S::Active
            }
        );
        assert_eq!(
            S::Completed.on_sent(M::Cancel).unwrap_err().to_string(),
            "the client may not send CANCEL in state COMPLETED"
        );
        assert!(S::Completed.on_received(M::Result).is_err());
        assert!(S::Error.on_received(M::Error).is_err());
        assert_eq!(
            S::Pending.on_received(M::Accept).unwrap_err().to_string(),
            "ACCEPT is a client message; the agent may not send it"
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
