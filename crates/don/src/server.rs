//! The member endpoint: `POST /don/v1/message` on `[don].listen`. The cheap checks come
//! first and no signature is recovered before they pass: a body over the bound is refused
//! before it is read whole, a source address over its rate gets 429, a message already
//! taken in (a replay) is answered at once without any check or charge, a body that is not
//! a message of this DON naming a member gets 403, and the named member over its rate
//! from that source gets 429. Only then are signatures recovered: a message not signed by
//! the member it names, or carrying a forged observation or a polka that is not 2f+1
//! distinct members' valid prevotes, gets 403 and changes nothing.
//! At most 64 messages are read at once, 16 from one source (an IPv4 address or an IPv6
//! /64), each within 5 s.

use crate::member::Don;
use crate::wire::{self, MAX_MESSAGE_BYTES, SIGNATURE_HEADER};
use alloy::primitives::{Address, B256};
use axum::Router;
use axum::extract::{ConnectInfo, DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use governor::clock::{Clock, DefaultClock};
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{Quota, RateLimiter};
use lru::LruCache;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::hash::Hash;
use std::net::{IpAddr, SocketAddr};
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::Arc;
use std::time::Duration;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// Messages a source address may send per second (burst: twice that).
const PER_SOURCE_PER_SEC: NonZeroU32 = NonZeroU32::new(200).unwrap();
/// Messages one member may send per second (burst: twice that).
const PER_MEMBER_PER_SEC: NonZeroU32 = NonZeroU32::new(100).unwrap();
/// A rate's burst, as a multiple of the rate.
const BURST_FACTOR: NonZeroU32 = NonZeroU32::new(2).unwrap();
/// Keys a rate limiter holds before it forgets those whose allowance is whole again.
const RATE_KEYS: usize = 10_000;
/// Messages read at once (others wait for a slot): bounds the memory of slow senders.
const MAX_CONCURRENT: usize = 64;
/// Messages whose body one source is sending at once (more get 429): one slow sender
/// cannot hold every slot; members behind one address (a NAT, a test on loopback)
/// share it, but a member's message is read in a moment.
const MAX_PER_SOURCE: usize = 16;
/// How long reading one message may take.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// The source a request is counted against: its IPv4 address, or its IPv6 /64 (one
/// host is given a whole /64).
fn source_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let mut o = v6.octets();
                o[8..].fill(0);
                IpAddr::V6(std::net::Ipv6Addr::from(o))
            }
        },
        v4 => v4,
    }
}

/// The messages each source is reading now.
#[derive(Default)]
struct Reading(Mutex<HashMap<IpAddr, usize>>);

impl Reading {
    /// A slot for `src`, released when the guard drops; `None` past [`MAX_PER_SOURCE`].
    fn enter<'a>(&'a self, src: IpAddr) -> Option<ReadingGuard<'a>> {
        let mut m = self.0.lock();
        let n = m.entry(src).or_insert(0);
        if *n >= MAX_PER_SOURCE {
            return None;
        }
        *n += 1;
        Some(ReadingGuard { reading: self, src })
    }
}

struct ReadingGuard<'a> {
    reading: &'a Reading,
    src: IpAddr,
}

impl Drop for ReadingGuard<'_> {
    fn drop(&mut self) {
        let mut m = self.reading.0.lock();
        if let Some(n) = m.get_mut(&self.src) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                m.remove(&self.src);
            }
        }
    }
}

/// Per-key rate limits (a GCRA limiter, the same allowance as a token bucket of `rate`
/// per second holding twice that), with a bounded number of keys: past [`RATE_KEYS`], the
/// keys whose allowance is whole again are forgotten.
struct Buckets<K: Hash + Eq + Clone, C: Clock = DefaultClock> {
    limiter: RateLimiter<K, DefaultKeyedStateStore<K>, C, NoOpMiddleware<C::Instant>>,
}

impl<K: Hash + Eq + Clone> Buckets<K> {
    fn new(rate: NonZeroU32) -> Self {
        Self::with_clock(rate, DefaultClock::default())
    }
}

impl<K: Hash + Eq + Clone, C: Clock> Buckets<K, C> {
    fn with_clock(rate: NonZeroU32, clock: C) -> Self {
        let quota = Quota::per_second(rate).allow_burst(rate.saturating_mul(BURST_FACTOR));
        Self {
            limiter: RateLimiter::new(quota, DefaultKeyedStateStore::default(), clock),
        }
    }

    fn allow(&self, key: &K) -> bool {
        if self.limiter.len() > RATE_KEYS {
            self.limiter.retain_recent();
        }
        self.limiter.check_key(key).is_ok()
    }
}

/// Digests of messages already taken in: a replayed message is answered at once, checks
/// no signature and is charged to no bucket (a member cannot drain another member's
/// rate by replaying its messages). Each message taken, by digest, with what a replay of
/// it needs (its execution, its sender, whether it says the sender holds f+1
/// signatures); the first taken is forgotten first past [`Seen::CAP`] (a lookup does not
/// refresh an entry: a replayer cannot keep its digest here).
struct Seen(LruCache<B256, (B256, Address, bool)>);

