//! What a first `devnet up` leaves to explore: a resolved market, a market whose round
//! failed (its workers refuse while `<data-dir>/refuse` exists), and an open market whose
//! resolution nobody requested yet.

use crate::DevnetError;
use crate::up::{MarketIds, Running, WorkerRecord, write_state};
use alloy::primitives::utils::parse_ether;
use std::time::{Duration, Instant};

/// The seeded questions, in order.
pub const QUESTIONS: [&str; 3] = [
    "Will the reference feed report YES by the end of 2026?",
    "Will the second reference feed report YES by the end of 2026?",
    "Will the third reference feed report YES by the end of 2027?",
];

/// Seeds a first start (`say` reports progress): market 0 resolved, market 1 failed,
/// market 2 open. Records the ids in `devnet.json`.
pub async fn seed(r: &mut Running, say: &dyn Fn(&str)) -> Result<MarketIds, DevnetError> {
    let reward = parse_ether("1").map_err(|e| DevnetError::Setup(e.to_string()))?;
    let stake = parse_ether("0.01").map_err(|e| DevnetError::Setup(e.to_string()))?;
    let owner = r.signers[0].address();
    let requester = r.signers[r.signers.len() - 1].address();
    let market = r.market();
    let (good, refusing): (Vec<WorkerRecord>, Vec<WorkerRecord>) =
        r.state.workers.iter().cloned().partition(|w| !w.refuses);
    let mut ids = Vec::new();
    for (q, set) in QUESTIONS.iter().zip([&good, &refusing, &good]) {
        let id = market.create(q, reward, 30 * 86_400, owner).await?;
        for w in set {
            market.join(id, w.agent_id, stake, w.owner).await?;
        }
        ids.push(id);
    }
    let m = MarketIds {
        resolved: ids[0],
        failed: ids[1],
        open: ids[2],
    };
    say(&format!(
        "market {}: requesting its resolution; the node resolves it",
        m.resolved
    ));
    market.request(m.resolved, requester).await?;
    let reader = market.clone();
    wait_for(
        Duration::from_secs(120),
        "market 0 to be resolved",
        move || {
            let reader = reader.clone();
            async move { Ok(reader.show(m.resolved).await?.resolved) }
        },
    )
    .await?;
    say(&format!(
        "market {}: requesting its resolution; its workers refuse, so its round fails",
        m.failed
    ));
    market.request(m.failed, requester).await?;
    let url = format!("http://{}/rounds/{}", r.state.api_listen, m.failed);
    wait_for(
        Duration::from_secs(120),
        "the round of market 1 to fail",
        move || {
            let url = url.clone();
            async move {
                let Ok(resp) = reqwest::get(&url).await else {
                    return Ok(false);
                };
                let v: serde_json::Value = resp.json().await.unwrap_or_default();
                Ok(v["state"] == "failed")
            }
        },
    )
    .await?;
    r.state.markets = Some(m);
    write_state(&r.dir, &r.state)?;
    Ok(m)
}

async fn wait_for<F, Fut>(limit: Duration, what: &str, mut check: F) -> Result<(), DevnetError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool, DevnetError>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if check().await? {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(DevnetError::Setup(format!(
                "waited {} s for {what}; see node.log in the data dir",
                limit.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
