//! A DON member: its keys, its peers, its books of messages, and the entry points the
//! node uses. [`Don::agree`] runs one execution's Tendermint instance ([`crate::instance`])
//! to a decided set and f+1 report signatures over the report built from it;
//! [`Don::receive`] takes a message the server checked into the execution's book, or, for
//! an execution this member already decided, answers its sender with the decision.

pub use crate::agreed::Agreed;
use crate::book::{Books, Full};
use crate::config::DonConfig;
use crate::consensus::{Params, Secp256k1Keys};
pub use crate::decided::DecidedExecution;
use crate::host::Persisted;
use crate::job::Phases;
pub use crate::job::{AgreeError, BuildError, BuildReport, InstanceStatus, Job, ReportRefusal};
use crate::journal::{Journal, Write};
use crate::persist::{Persist, PersistError};
use crate::shared::{REPLY_EVERY, Shared};
use crate::wire::{self, Body, Envelope, SignedObservation};
use alloy::primitives::{Address, B256, Bytes};
use alloy::signers::local::PrivateKeySigner;
use cresolver_core::don::report_context;
use cresolver_metrics::{DonEvent, Metrics, ObservationSource, RefuseReason};
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How long a message to another member may take.
const SEND_TIMEOUT: Duration = Duration::from_secs(3);

/// Why a message was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The sender has too much waiting in the execution's book.
    BookFull,
}

impl Refused {
    /// The metric's reason.
    pub fn reason(self) -> RefuseReason {
        match self {
            Refused::BookFull => RefuseReason::BookFull,
        }
    }

    /// The metric and response label.
    pub fn as_str(self) -> &'static str {
        self.reason().as_str()
    }
}

/// A DON member.
pub struct Don {
    s: Shared,
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
        let params = Arc::new(Params {
            don_id: cfg.don_id,
            config_version: cfg.config_version,
            f: usize::from(cfg.f),
            members: members.clone(),
            context: context.clone(),
            // (at most an hour: `DonConfig::validate`)
            attempt_timeout_ms: cfg.attempt_timeout.as_millis() as u64,
            observation_grace_ms: cfg.observation_grace.as_millis() as u64,
            max_attempts: cfg.max_attempts,
            #[cfg(feature = "mutations")]
            mutation: None,
        });
        let keys = Arc::new(Secp256k1Keys::new(signer.clone()));
        let http = reqwest::Client::builder()
            .timeout(SEND_TIMEOUT)
            .connect_timeout(SEND_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .tcp_nodelay(true)
            .build()
            .unwrap_or_default();
        Ok(Self {
            s: Shared {
                cfg,
                members,
                signer,
                context,
                params,
                keys,
                http,
                journal: Journal::start(Arc::new(persist)),
                phases: Mutex::new(VecDeque::new()),
                metrics,
                books: Books::default(),
                done: Mutex::new(lru::LruCache::new(crate::shared::DONE_KEPT)),
                status: Mutex::new(HashMap::new()),
                decided: Mutex::new(crate::decided::DecidedLog::default()),
                stop: watch::channel(false).0,
                sent: std::sync::atomic::AtomicU64::new(0),
                told: crate::shared::told(),
            },
        })
    }

