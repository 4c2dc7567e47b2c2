//! An honest member as the production host runs it (`crates/don/src/host.rs`): its core
//! gets the start with what was durable, then messages and its timers; of each effect
//! batch the appends and the lock are made durable first, then the sends, the timers and
//! the ending are performed in order. A crash (before GST only) can hit any batch: in the
//! middle of its append (a prefix of the entries kept, the lock kept or not, nothing
//! sent), or after its writes with only some of its sends out. Half the crashes are power
//! cuts: every write since the last batch the host syncs (`Core::must_sync`) is lost too,
//! whatever was sent after it. (A batch that need not be synced is only queued by the
//! host, and its sends may leave before its writes are committed; a process crash that
//! loses those writes leaves the state a power cut leaves.) The member comes back
//! later with a fresh core given what was durable; the timers of the old incarnation are
//! dropped. Once agreed, it answers a member that writes about the execution with its
//! decision (at most once a second per sender), as the member server does.

use crate::check::Violation;
use crate::scenario::{MS, Scenario};
use crate::sim::{Event, Sent, Sim, summary};
use alloy::primitives::Address;
use cresolver_don::Agreed;
use cresolver_don::book::SENDER_MESSAGES;
use cresolver_don::consensus::{Core, Effect, Input, Keys, LogEntry, Timer};
use cresolver_don::persist::Lock;
use cresolver_don::wire::{Body, Envelope, SignedObservation};
use rand::Rng;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;

/// A member's server answers one sender about a decided execution at most this often.
const REPLY_EVERY: u64 = 1_000 * MS;

/// An honest member.
pub struct Honest {
    keys: Arc<dyn Keys>,
    job: cresolver_don::Job,
    own: SignedObservation,
    /// The running core (`None` before the start, while crashed, and once ended).
    pub core: Option<Core>,
    /// Incarnations so far (a timer of an older one is dropped).
    inc: u32,
    started: bool,
    /// Messages that arrived before the first start (the execution's book), per sender
    /// at most [`SENDER_MESSAGES`].
    book: Vec<(usize, Rc<Sent>)>,
    /// The committed consensus log and lock (a crash of the process keeps them).
    log: Vec<LogEntry>,
    lock: Option<Lock>,
    /// How much of them a power cut keeps: the log's length and the lock at the last
    /// synced batch.
    synced: (usize, bool),
    /// The stored agreement and this member's answer to late members.
    pub done: Option<(Agreed, Envelope)>,
    replied: BTreeMap<usize, u64>,
    /// The core ended without an agreement (stalled).
    ended: Option<&'static str>,
}

/// Where a crash hits an effect batch.
#[derive(Debug, Clone, Copy)]
enum Crash {
    /// In the middle of the append: this many entries durable, the lock or not, no send.
    Torn { keep: usize, lock: bool },
    /// After the writes, with only this many sends out.
    AfterWrites { sends: usize },
}

impl Honest {
    /// Member `i` of a scenario, not started.
    pub fn new(sc: &Scenario, i: usize) -> Self {
        Self {
            keys: sc.keys(i),
            job: sc.job(i),
            own: sc.observations[i].clone(),
            core: None,
            inc: 0,
            started: false,
            book: Vec::new(),
            log: Vec::new(),
            lock: None,
            synced: (0, false),
            done: None,
            replied: BTreeMap::new(),
            ended: None,
        }
    }

    /// Where the member stands, for a liveness failure's message.
    pub fn state(&self) -> String {
        match (&self.core, self.ended) {
            (_, Some(why)) => format!("ended: {why}"),
            (Some(c), None) => format!(
                "round {} step {} decided {:?} signatures {}",
                c.round(),
                c.step(),
                c.decided(),
                c.signatures().len()
            ),
            (None, None) => "down".into(),
        }
    }
}

/// The answer of an agreed member, as the member server builds it.
fn reply_of(a: &Agreed, me: Address) -> Envelope {
    let own_sig = a
        .signers
        .iter()
        .position(|s| *s == me)
        .and_then(|i| a.signatures.get(i).cloned());
    let first = a.observations.first().map(|o| &o.observation);
    Envelope {
        don_id: crate::scenario::DON_ID,
        config_version: crate::scenario::VERSION,
        execution_id: a.execution_id,
        market: first.map(|o| o.market).unwrap_or_default(),
        market_id: first.map(|o| o.market_id).unwrap_or_default(),
        sender: me,
        body: Body::Decided {
            round: a.attempt,
            observations: a.observations.clone(),
            commits: a.commits.clone(),
            report_signature: own_sig,
            agreed: true,
        },
    }
}

