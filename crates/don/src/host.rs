//! The thin async host of one execution's consensus core ([`crate::consensus::Core`]):
//! it reads what was persisted (on the blocking pool), feeds the core the messages of the
//! execution's book and the timers it asked for, and performs the effects in order: the
//! log appends and the report lock through the journal's group commit (committed before
//! anything sent with them, and synced first before a vote or a proposal), then the
//! sends, the timers, the metrics, and at the end the agreement (stored before it is
//! returned).

use crate::agreed::Agreed;
use crate::book::Slot;
use crate::consensus::{Core, Effect, Input, Timer};
use crate::job::{AgreeError, Job, PHASES_KEPT, Phases};
use crate::journal::Write;
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

/// How an execution ended, as the host sees the core's terminal effects.
enum Ending {
    Agreed(Box<Agreed>),
    Stalled(u32),
    SignedAnother,
}

/// Runs the core of `job` to an agreement, a stall, or shutdown.
pub(crate) async fn run(
    s: &Shared,
    job: Job,
    own: SignedObservation,
    slot: Arc<Slot>,
) -> Result<Agreed, AgreeError> {
    let exec = job.execution_id;
    let (log, lock) = s
        .journal
        .read(move |p| Ok((p.log(&exec)?, p.lock(&exec)?)))
        .await?;
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
        if let Some(end) = perform(s, &core, &mut timers, effects).await? {
            clear_status(s, &exec);
            return match end {
                Ending::Agreed(a) => {
                    marks.agreed(s);
                    agreed(s, &core, *a).await
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

/// Performs effects: every durable write first (one group commit), then the rest in
/// order. Returns how the execution ended, if it did.
async fn perform(
    s: &Shared,
    core: &Core,
    timers: &mut Timers,
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
    s.journal.commit(writes, durable).await?;
    if count > 0 {
        tracing::debug!(execution_id = %exec, writes = count, micros = began.elapsed().as_micros() as u64, "journal commit");
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
    // its peers' decisions (which carry their certificates)
    s.journal
        .commit(vec![Write::Agreed(exec, Box::new(a.clone()))], false)
        .await?;
    let stored = s.journal.read(move |p| p.agreed(&exec)).await?.unwrap_or(a);
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
