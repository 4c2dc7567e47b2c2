//! The simulated world of one run: a virtual clock and an event queue ordered by (global
//! time, sequence number), the network between members (delays, losses, duplicates,
//! reordering, a partition until GST; after GST nothing lost and every delay at most Δ),
//! and the members: honest cores performing their effects as the production host does
//! (appends and the lock durable before the batch's sends), crashing and restarting from
//! what was durable, and answering late members once agreed, as the member server does;
//! Byzantine members are in `byzantine.rs`. Every delivery first passes the server's
//! checks (`wire::check_shape`, `wire::check_carried`).

use crate::byzantine::Byz;
use crate::check::{Checker, Violation};
use crate::honest::Honest;
use crate::scenario::{Bias, MS, Scenario};
use alloy::primitives::Address;
use cresolver_don::consensus::{Mutation, Timer};
use cresolver_don::wire::{self, Envelope};
use rand::Rng;
use rand::rngs::StdRng;
use std::cell::Cell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::rc::Rc;
use std::time::Duration;

/// How long after GST a run may go on before it is cut (far beyond the liveness bound).
pub const HORIZON: u64 = 120_000 * MS;
/// The most events one run may take (a run past it is reported as not ending).
pub const MAX_EVENTS: u64 = 3_000_000;

/// Something that happens at a global time.
pub enum Event {
    /// A member starts its execution (first time, or after a crash).
    Start(usize),
    /// A message arrives.
    Deliver {
        /// The recipient.
        to: usize,
        /// The sender (the links are authenticated: always the true one).
        from: usize,
        /// The message (one allocation for every recipient of a send).
        env: Rc<Sent>,
    },
    /// A timer a member's core asked for is due (of the incarnation that asked).
    Timer {
        /// The member.
        to: usize,
        /// Its incarnation when it asked.
        inc: u32,
        /// The timer.
        timer: Timer,
    },
    /// A Byzantine member acts on its own.
    Tick(usize),
    /// The network stabilises: the partition heals, every crashed member is up.
    Gst,
}

/// A message on the network, with the server's verdict on it once computed: the checks
/// are a function of the message alone, so every recipient's server reaches the same one.
pub struct Sent {
    /// The message.
    pub env: Envelope,
    ok: Cell<Option<bool>>,
}

struct Queued {
    at: u64,
    seq: u64,
    ev: Event,
}

impl PartialEq for Queued {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Queued {}
impl PartialOrd for Queued {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Queued {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

/// What a run measured.
#[derive(Debug, Clone, Copy, Default)]
pub struct Outcome {
    /// Events processed.
    pub events: u64,
    /// Messages delivered to a member.
    pub delivered: u64,
    /// The highest round an honest member was in at GST.
    pub round_at_gst: u32,
    /// The highest deciding round of an honest member past `round_at_gst` (0 when every
    /// honest member decided before GST).
    pub rounds_after_gst: u32,
    /// The latest honest decision after GST, in global microseconds after GST.
    pub time_after_gst: u64,
    /// Honest crashes.
    pub crashes: u32,
    /// The time bound after GST of this run ([`crate::bound::time_bound`]).
    pub time_bound: u64,
    /// The run's f.
    pub f: u32,
}

/// One run.
pub struct Sim {
    /// The scenario.
    pub sc: Scenario,
    /// The run's randomness (after the scenario's draw).
    pub rng: StdRng,
    /// Global time, microseconds.
    pub now: u64,
    seq: u64,
    queue: BinaryHeap<Reverse<Queued>>,
    /// Honest members' state (`None` for a Byzantine member).
    pub honest: Vec<Option<Honest>>,
    /// Byzantine members' state.
    pub byz: Vec<Option<Byz>>,
    /// The invariants.
    pub check: Checker,
    /// Print a step trace.
    pub trace: bool,
    /// What was measured.
    pub out: Outcome,
    /// Members of the release before polka certificates ([`Bias::previous_release`]).
    old: Vec<bool>,
    /// The server's verdicts on messages seen, by [`fingerprint`].
    verdicts: std::collections::HashMap<u64, Vec<(Rc<Sent>, bool)>>,
}

impl Sim {
    /// The run of `seed`.
    pub fn new(seed: u64, mutation: Option<Mutation>, bias: Bias) -> Self {
        let (sc, rng) = Scenario::draw(seed, mutation, bias);
        let old = (0..sc.n)
            .map(|i| bias.previous_release && sc.honest(i) && i % 2 == 1)
            .collect();
        let check = Checker::new(&sc);
        let honest = (0..sc.n)
            .map(|i| sc.honest(i).then(|| Honest::new(&sc, i)))
            .collect();
        let byz = (0..sc.n)
            .map(|i| sc.byz[i].map(|s| Byz::new(&sc, i, s)))
            .collect();
        Self {
            sc,
            rng,
            now: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            honest,
            byz,
            check,
            trace: false,
            out: Outcome::default(),
            old,
            verdicts: std::collections::HashMap::new(),
        }
    }