impl Sim {
    fn h(&mut self, i: usize) -> &mut Honest {
        self.honest[i].as_mut().expect("an honest member")
    }

    /// Member `i` starts (or restarts) its execution from what is durable.
    pub fn start_honest(&mut self, i: usize) -> Result<(), Violation> {
        let local = self.local(i);
        let sc_params = self.sc.params.clone();
        let h = self.h(i);
        if h.core.is_some() || h.done.is_some() || h.ended.is_some() {
            return Ok(());
        }
        let mut core = Core::new(sc_params, h.keys.clone(), h.job.clone(), h.own.clone());
        let input = Input::Start {
            log: h.log.clone(),
            lock: h.lock.clone(),
        };
        let effects = core.handle(input, local);
        h.core = Some(core);
        let first = !h.started;
        h.started = true;
        let book = std::mem::take(&mut h.book);
        self.note(|| format!("{i} starts (first: {first})"));
        if self.now == self.sc.gst {
            let r = self.honest_round();
            self.out.round_at_gst = self.out.round_at_gst.max(r);
        }
        self.perform(i, effects)?;
        for (from, env) in book {
            self.deliver_honest(i, from, env)?;
        }
        Ok(())
    }

    /// A timer of member `i`'s incarnation `inc` is due.
    pub fn timer_honest(&mut self, i: usize, inc: u32, timer: Timer) -> Result<(), Violation> {
        let local = self.local(i);
        let h = self.h(i);
        if h.inc != inc {
            return Ok(());
        }
        let Some(core) = h.core.as_mut() else {
            return Ok(());
        };
        let effects = core.handle(Input::Timeout(timer), local);
        self.note(|| format!("{i} timer {timer:?}"));
        self.perform(i, effects)
    }

    /// A checked message reaches honest member `i`.
    pub fn deliver_honest(
        &mut self,
        i: usize,
        from: usize,
        sent: Rc<Sent>,
    ) -> Result<(), Violation> {
        let local = self.local(i);
        let h = self.h(i);
        if !h.started {
            if h.book.iter().filter(|(f, _)| *f == from).count() < SENDER_MESSAGES {
                h.book.push((from, sent));
            }
            return Ok(());
        }
        if h.done.is_some() {
            return self.answer(i, from, &sent.env);
        }
        let Some(core) = h.core.as_mut() else {
            return Ok(());
        };
        let effects = core.handle(Input::Message(sent.env.clone()), local);
        self.note(|| format!("{i} takes {} from {from}", summary(&sent.env)));
        self.perform(i, effects)
    }

    /// An agreed member answers a message about the execution with its decision.
    fn answer(&mut self, i: usize, from: usize, env: &Envelope) -> Result<(), Violation> {
        if matches!(env.body, Body::Decided { agreed: true, .. }) {
            return Ok(());
        }
        let local = self.local(i);
        let h = self.h(i);
        let local = local.as_micros() as u64;
        if h.replied
            .get(&from)
            .is_some_and(|t| local < t + REPLY_EVERY)
        {
            return Ok(());
        }
        h.replied.insert(from, local);
        let reply = h.done.as_ref().map(|(_, r)| r.clone());
        let to = self.sc.scheme.members[from];
        match reply {
            Some(r) => self.send(i, Some(to), r),
            None => Ok(()),
        }
    }

    fn draw_crash(&mut self, effects: &[Effect]) -> Option<Crash> {
        if self.now >= self.sc.gst || self.sc.crash_p == 0.0 || !self.rng.gen_bool(self.sc.crash_p)
        {
            return None;
        }
        let entries: usize = effects
            .iter()
            .map(|e| match e {
                Effect::Append(v) => v.len(),
                _ => 0,
            })
            .sum();
        let sends = effects
            .iter()
            .filter(|e| matches!(e, Effect::Send { .. }))
            .count();
        Some(if entries > 0 && self.rng.gen_bool(0.5) {
            Crash::Torn {
                keep: self.rng.gen_range(0..=entries),
                lock: self.rng.gen_bool(0.5),
            }
        } else {
            Crash::AfterWrites {
                sends: self.rng.gen_range(0..=sends),
            }
        })
    }

