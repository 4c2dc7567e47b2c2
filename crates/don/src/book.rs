//! What a member holds of executions between messages: for each execution an inbox of
//! checked messages, bounded per sender in count and bytes, that the execution's
//! agreement drains. A book is opened by this member's own round (its job) or, before that,
//! by a peer's message; the books peers open are charged to them, at most
//! [`PEER_BOOKS`] each (a peer's oldest is dropped for its newest), so one member cannot
//! make another hold more than `PEER_BOOKS × SENDER_BYTES` of made-up executions.

use crate::wire::Envelope;
use alloy::primitives::{Address, B256};
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::time::Instant;
use tokio::sync::watch;

/// Books one peer may open for executions this member has no round of (yet).
pub const PEER_BOOKS: usize = 16;
/// Messages one sender may have waiting in one book.
pub const SENDER_MESSAGES: usize = 128;
/// Bytes one sender may have waiting in one book (a whole proposal of the largest DON
/// always fits; a polka of the largest DON is under 16 KiB).
pub const SENDER_BYTES: usize = 2 * 1024 * 1024 + 64 * 1024;

/// Why a message was not put in a book.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// The sender already has [`SENDER_MESSAGES`] or [`SENDER_BYTES`] waiting here.
    Sender,
}

/// One execution's inbox.
#[derive(Default)]
pub struct Inbox {
    queue: VecDeque<(Envelope, usize)>,
    per_sender: HashMap<Address, (usize, usize)>,
}

impl Inbox {
    /// Queues a message of `bytes` from its sender, within the sender's bounds.
    pub fn push(&mut self, env: Envelope, bytes: usize) -> Result<(), Full> {
        let (count, held) = self.per_sender.entry(env.sender).or_default();
        if *count >= SENDER_MESSAGES || held.saturating_add(bytes) > SENDER_BYTES {
            return Err(Full::Sender);
        }
        *count += 1;
        *held += bytes;
        self.queue.push_back((env, bytes));
        Ok(())
    }

    /// Takes every waiting message, oldest first.
    pub fn drain(&mut self) -> Vec<Envelope> {
        self.per_sender.clear();
        self.queue.drain(..).map(|(e, _)| e).collect()
    }

    /// The bytes waiting.
    pub fn bytes(&self) -> usize {
        self.per_sender.values().map(|(_, b)| *b).sum()
    }
}

/// One execution's book.
pub struct Slot {
    /// The messages waiting for the agreement.
    pub inbox: Mutex<Inbox>,
    /// Bumped at every message: the agreement wakes on it.
    pub tick: watch::Sender<u64>,
    /// The peer whose message opened the book, while no round of this member holds it.
    pub opened_by: Mutex<Option<Address>>,
    /// When the book was opened.
    pub opened: Instant,
}

impl Slot {
    fn new(opened_by: Option<Address>) -> Self {
        Self {
            inbox: Mutex::new(Inbox::default()),
            tick: watch::channel(0).0,
            opened_by: Mutex::new(opened_by),
            opened: Instant::now(),
        }
    }

    /// The inbox, locked.
    pub fn inbox(&self) -> parking_lot::MutexGuard<'_, Inbox> {
        self.inbox.lock()
    }
}

/// Every open book.
#[derive(Default)]
pub struct Books {
    map: Mutex<HashMap<B256, std::sync::Arc<Slot>>>,
}

