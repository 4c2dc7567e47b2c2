//! A DON member: its keys, its peers, its books of messages, and the entry points the
//! node uses. [`Don::agree`] runs one execution's Tendermint instance ([`crate::instance`])
//! to a decided set and f+1 report signatures over the report built from it;
//! [`Don::receive`] takes a message the server checked into the execution's book, or, for
//! an execution this member already decided, answers its sender with the decision.

pub use crate::agreed::Agreed;
use crate::book::{Books, Full};
use crate::config::{DonConfig, leader_of};
use crate::persist::{Persist, PersistError};
use crate::wire::{self, Body, Envelope, SignedObservation, WireError};
use alloy::primitives::{Address, B256, Bytes, U256};
use alloy::signers::local::PrivateKeySigner;
use cresolver_core::don::{Aggregate, Observation, forwarder_digest, report_context};
use cresolver_metrics::Metrics;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How long a message to another member may take.
const SEND_TIMEOUT: Duration = Duration::from_secs(3);
/// Decided executions a member keeps in memory to answer late members with (older ones
/// are read from its state file).
const DONE_KEPT: usize = 4_096;
/// A member answers one sender's messages about a decided execution at most this often.
const REPLY_EVERY: Duration = Duration::from_secs(1);

/// Builds the raw report of an aggregate (tally, report body, forwarder header), or says
/// why the aggregate makes no report.
pub type BuildReport = Arc<dyn Fn(&Aggregate) -> Result<Bytes, String> + Send + Sync>;

/// One execution this member observed and wants agreed.
#[derive(Clone)]
pub struct Job {
    /// The execution id (the forwarder's `workflowExecutionId`).
    pub execution_id: B256,
    /// The market contract.
    pub market: Address,
    /// The market id.
    pub market_id: U256,
    /// This member's observation (used when none is stored for the execution yet).
    pub observation: Observation,
    /// The market's registered workers, in registration order.
    pub workers: Vec<Address>,
    /// Builds the report of an aggregate.
    pub build: BuildReport,
}

/// Why an agreement did not end with a report.
#[derive(Debug, thiserror::Error)]
pub enum AgreeError {
    /// No set was decided in the rounds this call ran.
    #[error(
        "no decision after {rounds} consensus rounds (fewer than 2f+1 members reachable or observing); the round is retried and the consensus resumes where it stopped"
    )]
    Stalled {
        /// The rounds run.
        rounds: u32,
    },
    /// The node is shutting down; the consensus state is persisted.
    #[error("the node is shutting down; the agreement resumes on restart")]
    ShuttingDown,
    /// The decided set makes no report on this member (its worker list or report builder
    /// differs from the other members').
    #[error("the decided set makes no report on this member: {0}")]
    Unbuildable(String),
    /// The state file.
    #[error(transparent)]
    Persist(#[from] PersistError),
    /// Signing.
    #[error(transparent)]
    Wire(#[from] WireError),
}

/// Why a message was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The sender has too much waiting in the execution's book.
    BookFull,
}

impl Refused {
    /// The metric and response label.
    pub fn as_str(self) -> &'static str {
        match self {
            Refused::BookFull => "book_full",
        }
    }
}

/// A decided execution, kept to answer late members and to collect spare signatures.
pub(crate) struct Done {
    /// This member's `Decided` message.
    pub reply: Envelope,
    /// The agreed report's forwarder digest.
    pub digest: B256,
    /// Every valid report signature seen, by signer.
    pub sigs: BTreeMap<Address, Bytes>,
    /// When each sender was last answered.
    pub replied: HashMap<Address, Instant>,
}

/// What the operator sees of one execution's consensus.
#[derive(Debug, Clone, Default, Serialize)]
pub struct InstanceStatus {
    /// The execution.
    pub execution_id: B256,
    /// The current round (epoch) and its leader.
    pub round: u32,
    /// The leader of the current round.
    pub leader: Address,
    /// `propose`, `prevote`, `precommit` or `commit`.
    pub step: &'static str,
    /// The round and set id this member is locked on, if any.
    pub locked: Option<(u32, B256)>,
    /// The decided round and set id, with the precommits' signers.
    pub decided: Option<(u32, B256, Vec<Address>)>,
    /// Leader changes so far.
    pub leader_changes: u32,
}