impl Seen {
    const CAP: NonZeroUsize = NonZeroUsize::new(16_384).unwrap();

    fn new() -> Self {
        Self(LruCache::new(Self::CAP))
    }

    fn get(&self, d: &B256) -> Option<(B256, Address, bool)> {
        self.0.peek(d).copied()
    }

    fn insert(&mut self, d: B256, replay: (B256, Address, bool)) {
        if !self.0.contains(&d) {
            self.0.push(d, replay);
        }
    }
}

struct ServerState {
    don: Arc<Don>,
    sources: Buckets<IpAddr>,
    reading: Reading,
    senders: Buckets<(Address, IpAddr)>,
    seen: Mutex<Seen>,
}

/// The member API's route with its OpenAPI description.
fn described() -> OpenApiRouter<Arc<ServerState>> {
    OpenApiRouter::new().routes(routes!(message))
}

/// The OpenAPI description of the member endpoint (`POST /don/v1/message`); the node's
/// HTTP API description includes it.
pub fn openapi() -> utoipa::openapi::OpenApi {
    described().into_openapi()
}

/// The member API's router.
pub fn router(don: Arc<Don>) -> Router {
    let state = Arc::new(ServerState {
        don,
        sources: Buckets::new(PER_SOURCE_PER_SEC),
        reading: Reading::default(),
        senders: Buckets::new(PER_MEMBER_PER_SEC),
        seen: Mutex::new(Seen::new()),
    });
    let (router, _) = described().split_for_parts();
    router
        .layer(DefaultBodyLimit::max(MAX_MESSAGE_BYTES))
        .layer(tower::limit::GlobalConcurrencyLimitLayer::new(
            MAX_CONCURRENT,
        ))
        .with_state(state)
}

/// Serves the member API on `listener` until `shutdown`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    don: Arc<Don>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::serve::ListenerExt;
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(
        listener,
        router(don).into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown)
    .await
}

/// Takes a signed message from another member of this DON. Served on `[don].listen`,
/// not on the API's address. The cheap checks come first (size, the source's rate, a
/// replay, the DON and the member named, the member's rate); signatures are checked
/// last.
#[utoipa::path(post, path = "/don/v1/message", tag = "don",
    params(("x-cresolver-don-signature" = String, Header, description = "The sender's secp256k1 signature (0x and 130 hex digits) over keccak256 of `cresolver-don-message-v1` followed by the body")),
    request_body(content = Object, content_type = "application/json",
        description = "A signed message of this DON (`don_id`, `config_version`, `execution_id`, `market`, `market_id`, `sender` and its body: an observation, a proposal, a vote, a decision, or a polka of 2f+1 prevotes), at most 2 MiB"),
    responses(
        (status = OK, description = "Taken (`ok`), or taken before (`duplicate`)", content_type = "text/plain", body = String),
        (status = FORBIDDEN, description = "Not a message of this DON naming a member, or not signed by the member it names (`refused`)", content_type = "text/plain", body = String),
        (status = REQUEST_TIMEOUT, description = "The body was not read within 5 s", content_type = "text/plain", body = String),
        (status = CONFLICT, description = "The sender has too much waiting in the execution's book (`book_full`)", content_type = "text/plain", body = String),
        (status = PAYLOAD_TOO_LARGE, description = "The body is over the bound", content_type = "text/plain", body = String),
        (status = TOO_MANY_REQUESTS, description = "The source address or the member is over its rate, or the source has too many messages being read", content_type = "text/plain", body = String),
    ))]