    /// Queues an event at global time `at`.
    pub fn at(&mut self, at: u64, ev: Event) {
        self.seq += 1;
        self.queue.push(Reverse(Queued {
            at,
            seq: self.seq,
            ev,
        }));
    }

    /// Member `i`'s clock now, as its core reads it.
    pub fn local(&self, i: usize) -> Duration {
        Duration::from_micros(self.sc.clocks[i].local(self.now))
    }

    /// The global time when member `i`'s clock reads `at` (not before now).
    pub fn global(&self, i: usize, at: Duration) -> u64 {
        self.sc.clocks[i].global_at(at.as_micros() as u64, self.now)
    }

    /// Prints a trace line when tracing.
    pub fn note(&self, what: impl FnOnce() -> String) {
        if self.trace {
            println!("{:>10.3}ms {}", self.now as f64 / 1e3, what());
        }
    }

    /// Runs to the end: every honest member agreed, or the horizon.
    pub fn run(&mut self) -> Result<Outcome, Violation> {
        self.note(|| self.sc.describe());
        for i in 0..self.sc.n {
            self.at(self.sc.starts[i], Event::Start(i));
            if self.byz[i].is_some() {
                self.at(self.sc.starts[i] + 10 * MS, Event::Tick(i));
            }
        }
        self.at(self.sc.gst, Event::Gst);
        let end = self.sc.gst + HORIZON;
        while let Some(Reverse(q)) = self.queue.pop() {
            if q.at > end {
                break;
            }
            self.now = q.at;
            self.out.events += 1;
            if self.out.events > MAX_EVENTS {
                return Err(Violation(format!(
                    "the run takes more than {MAX_EVENTS} events"
                )));
            }
            self.event(q.ev)?;
            if self.all_agreed() {
                break;
            }
        }
        self.liveness()?;
        Ok(self.out)
    }

    fn event(&mut self, ev: Event) -> Result<(), Violation> {
        match ev {
            Event::Start(i) => {
                if self.honest[i].is_some() {
                    self.start_honest(i)
                } else {
                    self.start_byz(i)
                }
            }
            Event::Deliver { to, from, env } => self.deliver(to, from, env),
            Event::Timer { to, inc, timer } => {
                if self.honest[to].is_some() {
                    self.timer_honest(to, inc, timer)
                } else {
                    self.timer_byz(to, timer)
                }
            }
            Event::Tick(i) => self.tick(i),
            Event::Gst => {
                self.note(|| "GST: the partition heals, crashed members restart".into());
                self.out.round_at_gst = self.honest_round();
                Ok(())
            }
        }
    }

    /// The highest round of a running honest core.
    pub fn honest_round(&self) -> u32 {
        self.honest
            .iter()
            .flatten()
            .filter_map(|h| h.core.as_ref().map(|c| c.round()))
            .max()
            .unwrap_or(0)
    }

    fn all_agreed(&self) -> bool {
        self.honest.iter().flatten().all(|h| h.done.is_some())
    }

    /// Every honest member agreed, within the bound after GST.
    fn liveness(&mut self) -> Result<(), Violation> {
        let gst = self.sc.gst;
        for (i, h) in self.honest.iter().enumerate() {
            let Some(h) = h else { continue };
            if h.done.is_none() {
                return Err(Violation(format!(
                    "liveness: honest member {i} did not agree by GST + {} s ({})",
                    HORIZON / 1_000 / MS,
                    h.state()
                )));
            }
        }
        for d in self.check.decided.iter().flatten() {
            let (round, _, at) = *d;
            if at >= gst {
                let past = round.saturating_sub(self.out.round_at_gst);
                self.out.rounds_after_gst = self.out.rounds_after_gst.max(past);
                self.out.time_after_gst = self.out.time_after_gst.max(at - gst);
            }
        }
        self.out.time_bound = crate::bound::time_bound(&self.sc, self.out.round_at_gst);
        self.out.f = self.sc.f as u32;
        crate::bound::check(&self.sc, &self.out)
    }

    /// Member `from` sends `env` to `to`, or to every other member.
    pub fn send(
        &mut self,
        from: usize,
        to: Option<Address>,
        env: Envelope,
    ) -> Result<(), Violation> {
        if self.old[from] && matches!(env.body, wire::Body::Polka { .. }) {
            // the previous release has no such message
            return Ok(());
        }
        self.note(|| {
            let to = to.map_or("all".into(), |a| format!("{:?}", self.sc.index(&a)));
            format!("  {from} sends {} to {to}", summary(&env))
        });
        self.check.on_send(from, &env)?;
        let env = Rc::new(Sent {
            env,
            ok: Cell::new(None),
        });
        for j in 0..self.sc.n {
            if j == from || to.is_some_and(|t| t != self.sc.scheme.members[j]) {
                continue;
            }
            self.transmit(from, j, env.clone());
        }
        Ok(())
    }