    /// The `[don]` section.
    pub fn config(&self) -> &DonConfig {
        &self.s.cfg
    }
    /// This member's signer address.
    pub fn address(&self) -> Address {
        self.s.address()
    }
    /// This member's keys (its recoveries remembered).
    pub(crate) fn keys(&self) -> &Arc<dyn crate::consensus::Keys> {
        &self.s.keys
    }
    /// Every member's address, in configuration order.
    pub fn members(&self) -> &[Address] {
        &self.s.members
    }
    /// The node's metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.s.metrics
    }
    /// The `reportContext` every member signs with.
    pub fn report_context(&self) -> &Bytes {
        &self.s.context
    }
    /// Votes that decide: more than two thirds of the members (2f+1 when n = 3f+1).
    pub fn quorum(&self) -> usize {
        self.s.quorum()
    }

    /// Ends every running agreement (they return [`AgreeError::ShuttingDown`]; what they
    /// voted and signed is persisted) and stops new ones.
    pub fn stop(&self) {
        self.s.stop.send_replace(true);
    }

    /// The agreement stored for an execution, if this member saw one.
    pub fn agreed(&self, exec: &B256) -> Result<Option<Agreed>, PersistError> {
        self.s.journal.persist().agreed(exec)
    }

    /// Transactions committed to the state file so far, and how many of them were
    /// synced to disk (one fsync each; concurrent executions share them).
    pub fn commits(&self) -> (u64, u64) {
        (self.s.journal.commits(), self.s.journal.fsyncs())
    }

    /// The phases of the executions this member agreed lately (at most
    /// [`crate::job::PHASES_KEPT`]), oldest first.
    pub fn phases(&self) -> Vec<Phases> {
        self.s.phases.lock().iter().copied().collect()
    }

    /// Every valid signature this member holds over the report `digest` of `exec`, by
    /// signer address (more than f+1 when more members signed): a transmitter whose
    /// chosen signer the forwarder does not know picks others.
    pub fn signatures(&self, exec: &B256, digest: &B256) -> Vec<(Address, Bytes)> {
        let done = self.s.done.lock();
        match done.peek(exec) {
            Some(d) if d.digest == *digest => d.sigs.iter().map(|(a, s)| (*a, s.clone())).collect(),
            _ => Vec::new(),
        }
    }

    /// What the operator sees of the executions in consensus now (an agreed one leaves
    /// it: see [`Don::decided`]).
    pub fn status(&self) -> Vec<InstanceStatus> {
        let s = self.s.status.lock();
        let mut v: Vec<InstanceStatus> = s.values().cloned().collect();
        v.sort_by_key(|x| x.execution_id);
        v
    }

    /// The executions decided lately, newest first (at most
    /// [`crate::decided::DECIDED_SHOWN`]).
    pub fn decided(&self) -> Vec<DecidedExecution> {
        self.s.decided.lock().newest_first()
    }

    /// Names the member whose transmission delivered (or is delivering) an execution's
    /// report, for [`Don::decided`].
    pub fn transmitted(&self, exec: &B256, by: Address) {
        self.s.decided.lock().transmitted(exec, by);
    }

    /// Messages this member has sent to other members so far (one per recipient).
    pub fn messages_sent(&self) -> u64 {
        self.s.sent.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many books are open and the bytes waiting in them.
    pub fn books(&self) -> (usize, usize) {
        self.s.books.size()
    }

    /// This member's place in the transmission order of `agreed`: 0 for the leader that
    /// proposed the decided set, then the following leaders of the rotation.
    pub fn transmit_rank(&self, agreed: &Agreed) -> u32 {
        let n = self.s.members.len();
        let me = self.s.members.iter().position(|m| *m == self.s.address());
        let leader = self.s.members.iter().position(|m| *m == agreed.leader);
        match (me, leader) {
            (Some(me), Some(leader)) => ((me + n - leader) % n) as u32,
            _ => 0,
        }
    }

    /// The leader of `round` of an execution.
    pub fn leader(&self, exec: &B256, round: u32) -> Address {
        self.s.leader(exec, round)
    }

    /// Takes in a message the server checked ([`wire::open`]): into its execution's book,
    /// or, when this member already decided the execution, answers the sender with the
    /// decision (and keeps a spare report signature it carries).
    pub async fn receive(&self, env: Envelope, bytes: usize) -> Result<(), Refused> {
        let exec = env.execution_id;
        if self.answer_if_decided(&env).await {
            return Ok(());
        }
        let slot = self.s.books.for_peer(exec, env.sender);
        let pushed = slot.inbox().push(env, bytes);
        match pushed {
            Ok(()) => {
                slot.tick.send_modify(|t| *t = t.wrapping_add(1));
                Ok(())
            }
            Err(Full::Sender) => {
                self.s
                    .metrics
                    .don_event(DonEvent::MessageRefused(Refused::BookFull.reason()));
                Err(Refused::BookFull)
            }
        }
    }

    /// `true` when the message's execution is decided here: the sender gets this member's
    /// decision (at most once per second), and a report signature it carries is kept.
    pub async fn answer_if_decided(&self, env: &Envelope) -> bool {
        let exec = env.execution_id;
        if !self.knows_decided(&exec).await {
            return false;
        }
        if let Body::Decided {
            report_signature: Some(sig),
            ..
        } = &env.body
        {
            let mut done = self.s.done.lock();
            if let Some(d) = done.peek_mut(&exec)
                && wire::recover(&d.digest, sig).ok() == Some(env.sender)
            {
                d.sigs.entry(env.sender).or_insert_with(|| sig.clone());
            }
        }
        let agreed = matches!(env.body, Body::Decided { agreed: true, .. });
        self.answer_replay(&exec, env.sender, agreed).await
    }

    /// For a message taken before and sent again (the server keeps what it needs of it):
    /// `true` when its execution is decided here, and its sender then gets this member's
    /// decision, at most once per second, unless it said it holds f+1 signatures itself
    /// (`agreed`: two members answering each other's answers would never stop) or it
    /// accepted this member's decision within that second (a message it sent before the
    /// decision reached it).
    pub async fn answer_replay(&self, exec: &B256, sender: Address, agreed: bool) -> bool {
        if !self.knows_decided(exec).await {
            return false;
        }
        let reply = {
            let mut done = self.s.done.lock();
            let Some(d) = done.peek_mut(exec) else {
                return false;
            };
            // answered lately, or it accepted this member's decision lately (sent when it
            // decided: a message the sender sent before that arrived is not answered with
            // what it holds already)
            let told = self
                .s
                .told
                .lock()
                .peek(exec)
                .and_then(|t| t.get(&sender).copied());
            let last = d.replied.get(&sender).copied().max(told);
            if agreed || last.is_some_and(|t| t.elapsed() < REPLY_EVERY) {
                None
            } else {
                d.replied.insert(sender, Instant::now());
                Some(d.reply.clone())
            }
        };
        if let Some(reply) = reply {
            self.s.send(reply, Some(sender));
        }
        true
    }

    /// Whether `exec` is decided here: kept in memory, or (for an execution with no book
    /// open here) stored in the state file (read on the blocking pool).
    async fn knows_decided(&self, exec: &B256) -> bool {
        if self.s.done.lock().contains(exec) {
            return true;
        }
        if self.s.books.is_open(exec) {
            return false;
        }
        let e = *exec;
        match self.s.journal.read(move |p| p.agreed(&e)).await {
            Ok(Some(a)) => {
                self.s.remember_done(&a, []);
                true
            }
            _ => false,
        }
    }

    /// Runs the agreement of `job`: this member's Tendermint instance for the execution,
    /// to a decided set and f+1 signatures over the report built from it. Resumes what a
    /// previous run persisted (the observation, the consensus log, the signed report).
    pub async fn agree(&self, job: Job) -> Result<Agreed, AgreeError> {
        self.agree_observed(job).await.map(|(agreed, _)| agreed)
    }

    /// [`Don::agree`], with this member's own signed observation of the execution (the
    /// one stored, which a previous run may have made): no second read of the state file
    /// after the agreement.
    pub async fn agree_observed(
        &self,
        job: Job,
    ) -> Result<(Agreed, SignedObservation), AgreeError> {
        let exec = job.execution_id;
        if *self.s.stop.borrow() {
            return Err(AgreeError::ShuttingDown);
        }
        // One hop to the journal's writer for everything a previous run left and the own
        // observation: stored unless one is (insert once, so a previous run's or a
        // concurrent call's stays), not synced (after a power cut a member observes again,
        // with another timestamp, and both observations are honest; no vote rests on it),
        // and read back with the agreement, and with the log and the lock when the
        // execution is not agreed (they are not used then).
        let signed = wire::sign_observation(job.observation.clone(), &self.s.signer)?;
        let mine = signed.signature.clone();
        let (agreed, own, persisted) = self
            .s
            .journal
            .commit_then(vec![Write::Observation(exec, Box::new(signed))], move |p| {
                let agreed = p.agreed(&exec)?;
                let persisted = match agreed {
                    Some(_) => None,
                    None => Some(Persisted {
                        log: p.log(&exec)?,
                        lock: p.lock(&exec)?,
                    }),
                };
                Ok((agreed, p.own_observation(&exec)?, persisted))
            })
            .await?;
        let own = own.ok_or(PersistError::Closed)?;
        if let Some(a) = agreed {
            self.s.remember_done(&a, []);
            self.s.decided.lock().record(DecidedExecution::of(&a, None));
            return Ok((a, own));
        }
        if own.signature == mine && persisted.as_ref().is_some_and(|p| p.log.is_empty()) {
            crate::shared::crash_point("don_observed");
        }
        self.s
            .metrics
            .don_event(DonEvent::ObservationReceived(ObservationSource::Own));
        tracing::info!(execution_id = %exec, leader = %self.s.leader(&exec, 0), "consensus started for the execution");
        let slot = self.s.books.own(exec);
        // (`None` only beside an agreement, which returned above)
        let persisted = persisted.unwrap_or_default();
        let result = crate::host::run(&self.s, (job, own.clone()), persisted, slot).await;
        // the host remembered its agreement (with every signature it saw)
        if result.is_ok() {
            self.s.books.close(&exec);
        }
        result.map(|agreed| (agreed, own))
    }
}
