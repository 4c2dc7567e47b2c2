//! Which rounds run when: at most `node.max_concurrent_rounds` at once, one drive per
//! round at a time (a round asked for while it is driven is driven once more after), and
//! retries after a doubling back-off, spawned on a tracker that shutdown drains.

use cresolver_store::RoundKey;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;
use tokio::sync::{Semaphore, SemaphorePermit};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// A round's key: its market contract and id.
type Key = RoundKey;

/// The node's schedule of rounds.
pub(crate) struct Schedule {
    /// Bounds the rounds driven at once.
    rounds: Semaphore,
    /// The rounds being driven, each with whether it was asked for again meanwhile (a
    /// new request after a failure, recorded while the failed drive was ending): such a
    /// round is driven once more when its drive ends.
    in_flight: Mutex<HashMap<Key, bool>>,
    /// How many times each unfinished round was retried.
    retries: Mutex<HashMap<Key, u32>>,
    /// The longest wait before a retry.
    max_backoff: Duration,
    /// Every task spawned outside the dispatcher (retries, drives again), drained at
    /// shutdown.
    pub tracker: TaskTracker,
    /// Cancelled at shutdown: retries that have not started their round end.
    pub cancel: CancellationToken,
}

impl Schedule {
    /// A schedule of at most `concurrent` rounds at once, retried after at most
    /// `max_backoff`.
    pub fn new(concurrent: usize, max_backoff: Duration) -> Self {
        Self {
            rounds: Semaphore::new(concurrent),
            in_flight: Mutex::new(HashMap::new()),
            retries: Mutex::new(HashMap::new()),
            max_backoff,
            tracker: TaskTracker::new(),
            cancel: CancellationToken::new(),
        }
    }

    /// Enters a round's drive: `false` when it is driven already (it is then marked to
    /// be driven once more when that drive ends).
    pub fn enter(&self, key: Key) -> bool {
        let mut in_flight = self.in_flight.lock();
        match in_flight.get_mut(&key) {
            Some(again) => {
                *again = true;
                false
            }
            None => {
                in_flight.insert(key, false);
                true
            }
        }
    }

    /// Leaves a round's drive: whether it was asked for again meanwhile.
    pub fn leave(&self, key: Key) -> bool {
        self.in_flight.lock().remove(&key).unwrap_or(false)
    }

    /// Waits for a slot among the rounds driven at once (`None`: the schedule closed).
    pub async fn slot(&self) -> Option<SemaphorePermit<'_>> {
        self.rounds.acquire().await.ok()
    }

    /// How many rounds are being driven now.
    pub fn busy(&self) -> usize {
        self.in_flight.lock().len()
    }

    /// Whether a round is being driven now.
    pub fn is_running(&self, key: Key) -> bool {
        self.in_flight.lock().contains_key(&key)
    }

    /// The rounds being driven now, sorted.
    pub fn in_flight(&self) -> Vec<Key> {
        let mut v: Vec<_> = self.in_flight.lock().keys().copied().collect();
        v.sort();
        v
    }

    /// The wait before the `n`-th retry of a round: it doubles up to the cap.
    pub fn backoff(&self, n: u32) -> Duration {
        Duration::from_secs(1u64 << n.min(6)).min(self.max_backoff)
    }

    /// How many times a round was retried so far.
    pub fn retries_of(&self, key: Key) -> u32 {
        self.retries.lock().get(&key).copied().unwrap_or(0)
    }

    /// Counts one more retry of a round: the wait before it.
    fn next_retry(&self, key: Key) -> Duration {
        let n = {
            let mut r = self.retries.lock();
            let n = r.entry(key).or_insert(0);
            *n += 1;
            *n
        };
        self.backoff(n)
    }

    /// Forgets a finished round's retries.
    pub fn finished(&self, key: Key) {
        self.retries.lock().remove(&key);
    }

    /// Runs `drive` (a round's retry) after its back-off, or as soon as `restored`
    /// changes (the RPC came back after an outage); not at all once shutdown began.
    pub fn retry<F>(&self, key: Key, mut restored: tokio::sync::watch::Receiver<u64>, drive: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let delay = self.next_retry(key);
        restored.borrow_and_update();
        let cancel = self.cancel.clone();
        // tracked: shutdown waits for a retry that runs, and cancels one that waits
        self.tracker.spawn(async move {
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = restored.changed() => {}
                _ = cancel.cancelled() => return,
            }
            if !cancel.is_cancelled() {
                drive.await;
            }
        });
    }

    /// Runs `drive` now, tracked, unless shutdown began.
    pub fn now<F>(&self, drive: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        if !self.cancel.is_cancelled() {
            self.tracker.spawn(drive);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy::primitives::Address;

    #[test]
    fn a_round_is_driven_once_at_a_time_and_again_when_asked_meanwhile() {
        let s = Schedule::new(2, Duration::from_secs(30));
        let k = RoundKey::new(Address::ZERO, 7u64);
        assert!(s.enter(k));
        assert!(!s.enter(k), "driven already");
        assert_eq!(s.in_flight(), vec![k]);
        assert!(s.leave(k), "asked for again meanwhile");
        assert!(s.enter(k));
        assert!(!s.leave(k));
        assert!(s.in_flight().is_empty());
    }

    #[test]
    fn retries_back_off_doubling_up_to_the_cap() {
        let s = Schedule::new(1, Duration::from_secs(10));
        let k = RoundKey::new(Address::ZERO, 1u64);
        assert_eq!(s.next_retry(k), Duration::from_secs(2));
        assert_eq!(s.next_retry(k), Duration::from_secs(4));
        assert_eq!(s.next_retry(k), Duration::from_secs(8));
        assert_eq!(s.next_retry(k), Duration::from_secs(10));
        assert_eq!(s.retries_of(k), 4);
        s.finished(k);
        assert_eq!(s.retries_of(k), 0);
    }
}