    /// One message on one link: lost, delayed, maybe duplicated.
    fn transmit(&mut self, from: usize, to: usize, env: Rc<Sent>) {
        let net = self.sc.net.clone();
        let copies = if self.rng.gen_bool(net.dup_p) { 2 } else { 1 };
        for _ in 0..copies {
            let delay = if self.now >= self.sc.gst {
                self.rng.gen_range(net.delay_min.min(net.delta)..=net.delta)
            } else {
                if let Some((start, side)) = &net.partition
                    && self.now >= *start
                    && side[from] != side[to]
                {
                    return;
                }
                if self.rng.gen_bool(net.drop_p) {
                    continue;
                }
                let d = self.rng.gen_range(net.delay_min..=net.delay_max);
                if self.rng.gen_bool(net.long_p) {
                    d * self.rng.gen_range(3..=10)
                } else {
                    d
                }
            };
            self.at(
                self.now + delay,
                Event::Deliver {
                    to,
                    from,
                    env: env.clone(),
                },
            );
        }
    }

    /// A message arrives: the server's checks, then the member.
    fn deliver(&mut self, to: usize, from: usize, sent: Rc<Sent>) -> Result<(), Violation> {
        let env = &sent.env;
        if env.execution_id != self.sc.exec {
            return Ok(());
        }
        if self.old[to] && matches!(env.body, wire::Body::Polka { .. }) {
            self.note(|| format!("  {to} (previous release) refuses a polka from {from}"));
            return Ok(());
        }
        if !self.verdict(&sent) {
            self.note(|| {
                format!(
                    "  {to} refuses {} from {from} (server checks)",
                    summary(env)
                )
            });
            return Ok(());
        }

        self.out.delivered += 1;
        if self.honest[to].is_some() {
            self.deliver_honest(to, from, sent)
        } else {
            self.deliver_byz(to, sent)
        }
    }
}

impl Sim {
    /// The server's checks of a message: computed once per message, and once per run for
    /// a message sent again with the same content (members resend theirs every period).
    fn verdict(&mut self, sent: &Rc<Sent>) -> bool {
        if let Some(ok) = sent.ok.get() {
            return ok;
        }
        let env = &sent.env;
        let key = fingerprint(env);
        let known = self
            .verdicts
            .get(&key)
            .and_then(|v| v.iter().find(|(e, _)| e.env == *env))
            .map(|(_, ok)| *ok);
        let ok = known.unwrap_or_else(|| {
            let members = &self.sc.scheme.members;
            let scheme = &self.sc.scheme;
            let ok = wire::check_shape(
                env,
                members,
                crate::scenario::DON_ID,
                crate::scenario::VERSION,
            )
            .is_ok()
                && wire::check_carried(env, members, |d, s| scheme.recover(d, s)).is_ok();
            self.verdicts
                .entry(key)
                .or_default()
                .push((sent.clone(), ok));
            ok
        });
        sent.ok.set(Some(ok));
        ok
    }
}

/// A cheap hash of what distinguishes messages (equality is checked on a hit).
fn fingerprint(env: &Envelope) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    env.sender.hash(&mut h);
    match &env.body {
        wire::Body::Observation { observation } => observation.signature.hash(&mut h),
        wire::Body::Proposal {
            round, signature, ..
        } => (round, signature).hash(&mut h),
        wire::Body::Vote {
            round, signature, ..
        } => (round, signature).hash(&mut h),
        wire::Body::Decided {
            round,
            observations,
            commits,
            report_signature,
            ..
        } => {
            (round, commits.len(), report_signature).hash(&mut h);
            for o in observations {
                o.signature.hash(&mut h);
            }
        }
        wire::Body::Polka {
            round,
            value,
            prevotes,
        } => {
            (round, value, prevotes.len()).hash(&mut h);
            for p in prevotes {
                p.signature.hash(&mut h);
            }
        }
    }
    h.finish()
}

/// A message in a few words, for the trace.
pub fn summary(env: &Envelope) -> String {
    use wire::Body;
    match &env.body {
        Body::Observation { .. } => "observation".into(),
        Body::Proposal {
            round,
            pol_round,
            observations,
            ..
        } => format!(
            "proposal r{round} pol {pol_round:?} set {:.10}",
            cresolver_don::context::set_id(observations).to_string()
        ),
        Body::Vote {
            round, kind, value, ..
        } => format!(
            "{kind:?} r{round} {}",
            value.map_or("nil".into(), |v| format!("{:.10}", v.to_string()))
        ),
        Body::Decided {
            round,
            commits,
            report_signature,
            agreed,
            observations,
        } => format!(
            "decided r{round} set {:.10} commits {} signed {} agreed {agreed}",
            cresolver_don::context::set_id(observations).to_string(),
            commits.len(),
            report_signature.is_some()
        ),
        Body::Polka {
            round,
            value,
            prevotes,
        } => format!(
            "polka r{round} set {:.10} prevotes {}",
            value.to_string(),
            prevotes.len()
        ),
    }
}
