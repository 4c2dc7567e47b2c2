//! The thin async host of one execution's consensus core ([`crate::consensus::Core`]):
//! it starts from what was persisted (read by the member with its own observation, on
//! the journal's writer), feeds the core the messages of the execution's book and the
//! timers it asked for, and performs the effects in order: the
//! log appends and the report lock through the journal's group commit (committed and
//! synced before a vote or a proposal they caused leaves; otherwise queued, and checked
//! at the next such commit and at the end), then the sends, the timers, the metrics, and
//! at the end the agreement (stored before it is returned).

use crate::agreed::Agreed;
use crate::book::Slot;
use crate::consensus::{Core, Effect, Input, Timer};
use crate::job::{AgreeError, Job, PHASES_KEPT, Phases};
use crate::journal::{Queued, Write};
use crate::persist::PersistError;
use crate::shared::{Shared, crash_point};
use crate::wire::{Body, SignedObservation, VoteKind};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The pending timers, by due time (and a sequence number: several may be due at once).
#[derive(Default)]
struct Timers {
    map: BTreeMap<(Duration, u64), Timer>,
    seq: u64,
}

impl Timers {
    fn add(&mut self, at: Duration, t: Timer) {
        self.seq += 1;
        self.map.insert((at, self.seq), t);
    }
    fn next(&self) -> Option<Duration> {
        self.map.keys().next().map(|(at, _)| *at)
    }
    fn pop_due(&mut self, now: Duration) -> Option<Timer> {
        let (&key, _) = self.map.iter().next()?;
        if key.0 > now {
            return None;
        }
        self.map.remove(&key)
    }
}

/// Writes queued without waiting: an input that caused no vote or proposal, the report
/// lock (see [`crate::journal`]). The journal answers in order, so once a later commit
/// is answered, so are these; a failed one fails the execution before anything that
/// follows it is sent with a log that lacks it.
#[derive(Default)]
struct Pending(Vec<Queued>);

impl Pending {
    /// The answers already in: the first failure, if any.
    fn check(&mut self) -> Result<(), PersistError> {
        let mut first = Ok(());
        self.0.retain_mut(|rx| match rx.try_recv() {
            Ok(r) => {
                if first.is_ok() {
                    first = r;
                }
                false
            }
            Err(tokio::sync::oneshot::error::TryRecvError::Empty) => true,
            Err(tokio::sync::oneshot::error::TryRecvError::Closed) => {
                first = Err(PersistError::Closed);
                false
            }
        });
        first
    }

    /// Waits for every answer (after a later commit's answer they are all in).
    async fn settle(&mut self) -> Result<(), PersistError> {
        for rx in self.0.drain(..) {
            rx.await.map_err(|_| PersistError::Closed)??;
        }
        Ok(())
    }
}

/// How an execution ended, as the host sees the core's terminal effects.
enum Ending {
    Agreed(Box<Agreed>),
    Stalled(u32),
    SignedAnother,
}

/// What a member persisted of one execution before its host starts: the consensus log's
/// entries (as stored) and the report lock.
#[derive(Default)]
pub(crate) struct Persisted {
    pub log: Vec<String>,
    pub lock: Option<crate::persist::Lock>,
}

