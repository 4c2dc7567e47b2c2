//! The agreement of one DON member. For each execution (one request of one market) the
//! member signs and persists its own observation, sends it to every member, and then
//! runs attempts: the attempt's leader (a rotation fixed by the execution id) waits for
//! 2f+1 observations (and a short grace for more), fixes the set and proposes it with
//! the report it builds; every member recomputes the report from the set with the pure
//! aggregate and its own tally, refuses a proposal whose bytes differ, and otherwise
//! signs the forwarder digest — after persisting that report as the only one it will
//! ever sign for the execution. A signature goes to every member with its set; f+1
//! signatures over one report are an agreement. An attempt that does not agree in time
//! passes the lead to the next member, who re-proposes the report most members already
//! signed, if any. Messages arrive through [`Don::receive`] (the server).

pub use crate::agreed::Agreed;
use crate::config::{DonConfig, leader_of};
use crate::persist::{Lock, Persist, PersistError};
use crate::wire::{self, Body, Envelope, SignedObservation, WireError};
use alloy::primitives::{Address, B256, Bytes, U256};
use alloy::signers::local::PrivateKeySigner;
use cresolver_core::don::aggregate::Binding;
use cresolver_core::don::{Aggregate, Observation, aggregate, forwarder_digest, report_context};
use cresolver_metrics::Metrics;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Executions a member keeps messages for at once (the least recently touched are
/// dropped beyond it: a peer cannot grow a member's memory without bound).
const MAX_BOOKS: usize = 1_024;
/// Proposals of one leader a member keeps per execution (its newest).
const PROPOSALS_PER_LEADER: usize = 2;
/// How long a message to another member may take.
const SEND_TIMEOUT: Duration = Duration::from_secs(3);

/// Test hook, as the transaction manager's: `CRESOLVER_TEST_CRASH_AT=<point>` ends the
/// process at that point (exit 97, no cleanup). Points: `don_observed` (own observation
/// stored, not sent), `don_signed` (a report signed, stored and sent), `don_proposed`
/// (300 ms after this member sent its proposal as leader: mid-agreement).
fn crash_point(point: &str, delay: Option<Duration>) {
    if std::env::var("CRESOLVER_TEST_CRASH_AT").is_ok_and(|v| v == point) {
        tracing::error!(point, "CRESOLVER_TEST_CRASH_AT: exiting");
        match delay {
            None => std::process::exit(97),
            Some(d) => {
                tokio::spawn(async move {
                    tokio::time::sleep(d).await;
                    std::process::exit(97);
                });
            }
        }
    }
}

/// Builds the raw report of an aggregate (tally, report body, forwarder header), or says
/// why the aggregate makes no report.
pub type BuildReport = Arc<dyn Fn(&Aggregate) -> Result<Bytes, String> + Send + Sync>;

/// One execution this member observed and wants agreed.
#[derive(Clone)]
pub struct Job {
    pub execution_id: B256,
    pub market: Address,
    pub market_id: U256,
    /// This member's observation (used when none is stored for the execution yet).
    pub observation: Observation,
    /// The market's registered workers, in registration order.
    pub workers: Vec<Address>,
    pub build: BuildReport,
}

#[derive(Debug, thiserror::Error)]
pub enum AgreeError {
    #[error(
        "no agreement after {attempts} attempts (leaders): fewer than 2f+1 members observed the round, or fewer than f+1 signed one report; the round is retried"
    )]
    Stalled { attempts: u32 },
    #[error(transparent)]
    Persist(#[from] PersistError),
    #[error(transparent)]
    Wire(#[from] WireError),
}

/// A report some members signed, with their signatures.
#[derive(Debug, Clone, Default)]
struct Signed {
    report: Bytes,
    observations: Vec<SignedObservation>,
    attempt: u32,
    /// The other sets later signers sent with the same report (one per signer): a lying
    /// signer's set, when it arrives first, must not hide the set the report is built from.
    others: Vec<(u32, Vec<SignedObservation>)>,
    sigs: BTreeMap<Address, Bytes>,
}

impl Signed {
    /// Every set sent with this report (with its attempt), the first first.
    fn sets(&self) -> impl Iterator<Item = (u32, &Vec<SignedObservation>)> {
        std::iter::once((self.attempt, &self.observations))
            .chain(self.others.iter().map(|(a, set)| (*a, set)))
    }
}

/// What a member holds of one execution.
#[derive(Debug, Default)]
struct Book {
    observations: BTreeMap<Address, SignedObservation>,
    /// attempt → (the set, the report the leader built)
    proposals: BTreeMap<u32, (Vec<SignedObservation>, Bytes)>,
    signed: BTreeMap<B256, Signed>,
    /// Each signer's one report.
    signer_digest: HashMap<Address, B256>,
}

struct Slot {
    book: Mutex<Book>,
    tick: watch::Sender<u64>,
    touched: Mutex<Instant>,
}

impl Slot {
    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A DON member.
pub struct Don {
    cfg: DonConfig,
    members: Vec<Address>,
    signer: PrivateKeySigner,
    context: Bytes,
    http: reqwest::Client,
    persist: Persist,
    metrics: Arc<Metrics>,
    books: Mutex<HashMap<B256, Arc<Slot>>>,
}

impl Don {
    /// `cfg` must have passed [`DonConfig::validate`] for `signer`'s address.
    pub fn new(
        cfg: DonConfig,
        signer: PrivateKeySigner,
        persist: Persist,
        metrics: Arc<Metrics>,
    ) -> Result<Self, crate::DonConfigError> {
        cfg.validate(signer.address())?;
        let members = cfg.addresses();
        let context = Bytes::copy_from_slice(&report_context(
            cfg.don_id,
            cfg.config_version,
            cfg.f,
            &members,
        ));
        let http = reqwest::Client::builder()
            .timeout(SEND_TIMEOUT)
            .connect_timeout(SEND_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .tcp_nodelay(true)
            .build()
            .unwrap_or_default();
        Ok(Self {
            cfg,
            members,
            signer,
            context,
            http,
            persist,
            metrics,
            books: Mutex::new(HashMap::new()),
        })
    }

    pub fn config(&self) -> &DonConfig {
        &self.cfg
    }
    pub fn address(&self) -> Address {
        self.signer.address()
    }
    pub fn members(&self) -> &[Address] {
        &self.members
    }
    /// The `reportContext` every member signs with.
    pub fn report_context(&self) -> &Bytes {
        &self.context
    }
    fn f(&self) -> usize {
        usize::from(self.cfg.f)
    }

    /// The agreement stored for an execution, if this member saw one.
    pub fn agreed(&self, exec: &B256) -> Result<Option<Agreed>, PersistError> {
        self.persist.agreed(exec)
    }

    /// Every valid signature this member holds over the report `digest` of `exec`, by
    /// signer address (more than f+1 when more members signed): a transmitter whose
    /// chosen signer the forwarder does not know picks others.
    pub fn signatures(&self, exec: &B256, digest: &B256) -> Vec<(Address, Bytes)> {
        let slot = self.slot(*exec);
        let b = slot.book();
        b.signed
            .get(digest)
            .map(|s| s.sigs.iter().map(|(a, sig)| (*a, sig.clone())).collect())
            .unwrap_or_default()
    }

    /// This member's own observation of an execution, as stored.
    pub fn own_observation(&self, exec: &B256) -> Result<Option<SignedObservation>, PersistError> {
        self.persist.own_observation(exec)
    }

    /// This member's place in the transmission order of `agreed`: 0 for the leader that
    /// fixed the set, then the following leaders of the rotation.
    pub fn transmit_rank(&self, agreed: &Agreed) -> u32 {
        let n = self.members.len();
        let me = self.members.iter().position(|m| *m == self.address());
        let leader = self.members.iter().position(|m| *m == agreed.leader);
        match (me, leader) {
            (Some(me), Some(leader)) => ((me + n - leader) % n) as u32,
            _ => 0,
        }
    }

    fn slot(&self, exec: B256) -> Arc<Slot> {
        let mut books = self.books.lock().unwrap_or_else(|p| p.into_inner());
        if !books.contains_key(&exec) && books.len() >= MAX_BOOKS {
            // a slot an agreement holds (its `Arc` is shared) is never evicted
            let oldest = books
                .iter()
                .filter(|(_, s)| Arc::strong_count(s) == 1)
                .min_by_key(|(_, s)| *s.touched.lock().unwrap_or_else(|p| p.into_inner()))
                .map(|(k, _)| *k);
            if let Some(k) = oldest {
                books.remove(&k);
            }
        }
        let slot = books
            .entry(exec)
            .or_insert_with(|| {
                Arc::new(Slot {
                    book: Mutex::new(Book::default()),
                    tick: watch::channel(0).0,
                    touched: Mutex::new(Instant::now()),
                })
            })
            .clone();
        *slot.touched.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        slot
    }

    /// Takes in a message [`wire::open`] accepted. A proposal from a member that does not
    /// lead its attempt, a report signature that does not recover to its sender, or a
    /// second, different report or proposal from the same member is dropped (and counted).
    pub fn receive(&self, env: Envelope) -> Result<(), &'static str> {
        let slot = self.slot(env.execution_id);
        let (exec, sender, kind) = (env.execution_id, env.sender, env.kind());
        let refused = {
            let mut b = slot.book();
            match env.body {
                Body::Observation { observation } => {
                    if let std::collections::btree_map::Entry::Vacant(e) =
                        b.observations.entry(env.sender)
                    {
                        e.insert(observation);
                        self.metrics.don_event("observation_received", "peer");
                    }
                    None
                }
                Body::Proposal {
                    observations,
                    report,
                } => {
                    if leader_of(&self.members, &env.execution_id, env.attempt) != env.sender {
                        Some("not_the_leader")
                    } else {
                        match b.proposals.get(&env.attempt) {
                            Some((set, r)) if *set != observations || *r != report => {
                                Some("equivocating_leader")
                            }
                            Some(_) => None,
                            None => {
                                // each leader's two newest proposals are kept: one member
                                // cannot fill the book with attempts it leads, nor push
                                // the other leaders' proposals out
                                let theirs: Vec<u32> = b
                                    .proposals
                                    .keys()
                                    .filter(|a| {
                                        leader_of(&self.members, &env.execution_id, **a)
                                            == env.sender
                                    })
                                    .copied()
                                    .collect();
                                if theirs.len() >= PROPOSALS_PER_LEADER
                                    && theirs.iter().all(|a| *a > env.attempt)
                                {
                                    Some("stale_proposal")
                                } else {
                                    if theirs.len() >= PROPOSALS_PER_LEADER
                                        && let Some(oldest) = theirs.first()
                                    {
                                        b.proposals.remove(oldest);
                                    }
                                    for o in &observations {
                                        b.observations
                                            .entry(o.observation.observer)
                                            .or_insert_with(|| o.clone());
                                    }
                                    b.proposals.insert(env.attempt, (observations, report));
                                    None
                                }
                            }
                        }
                    }
                }
                Body::Signature {
                    report,
                    signature,
                    observations,
                } => {
                    let digest = forwarder_digest(&report, &self.context);
                    match wire::recover(&digest, &signature) {
                        Ok(a) if a == env.sender => match b.signer_digest.get(&env.sender) {
                            Some(d) if *d != digest => Some("equivocating_member"),
                            _ => {
                                b.signer_digest.insert(env.sender, digest);
                                let s = b.signed.entry(digest).or_default();
                                if s.observations.is_empty() {
                                    s.report = report;
                                    s.observations = observations;
                                    s.attempt = env.attempt;
                                } else if !s.sigs.contains_key(&env.sender)
                                    && s.sets().all(|(_, set)| *set != observations)
                                {
                                    s.others.push((env.attempt, observations));
                                }
                                s.sigs.entry(env.sender).or_insert(signature);
                                None
                            }
                        },
                        _ => Some("bad_report_signature"),
                    }
                }
            }
        };
        if let Some(why) = refused {
            self.metrics.don_event("signature_refused", why);
            tracing::warn!(execution_id = %exec, %sender, kind, reason = why, "a member's DON message dropped");
            return Err(why);
        }
        slot.tick.send_modify(|t| *t += 1);
        Ok(())
    }

    fn envelope(&self, job: &Job, attempt: u32, body: Body) -> Envelope {
        Envelope {
            don_id: self.cfg.don_id,
            config_version: self.cfg.config_version,
            execution_id: job.execution_id,
            market: job.market,
            market_id: job.market_id,
            attempt,
            sender: self.address(),
            body,
        }
    }

    /// Sends a message to every other member, without waiting (a member that is down
    /// misses it; observations and signatures are sent again at every new attempt).
    fn broadcast(&self, env: Envelope) {
        let (body, sig) = match wire::seal(&env, &self.signer) {
            Ok(x) => x,
            Err(e) => {
                tracing::error!(error = %e, "cannot sign a DON message");
                return;
            }
        };
        let body = bytes::Bytes::from(body);
        let me = self.address();
        for m in self.cfg.members.iter().filter(|m| m.address != me) {
            let url = match m.url.join(wire::PATH) {
                Ok(u) => u,
                Err(_) => continue,
            };
            let (http, body, sig, to, kind) = (
                self.http.clone(),
                body.clone(),
                sig.clone(),
                m.address,
                env.kind(),
            );
            tokio::spawn(async move {
                let sent = http
                    .post(url)
                    .header(wire::SIGNATURE_HEADER, sig)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await;
                match sent {
                    Ok(r) if r.status().is_success() => {}
                    Ok(r) => {
                        tracing::debug!(member = %to, kind, status = %r.status(), "a member refused a DON message")
                    }
                    Err(e) => {
                        tracing::debug!(member = %to, kind, error = %e, "a DON message did not reach a member")
                    }
                }
            });
        }
    }

    fn binding(&self, job: &Job) -> Binding {
        Binding {
            don_id: self.cfg.don_id,
            config_version: self.cfg.config_version,
            execution_id: job.execution_id,
            market: job.market,
            market_id: job.market_id,
        }
    }

    /// The report a set makes, as this member computes it.
    fn build(&self, job: &Job, set: &[SignedObservation]) -> Result<Bytes, String> {
        let obs: Vec<Observation> = set.iter().map(|o| o.observation.clone()).collect();
        let agg = aggregate(&obs, &self.binding(job), &job.workers, self.f())
            .map_err(|e| e.to_string())?;
        (job.build)(&agg)
    }

    /// The set a leader proposes: the report most members already signed (its set), if
    /// this member builds the same bytes from it; else every observation it holds.
    fn choose(&self, job: &Job, slot: &Slot) -> Vec<SignedObservation> {
        let (signed, own): (Vec<Signed>, Vec<SignedObservation>) = {
            let b = slot.book();
            let mut s: Vec<Signed> = b.signed.values().cloned().collect();
            s.sort_by_key(|x| std::cmp::Reverse(x.sigs.len()));
            (s, b.observations.values().cloned().collect())
        };
        for s in signed {
            if let Some((_, set)) = s
                .sets()
                .find(|(_, set)| self.build(job, set).as_ref() == Ok(&s.report))
            {
                return set.clone();
            }
        }
        own.into_iter().filter(|o| self.usable(job, o)).collect()
    }

    /// Whether an observation can be part of this job's set: bound to it, listing its
    /// workers in order, in range (one that is not would make every set fail).
    fn usable(&self, job: &Job, o: &SignedObservation) -> bool {
        cresolver_core::don::aggregate::check_observation(
            &o.observation,
            &self.binding(job),
            &job.workers,
        )
        .is_ok()
    }

    /// A proposal of `attempt`: recompute, compare, lock, sign, send. `true` when the
    /// proposal is one this member rebuilds (it signed it, or it had signed another).
    fn consider(
        &self,
        job: &Job,
        slot: &Slot,
        attempt: u32,
        set: Vec<SignedObservation>,
        proposed: &Bytes,
    ) -> Result<bool, AgreeError> {
        let exec = job.execution_id;
        let raw = match self.build(job, &set) {
            Ok(r) => r,
            Err(e) => {
                self.metrics.don_event("signature_refused", "bad_set");
                tracing::warn!(execution_id = %exec, attempt, error = %e, "not signing the leader's proposal: its set makes no report");
                return Ok(false);
            }
        };
        if raw != *proposed {
            self.metrics
                .don_event("signature_refused", "report_mismatch");
            tracing::warn!(execution_id = %exec, attempt, "not signing the leader's proposal: its report differs from the one this member builds from the same set");
            return Ok(false);
        }
        let digest = forwarder_digest(&raw, &self.context);
        let signature = wire::sign_digest(&self.signer, &digest)?;
        let lock = Lock {
            digest,
            report: raw,
            signature,
            observations: set,
            attempt,
        };
        // persisted before the signature leaves; never replaced
        let stored = self.persist.lock_once(&exec, &lock)?;
        if stored.digest != digest {
            self.metrics
                .don_event("signature_refused", "signed_another");
            tracing::info!(execution_id = %exec, attempt, signed = %stored.digest, proposed = %digest, "not signing: this member already signed a different report for this execution");
        }
        self.publish_lock(job, slot, &stored, attempt);
        if stored.digest == digest {
            crash_point("don_signed", Some(Duration::from_millis(300)));
        }
        Ok(true)
    }

    fn publish_lock(&self, job: &Job, slot: &Slot, lock: &Lock, attempt: u32) {
        {
            let mut b = slot.book();
            b.signer_digest.insert(self.address(), lock.digest);
            let s = b.signed.entry(lock.digest).or_default();
            // this member's own set (it rebuilt the report from it) comes first
            if s.observations != lock.observations {
                if !s.observations.is_empty() {
                    let first = (s.attempt, std::mem::take(&mut s.observations));
                    s.others.push(first);
                }
                s.report = lock.report.clone();
                s.observations = lock.observations.clone();
                s.attempt = lock.attempt;
            }
            s.sigs.insert(self.address(), lock.signature.clone());
        }
        let _ = attempt;
        self.broadcast(self.envelope(
            job,
            lock.attempt,
            Body::Signature {
                report: lock.report.clone(),
                signature: lock.signature.clone(),
                observations: lock.observations.clone(),
            },
        ));
    }

    /// f+1 signatures over one report, this member's own report first.
    fn agreement(&self, job: &Job, slot: &Slot, lock: Option<B256>) -> Option<Agreed> {
        let need = self.f() + 1;
        let candidate = {
            let b = slot.book();
            let mut ready: Vec<(&B256, &Signed)> = b
                .signed
                .iter()
                .filter(|(_, s)| s.sigs.len() >= need)
                .collect();
            ready.sort_by_key(|(d, _)| Some(**d) != lock);
            ready.first().map(|(d, s)| (**d, (*s).clone()))
        }?;
        let (digest, s) = candidate;
        // this member's own signature first (it knows what it checked), then by address
        let me = self.address();
        let (signers, signatures): (Vec<Address>, Vec<Bytes>) = s
            .sigs
            .get_key_value(&me)
            .into_iter()
            .chain(s.sigs.iter().filter(|(a, _)| **a != me))
            .take(need)
            .map(|(a, g)| (*a, g.clone()))
            .unzip();
        // the first set this member rebuilds the report from (a signer may send a wrong one)
        let rebuilt = s
            .sets()
            .find(|(_, set)| self.build(job, set).as_ref() == Ok(&s.report))
            .map(|(attempt, set)| (attempt, set.clone()));
        let recomputed = rebuilt.is_some();
        let (attempt, mut observations) = rebuilt.unwrap_or((s.attempt, s.observations));
        observations.sort_by_key(|o| o.observation.observer);
        Some(Agreed {
            execution_id: job.execution_id,
            report: s.report,
            context: self.context.clone(),
            digest,
            signers,
            signatures,
            observations,
            attempt,
            leader: leader_of(&self.members, &job.execution_id, attempt),
            recomputed,
        })
    }

    /// Runs the agreement of `job` to f+1 signatures on one report. Resumes what a
    /// previous run persisted (the observation, the signed report, the attempt).
    pub async fn agree(&self, job: Job) -> Result<Agreed, AgreeError> {
        let exec = job.execution_id;
        if let Some(a) = self.persist.agreed(&exec)? {
            return Ok(a);
        }
        let slot = self.slot(exec);
        let mut tick = slot.tick.subscribe();
        let own = match self.persist.own_observation(&exec)? {
            Some(o) => o,
            None => {
                let signed = wire::sign_observation(job.observation.clone(), &self.signer)?;
                let stored = self.persist.save_own_observation(&exec, &signed)?;
                crash_point("don_observed", None);
                stored
            }
        };
        self.metrics.don_event("observation_received", "own");
        slot.book().observations.insert(self.address(), own.clone());
        let mut attempt = self.persist.attempt(&exec)?;
        let announce = |attempt: u32| {
            self.broadcast(self.envelope(
                &job,
                attempt,
                Body::Observation {
                    observation: own.clone(),
                },
            ));
            if let Ok(Some(lock)) = self.persist.lock(&exec) {
                self.publish_lock(&job, &slot, &lock, attempt);
            }
        };
        announce(attempt);
        let timeout = Duration::from_millis(self.cfg.attempt_timeout_ms);
        let give_up = Instant::now() + timeout.saturating_mul(self.cfg.max_attempts.max(1));
        let grace = Duration::from_millis(self.cfg.observation_grace_ms);
        let need = 2 * self.f() + 1;
        let mut started = Instant::now();
        let mut quorum_since: Option<Instant> = None;
        let mut proposed: HashSet<u32> = HashSet::new();
        let mut handled: HashSet<u32> = HashSet::new();
        let mut endorsed = false;
        loop {
            let lock = self.persist.lock(&exec)?.map(|l| l.digest);
            if let Some(a) = self.agreement(&job, &slot, lock) {
                // f+1 others signed a report that this member, having signed none, can
                // rebuild: it signs it too (checked, locked and sent like a proposal)
                // before it takes the agreement. A transmitter whose f+1 include a
                // signer the forwarder refuses then has a spare signature; without it,
                // f+1 signatures that include such a signer could be all there ever is.
                if lock.is_none() && a.recomputed && !endorsed {
                    endorsed = true;
                    let _ =
                        self.consider(&job, &slot, a.attempt, a.observations.clone(), &a.report)?;
                    continue;
                }
                let a = self.persist.save_agreed(&exec, &a)?;
                self.metrics.don_event("agreement", "reached");
                tracing::info!(execution_id = %exec, attempt = a.attempt, leader = %a.leader, signers = ?a.signers, "DON agreement");
                return Ok(a);
            }
            let me = self.address();
            let leading = leader_of(&self.members, &exec, attempt) == me;
            if leading && !proposed.contains(&attempt) {
                let held = {
                    let b = slot.book();
                    b.observations
                        .values()
                        .filter(|o| self.usable(&job, o))
                        .count()
                };
                if held >= need {
                    let since = *quorum_since.get_or_insert_with(Instant::now);
                    if held >= self.members.len() || since.elapsed() >= grace {
                        let set = self.choose(&job, &slot);
                        match self.build(&job, &set) {
                            Ok(report) => {
                                tracing::info!(execution_id = %exec, attempt, observations = set.len(), "proposing the set as leader");
                                slot.book()
                                    .proposals
                                    .insert(attempt, (set.clone(), report.clone()));
                                // the leader locks (persists and signs) its own proposal
                                // before anyone sees it: restarted, it cannot propose
                                // and sign another for this execution
                                handled.insert(attempt);
                                let _ =
                                    self.consider(&job, &slot, attempt, set.clone(), &report)?;
                                self.broadcast(self.envelope(
                                    &job,
                                    attempt,
                                    Body::Proposal {
                                        observations: set,
                                        report,
                                    },
                                ));
                                crash_point("don_proposed", Some(Duration::from_millis(300)));
                            }
                            Err(e) => {
                                tracing::warn!(execution_id = %exec, attempt, error = %e, "as leader: the observations held make no report")
                            }
                        }
                        proposed.insert(attempt);
                    }
                }
            }
            let pending = {
                let b = slot.book();
                // a proposal far ahead of this member's attempt is not followed (a
                // member cannot drag the others to an attempt of its choosing)
                let ahead = attempt.saturating_add(self.members.len() as u32);
                b.proposals
                    .range(attempt..=ahead)
                    .filter(|(a, _)| !handled.contains(*a))
                    .last()
                    .map(|(a, p)| (*a, p.clone()))
            };
            if let Some((at, (set, report))) = pending {
                handled.insert(at);
                // only a proposal this member could rebuild moves it to its attempt: a
                // faulty member's proposals (sets that make no report, or another one)
                // do not drag the others from attempt to attempt, their timers restarted
                let valid = self.consider(&job, &slot, at, set, &report)?;
                if valid && at > attempt {
                    attempt = at;
                    self.persist.set_attempt(&exec, attempt)?;
                    started = Instant::now();
                    quorum_since = None;
                }
                continue;
            }
            let deadline = started + timeout;
            // however the attempts went (valid proposals of different reports from a
            // faulty leader move members on too), one call ends within max_attempts
            // attempt timeouts: the round is then retried
            if Instant::now() >= give_up {
                return Err(AgreeError::Stalled {
                    attempts: self.cfg.max_attempts,
                });
            }
            if Instant::now() >= deadline {
                // (the max_attempts-th timeout comes no sooner than `give_up`, which
                // ends the call above)
                attempt = attempt.saturating_add(1);
                self.persist.set_attempt(&exec, attempt)?;
                self.metrics.don_event("leader_change", "timeout");
                tracing::info!(execution_id = %exec, attempt, leader = %leader_of(&self.members, &exec, attempt), "no agreement in time: the next member leads");
                started = Instant::now();
                quorum_since = None;
                announce(attempt);
                continue;
            }
            let mut wake = deadline.min(give_up);
            if leading
                && !proposed.contains(&attempt)
                && let Some(since) = quorum_since
            {
                wake = wake.min(since + grace);
            }
            tokio::select! {
                _ = tick.changed() => {}
                _ = tokio::time::sleep_until(wake.into()) => {}
            }
        }
    }
}