/// A DON member.
pub struct Don {
    pub(crate) cfg: DonConfig,
    pub(crate) members: Vec<Address>,
    pub(crate) signer: PrivateKeySigner,
    pub(crate) context: Bytes,
    http: reqwest::Client,
    pub(crate) persist: Persist,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) books: Books,
    pub(crate) done: Mutex<(HashMap<B256, Done>, VecDeque<B256>)>,
    pub(crate) status: Mutex<HashMap<B256, InstanceStatus>>,
    pub(crate) stop: watch::Sender<bool>,
    /// Messages sent to other members (one per recipient).
    sent: std::sync::atomic::AtomicU64,
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
            books: Books::default(),
            done: Mutex::new((HashMap::new(), VecDeque::new())),
            status: Mutex::new(HashMap::new()),
            stop: watch::channel(false).0,
            sent: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// The `[don]` section.
    pub fn config(&self) -> &DonConfig {
        &self.cfg
    }
    /// This member's signer address.
    pub fn address(&self) -> Address {
        self.signer.address()
    }
    /// Every member's address, in configuration order.
    pub fn members(&self) -> &[Address] {
        &self.members
    }
    /// The node's metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }
    /// The `reportContext` every member signs with.
    pub fn report_context(&self) -> &Bytes {
        &self.context
    }
    pub(crate) fn f(&self) -> usize {
        usize::from(self.cfg.f)
    }
    /// Votes that decide: more than two thirds of the members (2f+1 when n = 3f+1).
    pub fn quorum(&self) -> usize {
        self.members.len() * 2 / 3 + 1
    }

    /// Ends every running agreement (they return [`AgreeError::ShuttingDown`]; what they
    /// voted and signed is persisted) and stops new ones.
    pub fn stop(&self) {
        self.stop.send_replace(true);
    }

    /// The agreement stored for an execution, if this member saw one.
    pub fn agreed(&self, exec: &B256) -> Result<Option<Agreed>, PersistError> {
        self.persist.agreed(exec)
    }

    /// Every valid signature this member holds over the report `digest` of `exec`, by
    /// signer address (more than f+1 when more members signed): a transmitter whose
    /// chosen signer the forwarder does not know picks others.
    pub fn signatures(&self, exec: &B256, digest: &B256) -> Vec<(Address, Bytes)> {
        let done = self.done.lock().unwrap_or_else(|p| p.into_inner());
        match done.0.get(exec) {
            Some(d) if d.digest == *digest => d.sigs.iter().map(|(a, s)| (*a, s.clone())).collect(),
            _ => Vec::new(),
        }
    }

    /// This member's own observation of an execution, as stored.
    pub fn own_observation(&self, exec: &B256) -> Result<Option<SignedObservation>, PersistError> {
        self.persist.own_observation(exec)
    }

    /// What the operator sees of the executions in consensus now, and of the last ones
    /// decided.
    pub fn status(&self) -> Vec<InstanceStatus> {
        let s = self.status.lock().unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<InstanceStatus> = s.values().cloned().collect();
        v.sort_by_key(|x| x.execution_id);
        v
    }

    /// Messages this member has sent to other members so far (one per recipient).
    pub fn messages_sent(&self) -> u64 {
        self.sent.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many books are open and the bytes waiting in them.
    pub fn books(&self) -> (usize, usize) {
        self.books.size()
    }

    /// This member's place in the transmission order of `agreed`: 0 for the leader that
    /// proposed the decided set, then the following leaders of the rotation.
    pub fn transmit_rank(&self, agreed: &Agreed) -> u32 {
        let n = self.members.len();
        let me = self.members.iter().position(|m| *m == self.address());
        let leader = self.members.iter().position(|m| *m == agreed.leader);
        match (me, leader) {
            (Some(me), Some(leader)) => ((me + n - leader) % n) as u32,
            _ => 0,
        }
    }

    /// The leader of `round` of an execution.
    pub fn leader(&self, exec: &B256, round: u32) -> Address {
        leader_of(&self.members, exec, round)
    }

    /// Takes in a message the server checked ([`wire::open`]): into its execution's book,
    /// or, when this member already decided the execution, answers the sender with the
    /// decision (and keeps a spare report signature it carries).
    pub fn receive(&self, env: Envelope, bytes: usize) -> Result<(), Refused> {
        let exec = env.execution_id;
        if self.answer_decided(&env) {
            return Ok(());
        }
        let slot = self.books.for_peer(exec, env.sender);
        let pushed = slot.inbox().push(env, bytes);
        match pushed {
            Ok(()) => {
                slot.tick.send_modify(|t| *t = t.wrapping_add(1));
                Ok(())
            }
            Err(Full::Sender) => {
                self.metrics.don_event("message_refused", "book_full");
                Err(Refused::BookFull)
            }
        }
    }

    /// `true` when `exec` is decided here: the sender gets this member's decision (at most
    /// once per [`REPLY_EVERY`]), and a report signature it carries is kept.
    fn answer_decided(&self, env: &Envelope) -> bool {
        let exec = env.execution_id;
        let known = {
            let done = self.done.lock().unwrap_or_else(|p| p.into_inner());
            done.0.contains_key(&exec)
        };
        if !known {
            // read the state file only for an execution with no book open here
            if self.books.is_open(&exec) {
                return false;
            }
            match self.persist.agreed(&exec) {
                Ok(Some(a)) => self.remember_done(&a),
                _ => return false,
            }
        }
        let reply = {
            let mut done = self.done.lock().unwrap_or_else(|p| p.into_inner());
            let Some(d) = done.0.get_mut(&exec) else {
                return false;
            };
            if let Body::Decided {
                report_signature: Some(sig),
                ..
            } = &env.body
                && wire::recover(&d.digest, sig).ok() == Some(env.sender)
            {
                d.sigs.entry(env.sender).or_insert_with(|| sig.clone());
            }
            let last = d.replied.get(&env.sender).copied();
            if last.is_some_and(|t| t.elapsed() < REPLY_EVERY)
                || matches!(env.body, Body::Decided { .. })
            {
                None
            } else {
                d.replied.insert(env.sender, Instant::now());
                Some(d.reply.clone())
            }
        };
        if let Some(reply) = reply {
            self.send(reply, Some(env.sender));
        }
        true
    }

    /// Keeps a decided execution to answer with (the oldest forgotten past [`DONE_KEPT`]).
    pub(crate) fn remember_done(&self, a: &Agreed) {
        let own_sig = a
            .signers
            .iter()
            .position(|s| *s == self.address())
            .and_then(|i| a.signatures.get(i).cloned());
        let reply = Envelope {
            don_id: self.cfg.don_id,
            config_version: self.cfg.config_version,
            execution_id: a.execution_id,
            market: a
                .observations
                .first()
                .map(|o| o.observation.market)
                .unwrap_or_default(),
            market_id: a
                .observations
                .first()
                .map(|o| o.observation.market_id)
                .unwrap_or_default(),
            sender: self.address(),
            body: Body::Decided {
                round: a.attempt,
                observations: a.observations.clone(),
                commits: a.commits.clone(),
                report_signature: own_sig,
            },
        };
        let mut done = self.done.lock().unwrap_or_else(|p| p.into_inner());
        let (map, order) = &mut *done;
        let entry = map.entry(a.execution_id).or_insert_with(|| {
            order.push_back(a.execution_id);
            Done {
                reply: reply.clone(),
                digest: a.digest,
                sigs: BTreeMap::new(),
                replied: HashMap::new(),
            }
        });
        entry.reply = reply;
        for (s, sig) in a.signers.iter().zip(&a.signatures) {
            entry.sigs.entry(*s).or_insert_with(|| sig.clone());
        }
        while order.len() > DONE_KEPT {
            if let Some(old) = order.pop_front() {
                map.remove(&old);
            }
        }
    }

    /// Sends a message to one member, or to every other member, without waiting (a member
    /// that is down misses it; the agreement sends again until it is done).
    pub(crate) fn send(&self, env: Envelope, to: Option<Address>) {
        let (body, sig) = match wire::seal(&env, &self.signer) {
            Ok(x) => x,
            Err(e) => {
                tracing::error!(error = %e, "cannot sign a DON message");
                return;
            }
        };
        let body = bytes::Bytes::from(body);
        let me = self.address();
        for m in self
            .cfg
            .members
            .iter()
            .filter(|m| m.address != me && to.is_none_or(|t| t == m.address))
        {
            let Ok(url) = m.url.join(wire::PATH) else {
                continue;
            };
            self.sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let (http, body, sig, member, kind) = (
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
                        tracing::debug!(%member, kind, status = %r.status(), "a member refused a DON message")
                    }
                    Err(e) => {
                        tracing::debug!(%member, kind, error = %e, "a DON message did not reach a member")
                    }
                }
            });
        }
    }

    /// The report digest of raw report bytes, with this DON's context.
    pub(crate) fn digest(&self, report: &[u8]) -> B256 {
        forwarder_digest(report, &self.context)
    }

    /// Runs the agreement of `job`: this member's Tendermint instance for the execution,
    /// to a decided set and f+1 signatures over the report built from it. Resumes what a
    /// previous run persisted (the observation, the consensus log, the signed report).
    pub async fn agree(&self, job: Job) -> Result<Agreed, AgreeError> {
        let exec = job.execution_id;
        if let Some(a) = self.persist.agreed(&exec)? {
            self.remember_done(&a);
            return Ok(a);
        }
        if *self.stop.borrow() {
            return Err(AgreeError::ShuttingDown);
        }
        let own = match self.persist.own_observation(&exec)? {
            Some(o) => o,
            None => {
                let signed = wire::sign_observation(job.observation.clone(), &self.signer)?;
                let stored = self.persist.save_own_observation(&exec, &signed)?;
                crate::instance::crash_point("don_observed");
                stored
            }
        };
        self.metrics.don_event("observation_received", "own");
        tracing::info!(execution_id = %exec, leader = %self.leader(&exec, 0), "consensus started for the execution");
        let slot = self.books.own(exec);
        let result = crate::instance::Instance::new(self, job, own, slot)
            .run()
            .await;
        if let Ok(a) = &result {
            self.remember_done(a);
            self.books.close(&exec);
        }
        result
    }
}