/// Runs the core of `job` to an agreement, a stall, or shutdown, from what was persisted.
pub(crate) async fn run(
    s: &Shared,
    (job, own): (Job, SignedObservation),
    persisted: Persisted,
    slot: Arc<Slot>,
) -> Result<Agreed, AgreeError> {
    let exec = job.execution_id;
    let Persisted { log, lock } = persisted;
    let log = log
        .iter()
        .filter_map(|e| match serde_json::from_str(e) {
            Ok(entry) => Some(entry),
            Err(err) => {
                tracing::error!(execution_id = %exec, error = %err, "unreadable consensus log entry: skipped");
                None
            }
        })
        .collect();
    let mut core = Core::new(s.params.clone(), s.keys.clone(), job, own);
    let mut tick = slot.tick.subscribe();
    let mut stop = s.stop.subscribe();
    let clock = Instant::now();
    let mut timers = Timers::default();
    let mut marks = Marks::new(clock);
    let mut pending = Pending::default();
    let mut effects = core.handle(Input::Start { log, lock }, clock.elapsed());
    marks.step(core.step());
    loop {
        // what waits in the book (messages that came before this run began, or while the
        // last effects were performed) is taken before the host sleeps
        let now = clock.elapsed();
        let msgs = slot.inbox().drain();
        for env in msgs {
            effects.extend(core.handle(Input::Message(env), now));
            marks.step(core.step());
        }
        let performed = perform(s, &core, (&mut timers, &mut pending), effects).await;
        if let Some(end) = performed? {
            clear_status(s, &exec);
            return match end {
                Ending::Agreed(a) => {
                    marks.agreed(s);
                    // the agreement is committed after every write queued before it
                    let stored = agreed(s, &core, *a).await;
                    pending.settle().await?;
                    stored
                }
                Ending::Stalled(rounds) => Err(AgreeError::Stalled { rounds }),
                Ending::SignedAnother => Err(AgreeError::SignedAnother),
            };
        }
        let status = core.status();
        s.status.lock().insert(exec, status);
        let wake = timers.next().map(|at| clock + at);
        tokio::select! {
            _ = tick.changed() => {}
            _ = stop.changed() => {}
            () = sleep_until(wake) => {}
        }
        if *stop.borrow() {
            clear_status(s, &exec);
            return Err(AgreeError::ShuttingDown);
        }
        effects = Vec::new();
        let now = clock.elapsed();
        while let Some(t) = timers.pop_due(now) {
            effects.extend(core.handle(Input::Timeout(t), now));
            marks.step(core.step());
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// Performs effects: the writes first (one group commit, waited for when a vote or a
/// proposal sent now rests on it, else queued), then the rest in order. Returns how the
/// execution ended, if it did.
async fn perform(
    s: &Shared,
    core: &Core,
    (timers, pending): (&mut Timers, &mut Pending),
    effects: Vec<Effect>,
) -> Result<Option<Ending>, AgreeError> {
    let exec = core.execution_id();
    let mut writes = Vec::new();
    let mut signed = false;
    // synced to disk only before a vote or a proposal leaves (see `must_sync`)
    let durable = core.must_sync(&effects);
    for e in &effects {
        match e {
            Effect::Append(entries) => {
                let mut lines = Vec::with_capacity(entries.len());
                for entry in entries {
                    lines.push(
                        serde_json::to_string(entry).map_err(crate::persist::PersistError::from)?,
                    );
                }
                writes.push(Write::Log(exec, lines));
            }
            Effect::Lock(l) => {
                signed = true;
                writes.push(Write::Lock(exec, Box::new(l.clone())));
            }
            _ => {}
        }
    }
    let (count, began) = (writes.len(), Instant::now());
    if durable {
        s.journal.commit(writes, true).await?;
        pending.settle().await?;
        if count > 0 {
            tracing::debug!(execution_id = %exec, writes = count, micros = began.elapsed().as_micros() as u64, "journal commit, synced");
        }
    } else {
        if count > 0 {
            pending.0.push(s.journal.queue(writes)?);
        }
        pending.check()?;
    }
    let mut end = None;
    let mut voted = false;
    for e in effects {
        match e {
            Effect::Append(_) | Effect::Lock(_) => {}
            Effect::Send { to, env } => {
                voted |= matches!(
                    env.body,
                    Body::Vote {
                        kind: VoteKind::Precommit,
                        value: Some(_),
                        ..
                    }
                );
                s.send(env, to);
            }
            Effect::Schedule { at, timer } => timers.add(at, timer),
            Effect::Event(event) => s.metrics.don_event(event),
            Effect::Proposed { report, .. } => {
                if let Some(tell) = core.decided_hook() {
                    tell(&report, core.address());
                }
            }
            Effect::Decided { round, set } => {
                tracing::info!(execution_id = %exec, round, %set, "set decided");
                if let (Some(tell), Some((report, leader))) =
                    (core.decided_hook(), core.decided_report())
                {
                    tell(report, leader);
                }
            }
            Effect::Agreed(a) => end = Some(Ending::Agreed(a)),
            Effect::Stalled { rounds } => end = Some(Ending::Stalled(rounds)),
            Effect::SignedAnother => end = Some(Ending::SignedAnother),
        }
    }
    if voted {
        crash_point("don_voted");
    }
    if signed {
        crash_point("don_signed");
    }
    Ok(end)
}

/// Stores the agreement (the first stored stays) and remembers it to answer late members.
async fn agreed(s: &Shared, core: &Core, a: Agreed) -> Result<Agreed, AgreeError> {
    let exec = a.execution_id;
    // not synced: a member that loses it to a power cut decides again from its log and
    // its peers' decisions (which carry their certificates); the first stored stays
    let stored = s
        .journal
        .commit_then(vec![Write::Agreed(exec, Box::new(a.clone()))], move |p| {
            p.agreed(&exec)
        })
        .await?
        .unwrap_or(a);
    // keep every signature seen, for a transmitter whose f+1 hold one the forwarder refuses
    s.remember_done(&stored, core.signatures());
    s.decided
        .lock()
        .record(crate::decided::DecidedExecution::of(
            &stored,
            Some(core.leader_changes()),
        ));
    Ok(stored)
}

fn clear_status(s: &Shared, exec: &alloy::primitives::B256) {
    s.status.lock().remove(exec);
}

/// The first time each step was reached.
struct Marks {
    start: Instant,
    prevote: Option<Instant>,
    precommit: Option<Instant>,
    decided: Option<Instant>,
}

impl Marks {
    fn new(start: Instant) -> Self {
        Self {
            start,
            prevote: None,
            precommit: None,
            decided: None,
        }
    }

    fn step(&mut self, step: &str) {
        let now = Instant::now();
        match step {
            "prevote" => {
                self.prevote.get_or_insert(now);
            }
            "precommit" => {
                self.prevote.get_or_insert(now);
                self.precommit.get_or_insert(now);
            }
            "commit" => {
                self.prevote.get_or_insert(now);
                self.precommit.get_or_insert(now);
                self.decided.get_or_insert(now);
            }
            _ => {}
        }
    }

    fn agreed(&mut self, s: &Shared) {
        self.step("commit");
        let now = Instant::now();
        let (pv, pc, d) = (
            self.prevote.unwrap_or(now),
            self.precommit.unwrap_or(now),
            self.decided.unwrap_or(now),
        );
        let phases = Phases {
            began: self.start,
            agreed: now,
            to_prevote: pv.saturating_duration_since(self.start),
            prevote: pc.saturating_duration_since(pv),
            precommit: d.saturating_duration_since(pc),
            signatures: now.saturating_duration_since(d),
        };
        let mut kept = s.phases.lock();
        kept.push_back(phases);
        while kept.len() > PHASES_KEPT {
            kept.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::oneshot;

    #[tokio::test]
    async fn a_queued_write_that_failed_fails_the_execution_at_the_next_check() {
        let (ok, ok_rx) = oneshot::channel();
        let (late, late_rx) = oneshot::channel();
        let (bad, bad_rx) = oneshot::channel();
        let mut pending = Pending(vec![ok_rx, late_rx, bad_rx]);
        ok.send(Ok(())).expect("sent");
        assert!(pending.check().is_ok());
        assert_eq!(
            pending.0.len(),
            2,
            "the answered one is dropped, the others kept"
        );
        bad.send(Err(PersistError::Closed)).expect("sent");
        assert!(matches!(pending.check(), Err(PersistError::Closed)));
        late.send(Ok(())).expect("sent");
        assert!(pending.settle().await.is_ok());
        let (gone, gone_rx) = oneshot::channel::<Result<(), PersistError>>();
        drop(gone);
        let mut pending = Pending(vec![gone_rx]);
        assert!(
            pending.settle().await.is_err(),
            "a writer gone is a failure"
        );
    }
}
