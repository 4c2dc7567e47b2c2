//! What a member's parts share: its configuration and keys, its state file, its books,
//! the executions it decided, the live status of its agreements, and the sending of
//! messages to the other members.

use crate::agreed::Agreed;
use crate::book::Books;
use crate::config::{DonConfig, leader_of};
use crate::consensus::{Keys, Params};
use crate::decided::DecidedLog;
use crate::job::{InstanceStatus, Phases};
use crate::journal::Journal;
use crate::wire::{self, Body, Envelope};
use alloy::primitives::{Address, B256, Bytes};
use alloy::signers::local::PrivateKeySigner;
use cresolver_metrics::Metrics;
use lru::LruCache;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Decided executions a member keeps in memory to answer late members with (older ones
/// are read from its state file).
pub(crate) const DONE_KEPT: NonZeroUsize = NonZeroUsize::new(4_096).unwrap();
/// A member answers one sender's messages about a decided execution at most this often.
pub(crate) const REPLY_EVERY: Duration = Duration::from_secs(1);

/// Test failpoint, compiled in only with the `failpoints` feature:
/// `CRESOLVER_TEST_CRASH_AT=<point>` ends the process 300 ms after that point (exit 97, no
/// cleanup). Points: `don_observed` (own observation stored, not sent),
/// `don_voted` (this member's first precommit logged and sent), `don_signed` (a report
/// signed, stored and sent).
pub(crate) fn crash_point(point: &str) {
    #[cfg(feature = "failpoints")]
    if std::env::var("CRESOLVER_TEST_CRASH_AT").is_ok_and(|v| v == point) {
        tracing::error!(point, "CRESOLVER_TEST_CRASH_AT: exiting");
        tokio::spawn(async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            std::process::exit(97);
        });
    }
    #[cfg(not(feature = "failpoints"))]
    let _ = point;
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

/// A member's shared state.
pub(crate) struct Shared {
    pub(crate) cfg: DonConfig,
    pub(crate) members: Vec<Address>,
    pub(crate) signer: PrivateKeySigner,
    pub(crate) context: Bytes,
    /// What every execution's consensus core shares.
    pub(crate) params: Arc<Params>,
    /// This member's key, as the cores sign with it.
    pub(crate) keys: Arc<dyn Keys>,
    pub(crate) http: reqwest::Client,
    /// The state file, written through the group commit.
    pub(crate) journal: Journal,
    /// The phases of the executions agreed lately.
    pub(crate) phases: Mutex<VecDeque<Phases>>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) books: Books,
    /// The decided executions kept, the first kept forgotten first past [`DONE_KEPT`] (read
    /// with `peek`: a lookup does not make one newer).
    pub(crate) done: Mutex<LruCache<B256, Done>>,
    pub(crate) status: Mutex<HashMap<B256, InstanceStatus>>,
    /// The executions decided lately, for the operator.
    pub(crate) decided: Mutex<DecidedLog>,
    pub(crate) stop: watch::Sender<bool>,
    /// Messages sent to other members (one per recipient).
    pub(crate) sent: std::sync::atomic::AtomicU64,
    /// When each member accepted this member's decision of an execution (its `Decided`,
    /// sent when it decided, or as an answer), for the executions decided lately.
    pub(crate) told: Told,
}

/// When each member accepted this member's `Decided` of an execution (the answer to its
/// `POST` was 2xx): a member that holds it is not answered with it again within
/// [`REPLY_EVERY`]. Bounded as [`Shared::done`].
pub(crate) type Told = Arc<Mutex<LruCache<B256, HashMap<Address, Instant>>>>;

/// An empty [`Told`].
pub(crate) fn told() -> Told {
    Arc::new(Mutex::new(LruCache::new(DONE_KEPT)))
}

impl Shared {
    /// Votes that decide: more than two thirds of the members (2f+1 when n = 3f+1).
    pub(crate) fn quorum(&self) -> usize {
        self.params.quorum()
    }

    /// This member's signer address.
    pub(crate) fn address(&self) -> Address {
        self.signer.address()
    }

    /// The leader of `round` of an execution.
    pub(crate) fn leader(&self, exec: &B256, round: u32) -> Address {
        leader_of(&self.members, exec, round)
    }

    /// Keeps a decided execution to answer with (the oldest forgotten past [`DONE_KEPT`]),
    /// with every valid report signature seen: the agreement's and `more` (a transmitter
    /// whose f+1 hold one the forwarder refuses picks another).
    pub(crate) fn remember_done<'s>(
        &self,
        a: &Agreed,
        more: impl IntoIterator<Item = (&'s Address, &'s Bytes)>,
    ) {
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
                agreed: true,
            },
        };
        let mut done = self.done.lock();
        if !done.contains(&a.execution_id) {
            done.push(
                a.execution_id,
                Done {
                    reply: reply.clone(),
                    digest: a.digest,
                    sigs: BTreeMap::new(),
                    replied: HashMap::new(),
                },
            );
        }
        let Some(entry) = done.peek_mut(&a.execution_id) else {
            return;
        };
        entry.reply = reply;
        for (s, sig) in a.signers.iter().zip(&a.signatures) {
            entry.sigs.entry(*s).or_insert_with(|| sig.clone());
        }
        for (s, sig) in more {
            entry.sigs.entry(*s).or_insert_with(|| sig.clone());
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
            let decision = matches!(env.body, Body::Decided { .. })
                .then(|| (self.told.clone(), env.execution_id));
            tokio::spawn(async move {
                let sent = http
                    .post(url)
                    .header(wire::SIGNATURE_HEADER, sig)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await;
                match sent {
                    Ok(r) if r.status().is_success() => {
                        if let Some((told, exec)) = decision {
                            told.lock()
                                .get_or_insert_mut(exec, HashMap::new)
                                .insert(member, Instant::now());
                        }
                    }
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
}
