//! Evaluator isolation: the labels the LLM evaluator sees are a fresh random order of
//! the responders per round (so a worker cannot know, or name, its own label), recorded
//! with the evaluation, and rebuilding the evaluator's input from a recorded order gives
//! exactly the prompt the round sent. Peers shown to workers carry other labels. A round
//! whose progress cannot be stored stops before its next stage: the LLM is not asked.

use crate::common;

use alloy::primitives::Address;
use common::{Scripted, agent, behaviour, llm_server, slot};
use cresolver_core::Reputation;
use cresolver_devnet::agent::DeterminationMode;
use cresolver_evaluate::Fallback;
use cresolver_evaluate::llm::{LlmConfig, LlmEvaluator};
use cresolver_pipeline::round::{
    Engine, RoundError, RoundInput, RoundProgress, Stage, StoreError, evaluation_input,
};
use cresolver_pipeline::workflow::Workflow;
use cresolver_workers::fanout::WorkerSlot;
use std::sync::Arc;
use std::time::Duration;

const N: usize = 8;

/// The LLM evaluator's settings for the scripted server at `url` (no retry, no fallback).
fn llm_config(url: &str) -> LlmConfig {
    LlmConfig {
        base_url: url.parse().unwrap(),
        model: "m".into(),
        api_key: None,
        timeout: Duration::from_secs(5),
        retries: 0,
        retry_backoff: Duration::from_millis(10),
        max_tokens: 1000,
        max_reply_bytes: 64 * 1024,
        max_prompt_chars: 200_000,
        fallback: Fallback::Fail,
    }
}

/// A round of market 7 on the reference question, asking `workers` (no reputation yet).
fn round_input(workers: Vec<WorkerSlot>) -> RoundInput {
    RoundInput {
        market_id: 7u64.into(),
        question: "Will the reference feed report YES?".into(),
        deadline: None,
        reference_time: 1_780_272_000,
        reputations: vec![Reputation::default(); workers.len()],
        workers,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_rounds_get_different_labels_and_a_recorded_order_rebuilds_the_prompt() {
    let mut slots = Vec::new();
    for i in 0..N {
        let det = if i % 2 == 0 {
            DeterminationMode::Yes
        } else {
            DeterminationMode::No
        };
        slots.push(slot(
            i as u8 + 1,
            &agent(behaviour(det, 0.5 + i as f64 / 20.0)).await,
        ));
    }
    let entries: Vec<serde_json::Value> = (1..=N)
        .map(|k| {
            let mut o = serde_json::json!({ "workerId": format!("W{k}") });
            for n in cresolver_core::Dimensions::NAMES {
                o[n] = serde_json::json!(10 * k);
            }
            o
        })
        .collect();
    let (url, llm) = llm_server(vec![Scripted::content(
        &serde_json::json!({ "workers": entries }).to_string(),
    )])
    .await;
    let cfg = llm_config(&url);
    let evaluator = LlmEvaluator::new(cfg, cresolver_workers::StageClient::default_http());
    let engine = Engine::with_evaluator(
        Workflow::default_named("labels"),
        cresolver_workers::StageClient::default_http(),
        Arc::new(evaluator.clone()),
    );
    let input = round_input(slots);

    let first = engine.run(&input).await.unwrap();
    let second = engine.run(&input).await.unwrap();
    let (o1, o2) = (&first.evaluation.order, &second.evaluation.order);
    let mut sorted = o1.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        (0..N).collect::<Vec<_>>(),
        "a permutation of the responders"
    );
    assert_ne!(
        o1, o2,
        "two rounds of one market got the same evaluator labels"
    );

    // each round's prompt is rebuilt exactly from its recorded order (what replay does)
    let prompts: Vec<serde_json::Value> = llm
        .requests
        .lock()
        .unwrap()
        .iter()
        .map(|(_, body)| body.clone())
        .collect();
    assert_eq!(prompts.len(), 2);
    for (outcome, sent) in [(&first, &prompts[0]), (&second, &prompts[1])] {
        let (rebuilt, slot_of) = evaluation_input(
            7u64.into(),
            &input.question,
            input.reference_time,
            &outcome.resolve,
            &outcome.challenges,
            Some(&outcome.evaluation.order),
        );
        assert_eq!(slot_of, outcome.evaluation.order);
        assert_eq!(&evaluator.request_body(&rebuilt), sent);
        // the scores follow the labels: W(k+1) scored 10(k+1) sits at its slot
        for (k, &slot) in outcome.evaluation.order.iter().enumerate() {
            let s = outcome.scores[slot].as_ref().unwrap();
            assert_eq!(s.timeliness, (10 * (k + 1)) as f64, "slot {slot}");
        }
    }
    assert_ne!(
        prompts[0], prompts[1],
        "the prompts differ by the labels' order"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_whose_progress_is_not_stored_stops_before_the_evaluator() {
    let mut slots = Vec::new();
    for i in 0..3u8 {
        slots.push(slot(
            i + 1,
            &agent(behaviour(DeterminationMode::Yes, 0.8)).await,
        ));
    }
    let (url, llm) = llm_server(vec![]).await;
    let cfg = llm_config(&url);
    let engine = Engine::with_evaluator(
        Workflow::default_named("persist"),
        cresolver_workers::StageClient::default_http(),
        Arc::new(LlmEvaluator::new(
            cfg,
            cresolver_workers::StageClient::default_http(),
        )),
    );
    let input = round_input(slots);
    let stages = std::sync::Mutex::new(Vec::new());
    // the challenges are stored, nothing after: the evaluator (the LLM) is never asked
    let r = engine
        .run_resumable(&input, &mut RoundProgress::default(), &|stage, _| {
            stages.lock().unwrap().push(stage);
            let stored = stage != Stage::Challenged;
            Box::pin(async move {
                if stored {
                    Ok(())
                } else {
                    Err(StoreError::NoRound(cresolver_store::RoundKey::new(
                        Address::ZERO,
                        0u64,
                    )))
                }
            })
        })
        .await;
    assert!(
        matches!(
            r,
            Err(RoundError::NotPersisted {
                stage: Stage::Challenged,
                source: StoreError::NoRound(..)
            })
        ),
        "{r:?}"
    );
    assert_eq!(
        *stages.lock().unwrap(),
        vec![Stage::Answered, Stage::Challenged]
    );
    assert!(llm.requests.lock().unwrap().is_empty(), "the LLM was asked");
}