async fn message(
    State(s): State<Arc<ServerState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    request: axum::extract::Request,
) -> (StatusCode, &'static str) {
    let src = source_of(peer.ip());
    if !s.sources.allow(&src) {
        don_refused_label(&s.don, cresolver_metrics::RefuseReason::SourceRate);
        return (StatusCode::TOO_MANY_REQUESTS, "rate limited");
    }
    // the slot is held while the body is read (a slow sender's time), not while the
    // message is checked
    let Some(reading) = s.reading.enter(src) else {
        return (
            StatusCode::TOO_MANY_REQUESTS,
            "too many messages being read",
        );
    };
    let body = match tokio::time::timeout(
        READ_TIMEOUT,
        axum::body::to_bytes(request.into_body(), MAX_MESSAGE_BYTES),
    )
    .await
    {
        Ok(Ok(b)) => b,
        Ok(Err(_)) => return (StatusCode::PAYLOAD_TOO_LARGE, "message too large"),
        Err(_) => return (StatusCode::REQUEST_TIMEOUT, "message not read in time"),
    };
    drop(reading);
    let digest = alloy::primitives::keccak256(&body);
    let replay = s.seen.lock().get(&digest);
    if let Some((exec, sender, agreed)) = replay {
        // taken before (its signatures were checked then): nothing more to check, parse
        // or charge, but a member that asks again about an execution decided here is
        // answered (a member resends the same bytes until it has what it needs)
        s.don.answer_replay(&exec, sender, agreed).await;
        return (StatusCode::OK, "duplicate");
    }
    let sig = headers.get(SIGNATURE_HEADER).and_then(|v| v.to_str().ok());
    let don = &s.don;
    let members = don.members();
    let (id, version) = (don.config().don_id, don.config().config_version);
    let env = match wire::precheck(&body, members, id, version) {
        Ok(e) => e,
        Err(e) => {
            don_refused(don, &e);
            tracing::debug!(%peer, error = %e, "DON message refused");
            return (StatusCode::FORBIDDEN, "refused");
        }
    };
    // the member's rate, from this source: a stranger naming a member spends its own
    if !s.senders.allow(&(env.sender, src)) {
        don_refused_label(don, cresolver_metrics::RefuseReason::MemberRate);
        return (StatusCode::TOO_MANY_REQUESTS, "rate limited");
    }
    let keys = don.keys();
    if let Err(e) = wire::authenticate(&env, &body, sig, members, |d, sig| keys.recover(d, sig)) {
        don_refused(don, &e);
        tracing::debug!(%peer, error = %e, "DON message refused");
        return (StatusCode::FORBIDDEN, "refused");
    }
    let replay = (
        env.execution_id,
        env.sender,
        matches!(env.body, wire::Body::Decided { agreed: true, .. }),
    );
    match don.receive(env, body.len()).await {
        Ok(()) => {
            // only a message taken is a replay next time: one refused (its book full)
            // is read again when it is sent again
            s.seen.lock().insert(digest, replay);
            (StatusCode::OK, "ok")
        }
        Err(why) => (StatusCode::CONFLICT, why.as_str()),
    }
}

fn don_refused(don: &Don, e: &wire::WireError) {
    don_refused_label(don, e.label());
}

fn don_refused_label(don: &Don, label: cresolver_metrics::RefuseReason) {
    don.metrics()
        .don_event(cresolver_metrics::DonEvent::MessageRefused(label));
}

#[cfg(test)]
mod tests {
    use super::*;
    use governor::clock::FakeRelativeClock;

    fn buckets(clock: &FakeRelativeClock) -> Buckets<u32, FakeRelativeClock> {
        Buckets::with_clock(PER_MEMBER_PER_SEC, clock.clone())
    }

    #[test]
    fn a_burst_past_the_rate_is_refused_per_key() {
        let clock = FakeRelativeClock::default();
        let b = buckets(&clock);
        let burst = PER_MEMBER_PER_SEC.get() * BURST_FACTOR.get();
        for _ in 0..burst {
            assert!(b.allow(&1));
        }
        assert!(!b.allow(&1), "the burst is twice the rate");
        // another key has its own allowance
        assert!(b.allow(&2));
        // one message's worth of time later, one more (and no more)
        clock.advance(Duration::from_secs(1) / PER_MEMBER_PER_SEC.get());
        assert!(b.allow(&1));
        assert!(!b.allow(&1));
        // a second later, the rate's worth again
        clock.advance(Duration::from_secs(1));
        for _ in 0..PER_MEMBER_PER_SEC.get() {
            assert!(b.allow(&1));
        }
        assert!(!b.allow(&1));
    }

    #[test]
    fn keys_whose_allowance_is_whole_are_forgotten_past_the_bound() {
        let clock = FakeRelativeClock::default();
        let b = buckets(&clock);
        for k in 0..=RATE_KEYS as u32 {
            assert!(b.allow(&k));
        }
        assert_eq!(b.limiter.len(), RATE_KEYS + 1);
        // long enough for every allowance to be whole again; one key is busy meanwhile
        clock.advance(Duration::from_secs(3));
        for _ in 0..10 {
            assert!(b.allow(&0));
        }
        assert!(b.allow(&u32::MAX));
        assert_eq!(
            b.limiter.len(),
            2,
            "only the busy key and the new one are kept"
        );
        // the busy key kept its spending
        let left = PER_MEMBER_PER_SEC.get() * BURST_FACTOR.get() - 10;
        for _ in 0..left {
            assert!(b.allow(&0));
        }
        assert!(!b.allow(&0));
    }

    fn digest(i: usize) -> B256 {
        B256::left_padding_from(&i.to_be_bytes())
    }

    #[test]
    fn seen_holds_at_most_its_bound_and_forgets_the_first_taken_first() {
        let mut seen = Seen::new();
        let cap = Seen::CAP.get();
        let replay = (B256::ZERO, Address::ZERO, false);
        for i in 0..cap {
            seen.insert(digest(i), replay);
        }
        // a lookup or a second insert does not make an entry newer
        assert!(seen.get(&digest(0)).is_some());
        seen.insert(digest(0), (B256::ZERO, Address::ZERO, true));
        seen.insert(digest(cap), replay);
        assert_eq!(seen.0.len(), cap);
        assert!(
            seen.get(&digest(0)).is_none(),
            "the first taken is forgotten"
        );
        assert!(seen.get(&digest(1)).is_some());
        assert!(seen.get(&digest(cap)).is_some());
    }
}
