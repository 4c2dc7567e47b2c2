//! The consensus over a bad network and through restarts: messages dropped, delayed and
//! reordered by a proxy in front of every member and then healed, a member whose round
//! starts long after the others decided, a member restarted mid-round on its state file,
//! and a shutdown that ends an undecided agreement at once.

use super::*;
use axum::body::Bytes as Body_;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// A proxy in front of one member: while `storm` holds it drops about half the messages
/// and delays the others by up to 400 ms (so they arrive out of order); healed, it
/// forwards everything at once.
#[derive(Clone)]
struct Proxy {
    to: String,
    storm: Arc<AtomicBool>,
    /// Message kinds this proxy drops whatever the storm (`Envelope::kind`).
    drop_kinds: Arc<std::sync::Mutex<Vec<&'static str>>>,
    dropped: Arc<AtomicU64>,
    http: reqwest::Client,
}

async fn forward(State(p): State<Proxy>, headers: HeaderMap, body: Body_) -> StatusCode {
    let kind = serde_json::from_slice::<Envelope>(&body).map(|e| e.kind());
    if let Ok(kind) = kind
        && p.drop_kinds.lock().expect("lock").contains(&kind)
    {
        p.dropped.fetch_add(1, Ordering::SeqCst);
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    if p.storm.load(Ordering::SeqCst) {
        let (drop_it, delay) = {
            use rand::Rng;
            let mut rng = rand::thread_rng();
            (rng.gen_bool(0.5), rng.gen_range(0..400u64))
        };
        if drop_it {
            p.dropped.fetch_add(1, Ordering::SeqCst);
            return StatusCode::SERVICE_UNAVAILABLE;
        }
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    let mut req = p.http.post(&p.to).body(body.to_vec());
    for (k, v) in &headers {
        if k.as_str().starts_with("x-") || k.as_str() == "content-type" {
            req = req.header(k.clone(), v.clone());
        }
    }
    match req.send().await {
        Ok(r) => StatusCode::from_u16(r.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY),
        Err(_) => StatusCode::BAD_GATEWAY,
    }
}

/// Puts a proxy in front of every member: the configured URLs become the proxies', the
/// members listen on new ports behind them.
async fn with_proxies(
    net: &mut Net,
    storm: Arc<AtomicBool>,
) -> (
    Arc<AtomicU64>,
    Vec<Arc<std::sync::Mutex<Vec<&'static str>>>>,
) {
    let dropped = Arc::new(AtomicU64::new(0));
    let mut filters = Vec::new();
    for i in 0..net.members.len() {
        let proxy_listener = net.listeners[i].take().expect("not started");
        let real = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let to = format!("http://{}{}", real.local_addr().expect("addr"), wire::PATH);
        net.listeners[i] = Some(real);
        let drop_kinds = Arc::new(std::sync::Mutex::new(Vec::new()));
        filters.push(drop_kinds.clone());
        let app = axum::Router::new()
            .route(wire::PATH, axum::routing::post(forward))
            .with_state(Proxy {
                to,
                storm: storm.clone(),
                drop_kinds,
                dropped: dropped.clone(),
                http: reqwest::Client::new(),
            });
        tokio::spawn(async move { axum::serve(proxy_listener, app).await });
    }
    (dropped, filters)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dropped_delayed_and_reordered_messages_then_healed_agree_on_one_report() {
    let mut net = Net::new(4, 1).await;
    let storm = Arc::new(AtomicBool::new(true));
    let (dropped, _) = with_proxies(&mut net, storm.clone()).await;
    let honest: Vec<(usize, Observation)> = (0..4).map(|i| (i, net.observation(i, 0))).collect();
    let dons: Vec<Arc<Don>> = (0..4)
        .map(|i| net.start(i, Persist::in_memory().expect("db")))
        .collect();
    let runs: Vec<(Arc<Don>, Job)> = dons
        .iter()
        .zip(&honest)
        .map(|(d, (_, o))| (d.clone(), net.job(o.clone())))
        .collect();
    let healer = {
        let storm = storm.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(4)).await;
            storm.store(false, Ordering::SeqCst);
        })
    };
    let agreed = agree_all(runs).await;
    healer.await.expect("joins");
    assert!(
        dropped.load(Ordering::SeqCst) > 0,
        "the storm dropped messages"
    );
    net.check_all(&agreed, &honest);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_whose_round_starts_after_the_others_decided_catches_up() {
    let mut net = Net::new(4, 1).await;
    let late = 3;
    let honest: Vec<(usize, Observation)> = (0..4).map(|i| (i, net.observation(i, 0))).collect();
    let dons: Vec<Arc<Don>> = (0..4)
        .map(|i| net.start(i, Persist::in_memory().expect("db")))
        .collect();
    let early: Vec<(Arc<Don>, Job)> = (0..3)
        .map(|i| (dons[i].clone(), net.job(honest[i].1.clone())))
        .collect();
    let first = agree_all(early).await;
    // the late member's own round ends now: it learns the decision from the others
    // (a `Decided` message with 2f+1 precommits) and signs the same report
    let again = agree_all(vec![(dons[late].clone(), net.job(honest[late].1.clone()))]).await;
    let mut all = first.clone();
    all.extend(again.clone());
    net.check_all(&all, &honest);
    assert_eq!(again[0].attempt, first[0].attempt);
    assert!(again[0].commits.len() >= 3);
    assert_eq!(
        again[0].signers[0],
        net.addr(late),
        "it signed the report itself"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_restarted_mid_round_votes_as_before_and_agrees() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("restarted.sqlite");
    let mut net = Net::new(4, 1).await;
    let me = 0;
    let honest: Vec<(usize, Observation)> = (0..4).map(|i| (i, net.observation(i, 0))).collect();
    let first = net.start(me, Persist::open(&path).expect("db"));
    let other = net.start(1, Persist::in_memory().expect("db"));
    // two of four run: no quorum, the rounds go on (votes cast, timeouts, leader changes)
    let stopped = {
        let (a, b) = (first.clone(), other.clone());
        let (ja, jb) = (net.job(honest[me].1.clone()), net.job(honest[1].1.clone()));
        tokio::spawn(async move {
            let _ = tokio::time::timeout(
                Duration::from_millis(2_500),
                futures::future::join(a.agree(ja), b.agree(jb)),
            )
            .await;
        })
    };
    stopped.await.expect("joins");
    let logged = Persist::open(&path)
        .expect("db")
        .log(&net.exec)
        .expect("reads");
    assert!(!logged.is_empty(), "the member logged its consensus inputs");
    // the member stops (its server too); a new process on the same file takes over
    net.stop(me).await;
    drop(first);
    let restarted = net.don(me, Persist::open(&path).expect("reopens"));
    let (tx, rx) = oneshot::channel::<()>();
    let listener = TcpListener::bind(net.members[me].url.authority())
        .await
        .expect("rebinds");
    let server = tokio::spawn(serve(listener, restarted.clone(), async move {
        let _ = rx.await;
    }));
    let rest: Vec<Arc<Don>> = (2..4)
        .map(|i| net.start(i, Persist::in_memory().expect("db")))
        .collect();
    let mut runs = vec![
        (restarted.clone(), net.job(honest[me].1.clone())),
        (other.clone(), net.job(honest[1].1.clone())),
    ];
    for (k, d) in rest.iter().enumerate() {
        runs.push((d.clone(), net.job(honest[k + 2].1.clone())));
    }
    let agreed = agree_all(runs).await;
    net.check_all(&agreed, &honest);
    // no member saw the restarted one vote twice in a round
    for d in std::iter::once(&other).chain(rest.iter()) {
        assert_eq!(super::liars::events(d, "equivocation_seen", "vote"), 0);
    }
    let _ = tx.send(());
    let _ = server.await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_ends_an_undecided_agreement_at_once() {
    let mut net = Net::new(4, 1).await;
    let don = net.start(0, Persist::in_memory().expect("db"));
    let run = {
        let (d, job) = (don.clone(), net.job(net.observation(0, 0)));
        tokio::spawn(async move { d.agree(job).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let asked = std::time::Instant::now();
    don.stop();
    let ended = tokio::time::timeout(Duration::from_secs(2), run)
        .await
        .expect("ends within 2 s of stop")
        .expect("joins");
    assert!(
        matches!(ended, Err(cresolver_don::AgreeError::ShuttingDown)),
        "{ended:?}"
    );
    eprintln!("agreement ended {:?} after stop", asked.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f_plus_one_votes_far_ahead_move_a_lagging_member_one_does_not() {
    let mut net = Net::new(4, 1).await;
    let don = net.start(0, Persist::in_memory().expect("db"));
    let run = {
        let (d, job) = (don.clone(), net.job(net.observation(0, 0)));
        tokio::spawn(async move { d.agree(job).await })
    };
    let vote = |i: usize, round: u32| {
        let d = wire::vote_digest(
            DON_ID,
            VERSION,
            &net.exec,
            wire::VoteKind::Prevote,
            round,
            None,
        );
        net.envelope(
            net.addr(i),
            Body::Vote {
                round,
                kind: wire::VoteKind::Prevote,
                value: None,
                signature: wire::sign_digest(&net.keys[i], &d).expect("signs"),
            },
        )
    };
    let round_now = |don: &Don| don.status().first().map(|s| s.round);
    // one member far ahead (round 40) does not move it
    assert_eq!(send(&net, 0, &vote(1, 40), &net.keys[1]).await, 200);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(round_now(&don), Some(0));
    // a second one (f+1 = 2) in that round does: round 40 is past the 10 rounds this
    // DON allows, so the member joins it and gives up there
    assert_eq!(send(&net, 0, &vote(2, 40), &net.keys[2]).await, 200);
    let ended = tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .expect("the member moves to round 40 and stops")
        .expect("joins");
    assert!(
        matches!(
            ended,
            Err(cresolver_don::AgreeError::Stalled { rounds: 40 })
        ),
        "{ended:?}"
    );
    assert_eq!(
        round_now(&don),
        None,
        "a stopped instance leaves the status"
    );
    don.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_decided_member_that_missed_every_report_signature_gets_them_from_the_others() {
    // member 3 hears proposals and votes (so it decides) but no decision, observation or
    // report signature until the other three agreed among themselves and left; then it
    // asks with its own decision and the others answer theirs
    let mut net = Net::new(4, 1).await;
    let (_, filters) = with_proxies(&mut net, Arc::new(AtomicBool::new(false))).await;
    filters[3]
        .lock()
        .expect("lock")
        .extend(["decided", "observation"]);
    let honest: Vec<(usize, Observation)> = (0..4).map(|i| (i, net.observation(i, 0))).collect();
    let dons: Vec<Arc<Don>> = (0..4)
        .map(|i| net.start(i, Persist::in_memory().expect("db")))
        .collect();
    let late = {
        let (d, job) = (dons[3].clone(), net.job(honest[3].1.clone()));
        tokio::spawn(async move { tokio::time::timeout(AGREE_WITHIN, d.agree(job)).await })
    };
    let first = agree_all(
        (0..3)
            .map(|i| (dons[i].clone(), net.job(honest[i].1.clone())))
            .collect(),
    )
    .await;
    // the others are done: member 3 decided, alone with its own signature
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stuck = dons[3].status();
    assert!(
        stuck.first().is_some_and(|s| s.decided.is_some()),
        "member 3 decided and waits for signatures: {stuck:?}"
    );
    filters[3].lock().expect("lock").clear();
    let last = late
        .await
        .expect("joins")
        .expect("agrees in time")
        .expect("agrees");
    let mut all = first;
    all.push(last);
    net.check_all(&all, &honest);
}
