//! Group commit of the member's state file: the consensus cores' appends, report locks,
//! own observations and agreements go to one writer thread, which takes every write
//! waiting, commits them in one SQLite transaction and only then answers each writer.
//! The transaction is synced to disk (`synchronous = FULL`, one fsync for all the
//! executions that wrote meanwhile) when any of its writes is durable: one that a vote
//! or a proposal sent next rests on (an honest member must never sign two different
//! votes of one round; see [`crate::consensus::must_sync`]). The others (an input that
//! caused no vote; the report lock, whose report the decision's certificate fixes; this
//! member's observation, which it would make again after a power cut, as honestly; an
//! agreement it rebuilds from its peers) survive the process's crash at once and a power
//! loss from the next synced commit on, as the round store's writes do. The async threads
//! never wait on the disk. An instance waits for its durable writes before it sends what
//! they caused; the others it queues ([`Journal::queue`]) and checks at its next durable
//! commit, which the writer answers only after every write queued before it (one queue,
//! in order). A write read back at once (the first stored observation or agreement stays)
//! is read by the writer right after its commit ([`Journal::commit_then`]): one hop, not
//! two.

pub use crate::persist::Write;
use crate::persist::{Persist, PersistError};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use tokio::sync::oneshot;

/// What the writer does once a request's transaction ended: answer it (and read).
type Answer = Box<dyn FnOnce(&Persist, Result<(), PersistError>) + Send>;

struct Request {
    writes: Vec<Write>,
    durable: bool,
    done: Answer,
}

/// A write queued without waiting ([`Journal::queue`]): its answer, to check later.
pub type Queued = oneshot::Receiver<Result<(), PersistError>>;

/// The writer thread's handle; cheap to clone.
#[derive(Clone)]
pub struct Journal {
    tx: mpsc::Sender<Request>,
    persist: Arc<Persist>,
    commits: Arc<AtomicU64>,
    fsyncs: Arc<AtomicU64>,
}

impl Journal {
    /// Starts the writer thread over `persist` (it ends when every handle is dropped).
    pub fn start(persist: Arc<Persist>) -> Self {
        let (tx, rx) = mpsc::channel::<Request>();
        let commits = Arc::new(AtomicU64::new(0));
        let fsyncs = Arc::new(AtomicU64::new(0));
        let (p, c, f) = (persist.clone(), commits.clone(), fsyncs.clone());
        let spawned = std::thread::Builder::new()
            .name("don-journal".into())
            .spawn(move || writer(&p, (&c, &f), &rx));
        if let Err(e) = spawned {
            tracing::error!(error = %e, "cannot start the DON journal thread: writes fail");
        }
        Self {
            tx,
            persist,
            commits,
            fsyncs,
        }
    }

    /// The state file, for reads (on the blocking pool: see [`Journal::read`]).
    pub fn persist(&self) -> &Arc<Persist> {
        &self.persist
    }

    /// Transactions committed so far.
    pub fn commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }

    /// Transactions synced to disk so far (one fsync each).
    pub fn fsyncs(&self) -> u64 {
        self.fsyncs.load(Ordering::Relaxed)
    }

    /// Commits `writes`, with whatever other writes wait, in one transaction; synced to
    /// disk before this returns when `durable`.
    pub async fn commit(&self, writes: Vec<Write>, durable: bool) -> Result<(), PersistError> {
        if writes.is_empty() {
            return Ok(());
        }
        self.queue_with(writes, durable)?
            .await
            .map_err(|_| PersistError::Closed)?
    }

    /// Queues `writes` (not synced) without waiting for them; the answer comes before the
    /// answer of any write queued after them.
    pub fn queue(&self, writes: Vec<Write>) -> Result<Queued, PersistError> {
        self.queue_with(writes, false)
    }

    fn queue_with(&self, writes: Vec<Write>, durable: bool) -> Result<Queued, PersistError> {
        let (tx, rx) = oneshot::channel();
        self.send(
            writes,
            durable,
            Box::new(move |_, r| {
                let _ = tx.send(r);
            }),
        )?;
        Ok(rx)
    }

    /// Commits `writes` (not synced) and then, on the writer's connection, reads `then`:
    /// what a write that keeps the first stored value left there.
    pub async fn commit_then<T: Send + 'static>(
        &self,
        writes: Vec<Write>,
        then: impl FnOnce(&Persist) -> Result<T, PersistError> + Send + 'static,
    ) -> Result<T, PersistError> {
        let (tx, rx) = oneshot::channel();
        self.send(
            writes,
            false,
            Box::new(move |p, r| {
                let _ = tx.send(r.and_then(|()| then(p)));
            }),
        )?;
        rx.await.map_err(|_| PersistError::Closed)?
    }

    fn send(&self, writes: Vec<Write>, durable: bool, done: Answer) -> Result<(), PersistError> {
        self.tx
            .send(Request {
                writes,
                durable,
                done,
            })
            .map_err(|_| PersistError::Closed)
    }

    /// Runs a read of the state file on the blocking pool.
    pub async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Persist) -> Result<T, PersistError> + Send + 'static,
    ) -> Result<T, PersistError> {
        let p = self.persist.clone();
        tokio::task::spawn_blocking(move || f(&p))
            .await
            .map_err(|_| PersistError::Closed)?
    }
}

