//! The local contracts match `onchain-interface.md`: resolveMarket's effects and every
//! revert (decoded by name), the CRE receiver path through the test forwarder.

use crate::common;

use alloy::primitives::{Address, B256, Bytes, U256};
use alloy::providers::Provider;
use common::chain::*;
use cresolver_chain::bindings::artifacts::{CREReceiver, TestForwarder};
use cresolver_chain::bindings::{ICREsolverMarket, IReputationRegistry};
use cresolver_chain::decode_revert;
use cresolver_core::report::{ExecutionHeader, ReportMetadata, build_raw_report, encode_report};

fn u(v: u64) -> U256 {
    U256::from(v)
}

/// Simulates `resolveMarket` from `from` and returns the decoded revert's name.
async fn revert_name(
    s: &MarketSetup,
    from: Address,
    workers: Vec<Address>,
    weights: Vec<U256>,
    scores: Vec<u8>,
) -> String {
    let err = s
        .dev
        .market()
        .resolveMarket(s.market_id, workers, weights, scores, true)
        .from(from)
        .call()
        .await
        .expect_err("resolveMarket should revert");
    let data = err
        .as_revert_data()
        .unwrap_or_else(|| panic!("no revert data in {err}"));
    decode_revert(&data).name()
}

#[tokio::test]
async fn resolve_market_pays_out_and_records_reputation() {
    let s = market_with_n_workers(3).await;
    let m = s.dev.market();
    let weights = vec![u(16000), u(3025), u(0)];
    let scores: Vec<u8> = vec![80, 80, 80, 57, 66, 43, 0, 0, 0];
    let receipt = m
        .resolveMarket(
            s.market_id,
            s.workers.clone(),
            weights.clone(),
            scores.clone(),
            true,
        )
        .from(s.dev.accounts[0])
        .send()
        .await
        .unwrap()
        .get_receipt()
        .await
        .unwrap();
    assert!(receipt.status());
    let ev = receipt
        .decoded_log::<ICREsolverMarket::MarketResolved>()
        .unwrap();
    assert_eq!(
        (ev.data.marketId, ev.data.resolver, ev.data.resolution),
        (s.market_id, s.dev.accounts[0], true)
    );

    // payouts: rewardPool * w / total + stake
    let total = u(16000 + 3025);
    for (i, w) in s.workers.iter().enumerate() {
        let expected = s.reward * weights[i] / total + s.stake;
        assert_eq!(m.balances(*w).call().await.unwrap(), expected, "worker {i}");
    }
    // reputation averages
    let r = m.getReputation(s.workers[1]).call().await.unwrap();
    assert_eq!(
        (r.resQuality, r.srcQuality, r.analysisDepth, r.count),
        (u(57), u(66), u(43), u(1))
    );
    let market = m.getMarket(s.market_id).call().await.unwrap();
    assert!(market.resolved && market.resolution);

    // three NewFeedback per worker, tagged, from the market as client
    let feedback: Vec<_> = receipt
        .inner
        .logs()
        .iter()
        .filter_map(|l| l.log_decode::<IReputationRegistry::NewFeedback>().ok())
        .map(|l| {
            (
                l.inner.data.agentId,
                l.inner.data.tag1.clone(),
                l.inner.data.tag2.clone(),
                l.inner.data.value,
                l.inner.data.clientAddress,
            )
        })
        .collect();
    assert_eq!(feedback.len(), 9);
    for (i, agent) in s.agents.iter().enumerate() {
        let mine: Vec<_> = feedback.iter().filter(|f| f.0 == agent.agent_id).collect();
        let tags: Vec<&str> = mine.iter().map(|f| f.1.as_str()).collect();
        assert_eq!(
            tags,
            ["resolution_quality", "source_quality", "analysis_depth"]
        );
        assert!(
            mine.iter()
                .all(|f| f.2 == "cresolver" && f.4 == s.dev.contracts.market)
        );
        let values: Vec<i128> = mine.iter().map(|f| f.3).collect();
        assert_eq!(
            values,
            scores[3 * i..3 * i + 3]
                .iter()
                .map(|v| i128::from(*v))
                .collect::<Vec<_>>()
        );
    }
    let rep = IReputationRegistry::new(s.dev.contracts.reputation, s.dev.provider.clone());
    let summary = rep
        .getSummary(
            s.agents[0].agent_id,
            vec![s.dev.contracts.market],
            "resolution_quality".into(),
            "cresolver".into(),
        )
        .call()
        .await
        .unwrap();
    assert_eq!((summary.count, summary.summaryValue), (1, 80));

    // withdraw moves the balance out
    let before = s.dev.eth_balance(s.workers[0]).await.unwrap();
    m.withdraw()
        .from(s.workers[0])
        .send()
        .await
        .unwrap()
        .get_receipt()
        .await
        .unwrap();
    assert!(s.dev.eth_balance(s.workers[0]).await.unwrap() > before);
    assert_eq!(m.balances(s.workers[0]).call().await.unwrap(), U256::ZERO);
}

