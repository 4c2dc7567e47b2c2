//! The node's replay cache: message ids of verified envelopes (and of the node's own
//! messages), each with the digest of the message that used it, kept for at least
//! [`RETAIN_MS`] and bounded in size.
//!
//! The rule that tells a harmless repeat from an attack: a relay may hand the same event
//! out more than once (an inclusive `since`, a re-subscription), so an id seen again with
//! the *same* digest is a [`ReplayVerdict::Duplicate`] (dropped quietly, never processed
//! twice), while a *different* message reusing a seen id is a
//! [`ReplayVerdict::Replayed`] (rejected and counted). When the cache is full of ids that
//! are still inside their retention window it fails closed ([`ReplayVerdict::Full`]):
//! forgetting an id early would reopen the replay window.

use std::collections::{HashMap, VecDeque};

/// How long an id is remembered: twice the ±5 min timestamp window, so an id is still
/// known when the last moment its message could pass the window has gone.
pub const RETAIN_MS: i64 = 10 * 60 * 1000;
/// Default bound on the number of remembered ids.
pub const DEFAULT_CAPACITY: usize = 65_536;

/// What [`ReplayCache::check_and_insert`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplayVerdict {
    /// First time this id is seen; now remembered.
    Fresh,
    /// The same message again (same id, same digest).
    Duplicate,
    /// A different message under an id already used.
    Replayed,
    /// No room: the id cannot be tracked, so the message must be refused.
    Full,
}

/// The message ids seen, each with its message's digest and the time it may be
/// forgotten (see the module doc).
#[derive(Debug)]
pub struct ReplayCache {
    entries: HashMap<String, ([u8; 32], i64)>,
    expiry: VecDeque<(i64, String)>,
    capacity: usize,
    retain_ms: i64,
}

impl ReplayCache {
    /// An empty cache of at most `capacity` ids (at least 1), each kept `retain_ms`
    /// milliseconds.
    pub fn new(capacity: usize, retain_ms: i64) -> Self {
        Self {
            entries: HashMap::new(),
            expiry: VecDeque::new(),
            capacity: capacity.max(1),
            retain_ms,
        }
    }

    /// How many ids are remembered.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no id is remembered.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Looks `id` up and remembers it (with `digest`) if it is new.
    pub fn check_and_insert(&mut self, id: &str, digest: [u8; 32], now_ms: i64) -> ReplayVerdict {
        self.prune(now_ms);
        if let Some((seen, _)) = self.entries.get(id) {
            return if *seen == digest {
                ReplayVerdict::Duplicate
            } else {
                ReplayVerdict::Replayed
            };
        }
        if self.entries.len() >= self.capacity {
            return ReplayVerdict::Full;
        }
        let expires = now_ms.saturating_add(self.retain_ms);
        self.entries.insert(id.to_string(), (digest, expires));
        self.expiry.push_back((expires, id.to_string()));
        ReplayVerdict::Fresh
    }

    fn prune(&mut self, now_ms: i64) {
        while let Some((expires, _)) = self.expiry.front() {
            if *expires > now_ms {
                break;
            }
            if let Some((expires, id)) = self.expiry.pop_front()
                && self.entries.get(&id).is_some_and(|(_, e)| *e == expires)
            {
                self.entries.remove(&id);
            }
        }
    }
}

impl Default for ReplayCache {
    fn default() -> Self {
        Self::new(DEFAULT_CAPACITY, RETAIN_MS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicate_vs_replay_and_retention() {
        let mut c = ReplayCache::default();
        assert_eq!(c.check_and_insert("a", [1; 32], 0), ReplayVerdict::Fresh);
        assert_eq!(
            c.check_and_insert("a", [1; 32], 1),
            ReplayVerdict::Duplicate
        );
        assert_eq!(c.check_and_insert("a", [2; 32], 2), ReplayVerdict::Replayed);
        // Still remembered just before ten minutes have passed …
        assert_eq!(
            c.check_and_insert("a", [2; 32], RETAIN_MS - 1),
            ReplayVerdict::Replayed
        );
        // … and forgotten after.
        assert_eq!(
            c.check_and_insert("a", [2; 32], RETAIN_MS),
            ReplayVerdict::Fresh
        );
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn bounded_and_fails_closed() {
        let mut c = ReplayCache::new(2, 1000);
        assert_eq!(c.check_and_insert("a", [0; 32], 0), ReplayVerdict::Fresh);
        assert_eq!(c.check_and_insert("b", [0; 32], 10), ReplayVerdict::Fresh);
        assert_eq!(c.check_and_insert("c", [0; 32], 20), ReplayVerdict::Full);
        // "a" is still tracked: refusing "c" did not evict it.
        assert_eq!(
            c.check_and_insert("a", [9; 32], 30),
            ReplayVerdict::Replayed
        );
        // Once "a" expires there is room again.
        assert_eq!(c.check_and_insert("c", [0; 32], 1000), ReplayVerdict::Fresh);
        assert_eq!(c.len(), 2);
    }
}
