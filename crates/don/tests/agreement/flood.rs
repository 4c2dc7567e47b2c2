//! A member flooded with made-up executions by another member: what it holds stays
//! bounded (books, bytes, memory) and a real execution still agrees meanwhile. The
//! memory is measured in a child process running this test alone (the other tests of
//! this binary would share its resident set).

use super::*;
use cresolver_core::don::WorkerObservation;

/// Made-up executions the flooder sends (one large message each, ~30 KiB).
const MADE_UP: usize = 1_200;
/// How much more resident memory the flooded member's process may hold.
const MEMORY_BOUND_KIB: u64 = 64 * 1024;

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_made_up_executions_is_bounded_and_rounds_still_agree() {
    let exe = std::env::current_exe().expect("the test binary");
    let out = std::process::Command::new(exe)
        .args(["--ignored", "--exact", "flood::flood_child", "--nocapture"])
        .env("CRESOLVER_FLOOD_CHILD", "1")
        .output()
        .expect("runs the child");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "the flood child failed:\n{text}");
    let line = text
        .lines()
        .find(|l| l.starts_with("FLOOD "))
        .unwrap_or_else(|| panic!("no FLOOD line:\n{text}"));
    eprintln!("{line}");
    let field = |k: &str| -> u64 {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(&format!("{k}=")))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{k} in {line}"))
    };
    assert!(
        field("accepted") > 100,
        "the flood reached the member: {line}"
    );
    assert!(
        field("books") <= cresolver_don::book::PEER_BOOKS as u64 + 1,
        "{line}"
    );
    assert!(
        field("held_bytes")
            <= (cresolver_don::book::PEER_BOOKS * cresolver_don::book::SENDER_BYTES) as u64,
        "{line}"
    );
    assert!(
        field("peak_kib").saturating_sub(field("idle_kib")) <= MEMORY_BOUND_KIB,
        "{line}"
    );
    assert_eq!(field("agreed"), 3, "{line}");
}

/// The child: four members on 127.0.0.1; member 3's key floods member 0 with made-up
/// executions while members 0, 1 and 2 agree on a real one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by a_flood_of_made_up_executions_is_bounded_and_rounds_still_agree"]
async fn flood_child() {
    if std::env::var("CRESOLVER_FLOOD_CHILD").is_err() {
        return;
    }
    let mut net = Net::new(4, 1).await;
    net.listeners[3] = None;
    let dons: Vec<Arc<Don>> = (0..3)
        .map(|i| net.start(i, Persist::in_memory().expect("db")))
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let idle = rss_kib();
    let flooder = net.keys[3].clone();
    let url = net.url(0);
    let template = net.observation(3, 0);
    // 256 workers: the largest observation a message may carry
    let workers: Vec<WorkerObservation> = (0..256u32)
        .map(|w| WorkerObservation {
            address: Address::from_word(B256::from(U256::from(w + 1))),
            answer: None,
            failure: Some("x".repeat(32)),
        })
        .collect();
    let accepted = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let peak = Arc::new(std::sync::atomic::AtomicU64::new(idle));
    let flood = {
        let (accepted, peak) = (accepted.clone(), peak.clone());
        tokio::spawn(async move {
            let http = reqwest::Client::new();
            for k in 0..MADE_UP {
                let exec = keccak256((k as u64).to_be_bytes());
                let mut o = template.clone();
                o.execution_id = exec;
                o.workers = workers.clone();
                let env = Envelope {
                    don_id: DON_ID,
                    config_version: VERSION,
                    execution_id: exec,
                    market: o.market,
                    market_id: o.market_id,
                    sender: flooder.address(),
                    body: Body::Observation {
                        observation: wire::sign_observation(o, &flooder).expect("signs"),
                    },
                };
                let (body, sig) = wire::seal(&env, &flooder).expect("seals");
                let status = http
                    .post(&url)
                    .header(wire::SIGNATURE_HEADER, sig)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await
                    .map(|r| r.status().as_u16())
                    .unwrap_or(0);
                if status == 200 {
                    accepted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                } else {
                    // over the member's rate: wait as a sender would
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                peak.fetch_max(rss_kib(), std::sync::atomic::Ordering::SeqCst);
            }
        })
    };
    // a real execution agrees among members 0, 1 and 2 meanwhile
    tokio::time::sleep(Duration::from_millis(500)).await;
    let runs: Vec<(Arc<Don>, Job)> = (0..3)
        .map(|i| (dons[i].clone(), net.job(net.observation(i, 0))))
        .collect();
    let agreed = agree_all(runs).await;
    net.check_all(
        &agreed,
        &(0..3)
            .map(|i| (i, net.observation(i, 0)))
            .collect::<Vec<_>>(),
    );
    flood.await.expect("joins");
    let (books, held) = dons[0].books();
    println!(
        "FLOOD accepted={} books={books} held_bytes={held} idle_kib={idle} peak_kib={} agreed={}",
        accepted.load(std::sync::atomic::Ordering::SeqCst),
        peak.load(std::sync::atomic::Ordering::SeqCst)
            .max(rss_kib()),
        agreed.len()
    );
}