impl Books {
    fn map(&self) -> parking_lot::MutexGuard<'_, HashMap<B256, std::sync::Arc<Slot>>> {
        self.map.lock()
    }

    /// The book of an execution this member runs a round of (opened if new; a book a
    /// peer opened becomes this member's own).
    pub fn own(&self, exec: B256) -> std::sync::Arc<Slot> {
        let slot = self
            .map()
            .entry(exec)
            .or_insert_with(|| std::sync::Arc::new(Slot::new(None)))
            .clone();
        *slot.opened_by.lock() = None;
        slot
    }

    /// The book a peer's message goes to: the execution's if open, else a new one charged
    /// to `sender` (its oldest dropped past [`PEER_BOOKS`]).
    pub fn for_peer(&self, exec: B256, sender: Address) -> std::sync::Arc<Slot> {
        let mut map = self.map();
        if let Some(s) = map.get(&exec) {
            return s.clone();
        }
        let theirs: Vec<(B256, Instant)> = map
            .iter()
            .filter(|(_, s)| *s.opened_by.lock() == Some(sender))
            .map(|(k, s)| (*k, s.opened))
            .collect();
        if theirs.len() >= PEER_BOOKS
            && let Some((oldest, _)) = theirs.iter().min_by_key(|(_, t)| *t)
        {
            map.remove(oldest);
        }
        map.entry(exec)
            .or_insert_with(|| std::sync::Arc::new(Slot::new(Some(sender))))
            .clone()
    }

    /// Whether an execution has a book open.
    pub fn is_open(&self, exec: &B256) -> bool {
        self.map().contains_key(exec)
    }

    /// Closes an execution's book (its agreement ended).
    pub fn close(&self, exec: &B256) {
        self.map().remove(exec);
    }

    /// How many books are open, and the bytes their inboxes hold.
    pub fn size(&self) -> (usize, usize) {
        let map = self.map();
        (map.len(), map.values().map(|s| s.inbox().bytes()).sum())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{Body, VoteKind};
    use alloy::primitives::Bytes;

    fn vote(sender: Address, exec: B256) -> Envelope {
        Envelope {
            don_id: 1,
            config_version: 1,
            execution_id: exec,
            market: Address::ZERO,
            market_id: cresolver_core::MarketId::ZERO,
            sender,
            body: Body::Vote {
                round: 0,
                kind: VoteKind::Prevote,
                value: None,
                signature: Bytes::from(vec![0u8; 65]),
            },
        }
    }

    #[test]
    fn a_sender_holds_at_most_its_bounds_in_one_inbox_and_a_drain_frees_them() {
        let (a, b) = (Address::repeat_byte(1), Address::repeat_byte(2));
        let mut inbox = Inbox::default();
        for _ in 0..SENDER_MESSAGES {
            inbox
                .push(vote(a, B256::ZERO), 10)
                .expect("within the count");
        }
        assert_eq!(inbox.push(vote(a, B256::ZERO), 10), Err(Full::Sender));
        // another sender is not charged for a's messages
        assert_eq!(inbox.push(vote(b, B256::ZERO), SENDER_BYTES), Ok(()));
        assert_eq!(inbox.push(vote(b, B256::ZERO), 1), Err(Full::Sender));
        assert_eq!(inbox.drain().len(), SENDER_MESSAGES + 1);
        assert_eq!(inbox.bytes(), 0);
        assert_eq!(inbox.push(vote(a, B256::ZERO), 10), Ok(()));
    }

    #[test]
    fn a_polka_of_the_largest_don_fits_a_message_and_a_sender_s_share_of_a_book() {
        // a prevote of every member of the largest DON (the wire refuses more)
        let prevotes = (0..crate::config::MAX_MEMBERS)
            .map(|i| crate::wire::CommitVote {
                voter: Address::repeat_byte(i as u8),
                signature: Bytes::from(vec![0xffu8; 65]),
            })
            .collect();
        let mut env = vote(Address::repeat_byte(1), B256::ZERO);
        env.body = Body::Polka {
            round: u32::MAX,
            value: B256::repeat_byte(0xff),
            prevotes,
        };
        let bytes = serde_json::to_vec(&env).expect("json").len();
        assert!(bytes < 16 * 1024, "{bytes} bytes");
        assert!(bytes <= crate::wire::MAX_MESSAGE_BYTES);
        let mut inbox = Inbox::default();
        assert_eq!(inbox.push(env, bytes), Ok(()));
    }

    #[test]
    fn a_peer_opens_at_most_its_share_of_books_and_loses_its_oldest() {
        let books = Books::default();
        let peer = Address::repeat_byte(3);
        let execs: Vec<B256> = (0..=PEER_BOOKS as u8).map(B256::repeat_byte).collect();
        for e in &execs {
            books.for_peer(*e, peer);
        }
        assert_eq!(books.size().0, PEER_BOOKS);
        assert!(!books.is_open(&execs[0]), "the oldest went");
        assert!(books.is_open(&execs[PEER_BOOKS]));
        // a book this member runs a round of is not charged to the peer
        books.own(execs[1]);
        books.for_peer(B256::repeat_byte(0xee), peer);
        assert!(books.is_open(&execs[1]));
    }
}