    /// Makes the batch's appends and lock durable (as far as a crash lets them).
    fn write(&mut self, i: usize, effects: &[Effect], crash: Option<Crash>) {
        let (mut keep, keep_lock) = match crash {
            Some(Crash::Torn { keep, lock }) => (keep, lock),
            _ => (usize::MAX, true),
        };
        let h = self.h(i);
        let sync = h.core.as_ref().is_some_and(|c| c.must_sync(effects));
        for e in effects {
            match e {
                Effect::Append(entries) => {
                    let k = keep.min(entries.len());
                    h.log.extend(entries[..k].iter().cloned());
                    keep -= k;
                }
                Effect::Lock(l) if keep_lock && h.lock.is_none() => h.lock = Some(l.clone()),
                _ => {}
            }
        }
        // a crash in the middle of the append comes before its sync
        if sync && !matches!(crash, Some(Crash::Torn { .. })) {
            h.synced = (h.log.len(), h.lock.is_some());
        }
    }

    /// Performs an honest member's effect batch, checking the invariants.
    pub fn perform(&mut self, i: usize, effects: Vec<Effect>) -> Result<(), Violation> {
        let crash = self.draw_crash(&effects);
        self.write(i, &effects, crash);
        self.observe(i)?;
        for e in &effects {
            if let Effect::Lock(l) = e {
                self.check.honest_signature(i, &l.signature, "its lock")?;
            }
        }
        let mut sends_left = match crash {
            Some(Crash::Torn { .. }) => 0,
            Some(Crash::AfterWrites { sends }) => sends,
            None => usize::MAX,
        };
        let inc = self.h(i).inc;
        for e in effects {
            match e {
                Effect::Send { to, env } if sends_left > 0 => {
                    sends_left -= 1;
                    self.send(i, to, env)?;
                }
                Effect::Schedule { at, timer } if crash.is_none() => {
                    let g = self.global(i, at);
                    self.at(g, Event::Timer { to: i, inc, timer });
                }
                Effect::Agreed(a) if crash.is_none() => self.agreed(i, *a)?,
                Effect::Stalled { rounds } if crash.is_none() => {
                    self.note(|| format!("{i} stalls after {rounds} rounds"));
                    let h = self.h(i);
                    h.core = None;
                    h.ended = Some("stalled");
                }
                Effect::SignedAnother => {
                    return Err(Violation(format!(
                        "honest member {i} holds its signature of another report"
                    )));
                }
                _ => {}
            }
        }
        if let Some(c) = crash {
            self.crash(i, c);
        }
        Ok(())
    }

    /// After a step of member `i`: its decision (if new) and its bounds.
    fn observe(&mut self, i: usize) -> Result<(), Violation> {
        let now = self.now;
        let Some(core) = self.honest[i].as_ref().and_then(|h| h.core.as_ref()) else {
            return Ok(());
        };
        self.note(|| {
            let s = core.status();
            format!(
                "  {i} now: round {} step {} locked {:?}",
                s.round,
                s.step,
                s.locked.map(|(r, v)| (r, format!("{v:.10}")))
            )
        });
        self.check.bounds(i, core)?;
        let Some((round, id)) = core.decided() else {
            return Ok(());
        };
        if self.check.decided[i].is_some_and(|(r, s, _)| r == round && s == id) {
            return Ok(());
        }
        let voters: Vec<Address> = core.status().decided.map(|(_, _, v)| v).unwrap_or_default();
        self.note(|| format!("{i} DECIDES r{round} {id:.10}"));
        if self.sc.isolate_decider && self.check.decision.is_none() && now < self.sc.gst {
            let side = (0..self.sc.n).map(|j| j == i).collect();
            self.note(|| format!("{i} is cut off from the others until GST"));
            self.sc.net.partition = Some((now, side));
        }
        self.check.on_decision(i, round, id, &voters, now)
    }

    fn agreed(&mut self, i: usize, a: Agreed) -> Result<(), Violation> {
        self.check.on_agreed(i, &a)?;
        self.note(|| format!("{i} AGREED r{} signers {}", a.attempt, a.signers.len()));
        let me = self.sc.scheme.members[i];
        let h = self.h(i);
        let reply = reply_of(&a, me);
        h.done = Some((a, reply));
        h.core = None;
        Ok(())
    }

    fn crash(&mut self, i: usize, c: Crash) {
        let gst = self.sc.gst;
        let down = self.rng.gen_range(10 * MS..=3_000 * MS);
        let back = (self.now + down).min(gst).max(self.now + 1);
        let power = self.rng.gen_bool(0.5);
        self.out.crashes += 1;
        self.note(|| {
            let what = if power { "POWER CUT" } else { "CRASHES" };
            format!("{i} {what} ({c:?}), back at {:.3}ms", back as f64 / 1e3)
        });
        let h = self.h(i);
        if power {
            let (log, lock) = h.synced;
            h.log.truncate(log);
            if !lock {
                h.lock = None;
            }
        }
        h.core = None;
        h.inc += 1;
        self.at(back, Event::Start(i));
    }
}