#[tokio::test]
async fn every_revert_decodes_by_name() {
    let s = market_with_n_workers(3).await;
    let owner = s.dev.accounts[0];
    let w = s.workers.clone();
    let ok_weights = vec![u(1), u(1), u(1)];
    let ok_scores = vec![50u8; 9];

    let outsider = s.dev.accounts[15];
    assert_eq!(
        revert_name(
            &s,
            outsider,
            w.clone(),
            ok_weights.clone(),
            ok_scores.clone()
        )
        .await,
        "Unauthorized"
    );
    assert_eq!(
        revert_name(&s, owner, w.clone(), vec![u(1), u(1)], ok_scores.clone()).await,
        "ArrayMismatch"
    );
    assert_eq!(
        revert_name(&s, owner, w.clone(), ok_weights.clone(), vec![50u8; 8]).await,
        "ArrayMismatch"
    );
    assert_eq!(
        revert_name(&s, owner, w[..2].to_vec(), vec![u(1), u(1)], vec![50u8; 6]).await,
        "WorkerSetMismatch"
    );
    assert_eq!(
        revert_name(
            &s,
            owner,
            vec![w[0], w[1], outsider],
            ok_weights.clone(),
            ok_scores.clone()
        )
        .await,
        "UnregisteredWorker"
    );
    assert_eq!(
        revert_name(
            &s,
            owner,
            vec![w[0], w[1], w[1]],
            ok_weights.clone(),
            ok_scores.clone()
        )
        .await,
        "DuplicateWorker"
    );
    assert_eq!(
        revert_name(&s, owner, w.clone(), vec![U256::ZERO; 3], ok_scores.clone()).await,
        "ZeroTotalWeight"
    );

    // resolve for real, then again
    s.dev
        .market()
        .resolveMarket(
            s.market_id,
            w.clone(),
            ok_weights.clone(),
            ok_scores.clone(),
            false,
        )
        .from(owner)
        .send()
        .await
        .unwrap()
        .get_receipt()
        .await
        .unwrap();
    assert_eq!(
        revert_name(&s, owner, w.clone(), ok_weights, ok_scores).await,
        "AlreadyResolved"
    );
}

#[tokio::test]
async fn market_operator_approval_blocks_feedback_with_readable_error() {
    let s = market_with_n_workers(2).await;
    // worker 2 approves the market as operator of its agent: the registry refuses the
    // market's feedback as self-feedback and the whole resolveMarket reverts
    s.dev
        .identity()
        .approve(s.dev.contracts.market, s.agents[1].agent_id)
        .from(s.workers[1])
        .send()
        .await
        .unwrap()
        .get_receipt()
        .await
        .unwrap();
    let err = s
        .dev
        .market()
        .resolveMarket(
            s.market_id,
            s.workers.clone(),
            vec![u(1), u(1)],
            vec![50; 6],
            true,
        )
        .from(s.dev.accounts[0])
        .call()
        .await
        .unwrap_err();
    let reason = decode_revert(&err.as_revert_data().unwrap());
    assert_eq!(reason.name(), "Error");
    assert!(
        reason.to_string().contains("Self-feedback not allowed"),
        "{reason}"
    );
}

fn raw_report(
    market_id: U256,
    workers: &[Address],
    owner: Address,
    exec: u8,
) -> (Bytes, ReportMetadata) {
    let body = encode_report(
        market_id.into(),
        workers,
        &[u(100), u(50)],
        &[70, 60, 50, 40, 30, 20],
        true,
    );
    let meta = ReportMetadata::new(
        B256::repeat_byte(0xab),
        "cresolver-resolution",
        owner,
        [0, 1],
    );
    let header = ExecutionHeader {
        version: 1,
        workflow_execution_id: B256::repeat_byte(exec),
        timestamp: 1_780_000_000,
        don_id: 1,
        don_config_version: 1,
    };
    (build_raw_report(&header, &meta, &body), meta)
}

