//! The one dispatcher. Rounds come from sources — the chain watcher, the HTTP trigger,
//! the finality watch's reopened rounds, a cluster's claim loop, the node's unfinished
//! rounds at start, `dry-run --watch`, a replay of markets, a range or transcripts —
//! as jobs on one channel; the dispatcher runs each job through the one round pipeline
//! into the caller's sink (the transaction manager, a dry-run report, a replay
//! comparison), concurrently up to a bound, and at shutdown lets the jobs in flight
//! finish within a drain time. A source ends by dropping its sender: when every sender
//! is gone and the jobs are done, the dispatch is over.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;

/// How many jobs run at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Concurrency {
    /// As many as arrive (the node: its rounds are bounded by the node's own limit and
    /// leases, and a round waiting on the chain must not hold back the next).
    Unbounded,
    /// At most this many (at least 1); the source waits while they run.
    AtMost(usize),
}

/// Jobs still running when the dispatch stopped taking new ones.
pub struct InFlight(JoinSet<()>);

impl InFlight {
    /// How many jobs are still running.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether no job is running.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Waits up to `within` for the jobs in flight, then aborts what is left.
    pub async fn drain(mut self, within: Duration) {
        let _ = tokio::time::timeout(within, async {
            while self.0.join_next().await.is_some() {}
        })
        .await;
        self.0.abort_all();
    }
}

/// Runs every job from `jobs` through `run` until `shutdown` completes or every sender of
/// `jobs` is dropped. Returns the jobs still in flight: after `shutdown` the caller drains
/// them ([`InFlight::drain`]); after the senders are gone it is empty, since the
/// dispatch waited for them.
pub async fn dispatch<J, F, Fut>(
    mut jobs: mpsc::Receiver<J>,
    concurrency: Concurrency,
    shutdown: impl Future<Output = ()>,
    mut run: F,
) -> InFlight
where
    J: Send + 'static,
    F: FnMut(J) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let permits = match concurrency {
        Concurrency::Unbounded => None,
        Concurrency::AtMost(n) => Some(Arc::new(Semaphore::new(n.max(1)))),
    };
    let mut running = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => return InFlight(running),
            job = jobs.recv() => {
                let Some(job) = job else { break };
                let permit = match &permits {
                    Some(p) => tokio::select! {
                        permit = p.clone().acquire_owned() => permit.ok(),
                        _ = &mut shutdown => return InFlight(running),
                    },
                    None => None,
                };
                let fut = run(job);
                running.spawn(async move {
                    fut.await;
                    drop(permit);
                });
            }
            Some(_) = running.join_next(), if !running.is_empty() => {}
        }
    }
    // every source is done: finish what runs (unless told to stop)
    loop {
        tokio::select! {
            _ = &mut shutdown => return InFlight(running),
            next = running.join_next() => if next.is_none() { break },
        }
    }
    InFlight(running)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn runs_every_job_within_the_bound_and_ends_with_the_sources() {
        let (tx, rx) = mpsc::channel(4);
        let (now, peak, done) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
        );
        let feed = tokio::spawn(async move {
            for i in 0..20u32 {
                tx.send(i).await.unwrap();
            }
        });
        let (n, p, d) = (now.clone(), peak.clone(), done.clone());
        let left = dispatch(
            rx,
            Concurrency::AtMost(3),
            std::future::pending(),
            move |_| {
                let (n, p, d) = (n.clone(), p.clone(), d.clone());
                async move {
                    let running = n.fetch_add(1, Ordering::SeqCst) + 1;
                    p.fetch_max(running, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    n.fetch_sub(1, Ordering::SeqCst);
                    d.fetch_add(1, Ordering::SeqCst);
                }
            },
        )
        .await;
        feed.await.unwrap();
        assert!(left.is_empty());
        assert_eq!(done.load(Ordering::SeqCst), 20);
        assert_eq!(peak.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn shutdown_hands_back_the_jobs_in_flight() {
        let (tx, rx) = mpsc::channel(4);
        tx.send(()).await.unwrap();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let started = Arc::new(tokio::sync::Notify::new());
        let s = started.clone();
        let waiter = tokio::spawn(async move {
            s.notified().await;
            let _ = stop_tx.send(());
        });
        let st = started.clone();
        let left = dispatch(
            rx,
            Concurrency::Unbounded,
            async {
                let _ = stop_rx.await;
            },
            move |_| {
                let st = st.clone();
                async move {
                    st.notify_one();
                    std::future::pending::<()>().await;
                }
            },
        )
        .await;
        waiter.await.unwrap();
        assert_eq!(left.len(), 1);
        left.drain(Duration::from_millis(10)).await;
        drop(tx);
    }
}