fn writer(
    persist: &Persist,
    (commits, fsyncs): (&AtomicU64, &AtomicU64),
    rx: &mpsc::Receiver<Request>,
) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while let Ok(more) = rx.try_recv() {
            batch.push(more);
        }
        let writes: Vec<&Write> = batch.iter().flat_map(|r| r.writes.iter()).collect();
        let durable = batch.iter().any(|r| r.durable);
        let result = persist.commit(&writes, durable).map_err(Arc::new);
        commits.fetch_add(1, Ordering::Relaxed);
        if durable {
            fsyncs.fetch_add(1, Ordering::Relaxed);
        }
        for r in batch {
            (r.done)(persist, result.clone().map_err(PersistError::Batch));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy::primitives::B256;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn queued_writes_are_answered_before_a_later_commit_which_reads_after_its_own() {
        let dir = tempfile::tempdir().expect("tempdir");
        let journal = Journal::start(Arc::new(
            Persist::open(&dir.path().join("don.sqlite")).expect("opens"),
        ));
        let exec = B256::repeat_byte(7);
        let mut queued = Vec::new();
        {
            // the state file is busy: the queued writes wait behind it
            let _busy = journal.persist.conn();
            for i in 0..5 {
                let w = vec![Write::Log(exec, vec![format!("{i}")])];
                queued.push(journal.queue(w).expect("the writer runs"));
            }
        }
        let log = journal
            .commit_then(vec![Write::Log(exec, vec!["last".into()])], move |p| {
                p.log(&exec)
            })
            .await
            .expect("commits and reads");
        assert_eq!(log, ["0", "1", "2", "3", "4", "last"]);
        // answered in order: every write queued before is answered by now
        for mut rx in queued {
            assert!(matches!(rx.try_recv(), Ok(Ok(()))));
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writes_waiting_together_share_one_commit_and_are_durable_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("don.sqlite");
        let journal = Journal::start(Arc::new(Persist::open(&path).expect("opens")));
        let execs: Vec<B256> = (0..20u8).map(B256::repeat_byte).collect();
        let mut waiting = Vec::new();
        {
            // the state file is busy: every write queues behind it
            let _busy = journal.persist.conn();
            for (i, exec) in execs.iter().enumerate() {
                let lines = vec![format!("{i}-a"), format!("{i}-b")];
                let rx = journal
                    .queue_with(vec![Write::Log(*exec, lines)], true)
                    .expect("the writer runs");
                waiting.push(rx);
            }
        }
        for rx in waiting {
            rx.await.expect("answered").expect("committed");
        }
        // the first write may be taken alone before the others queue; never more
        assert!(journal.commits() <= 2, "{} commits", journal.commits());
        journal
            .commit(vec![Write::Log(execs[0], vec!["0-c".into()])], false)
            .await
            .expect("commits");
        drop(journal);
        let reopened = Persist::open(&path).expect("reopens");
        assert_eq!(
            reopened.log(&execs[0]).expect("reads"),
            vec!["0-a", "0-b", "0-c"]
        );
        assert_eq!(
            reopened.log(&execs[19]).expect("reads"),
            vec!["19-a", "19-b"]
        );
    }
}