#[tokio::test]
async fn report_path_through_forwarder_and_receiver() {
    let s = market_with_n_workers(2).await;
    let fwd = TestForwarder::new(s.dev.contracts.forwarder, s.dev.provider.clone());
    let (raw, meta) = raw_report(s.market_id, &s.workers, s.dev.accounts[0], 0x01);
    let receipt = fwd
        .report(s.dev.contracts.receiver, raw.clone(), Bytes::new(), vec![])
        .from(s.dev.accounts[3])
        .gas(3_000_000)
        .send()
        .await
        .unwrap()
        .get_receipt()
        .await
        .unwrap();
    let processed = receipt
        .decoded_log::<TestForwarder::ReportProcessed>()
        .unwrap();
    assert!(processed.data.result, "receiver accepted the report");
    assert_eq!(processed.data.receiver, s.dev.contracts.receiver);
    let got = receipt
        .decoded_log::<CREReceiver::ReportReceived>()
        .unwrap();
    assert_eq!(got.data.workflowId, meta.workflow_id);
    assert_eq!(got.data.workflowName, meta.workflow_name);
    assert_eq!(got.data.workflowOwner, meta.workflow_owner);
    assert_eq!(got.data.reportId, meta.report_id);
    let resolved = receipt
        .decoded_log::<ICREsolverMarket::MarketResolved>()
        .unwrap();
    assert_eq!(resolved.data.resolver, s.dev.contracts.receiver);
    assert_eq!(
        s.dev
            .market()
            .getReputation(s.workers[0])
            .call()
            .await
            .unwrap()
            .resQuality,
        u(70)
    );

    // a second delivery: the forwarder does not revert, the receiver's failure shows in
    // ReportProcessed.result (AlreadyResolved inside), so status alone proves nothing
    let (raw2, _) = raw_report(s.market_id, &s.workers, s.dev.accounts[0], 0x02);
    let receipt = fwd
        .report(s.dev.contracts.receiver, raw2, Bytes::new(), vec![])
        .gas(3_000_000)
        .send()
        .await
        .unwrap()
        .get_receipt()
        .await
        .unwrap();
    assert!(receipt.status());
    assert!(
        !receipt
            .decoded_log::<TestForwarder::ReportProcessed>()
            .unwrap()
            .data
            .result
    );
    assert!(
        receipt
            .decoded_log::<ICREsolverMarket::MarketResolved>()
            .is_none()
    );

    // the same successful transmission again is refused by the forwarder itself
    let err = fwd
        .report(s.dev.contracts.receiver, raw, Bytes::new(), vec![])
        .call()
        .await
        .unwrap_err();
    assert_eq!(
        decode_revert(&err.as_revert_data().unwrap()).name(),
        "AlreadyAttempted"
    );
}

#[tokio::test]
async fn on_report_from_anyone_else_is_rejected() {
    let s = market_with_n_workers(2).await;
    let receiver = CREReceiver::new(s.dev.contracts.receiver, s.dev.provider.clone());
    let (raw, _) = raw_report(s.market_id, &s.workers, s.dev.accounts[0], 0x01);
    let err = receiver
        .onReport(
            Bytes::copy_from_slice(&raw[45..109]),
            Bytes::copy_from_slice(&raw[109..]),
        )
        .from(s.dev.accounts[0])
        .call()
        .await
        .unwrap_err();
    let reason = decode_revert(&err.as_revert_data().unwrap());
    assert_eq!(reason.name(), "InvalidSender");
    // a truncated rawReport is refused by the forwarder
    let fwd = TestForwarder::new(s.dev.contracts.forwarder, s.dev.provider.clone());
    let err = fwd
        .report(
            s.dev.contracts.receiver,
            raw.slice(..100),
            Bytes::new(),
            vec![],
        )
        .call()
        .await
        .unwrap_err();
    assert_eq!(
        decode_revert(&err.as_revert_data().unwrap()).name(),
        "InvalidReport"
    );
    assert!(
        !s.dev
            .market()
            .getMarket(s.market_id)
            .call()
            .await
            .unwrap()
            .resolved
    );
    let _ = s.dev.provider.get_block_number().await.unwrap();
}
