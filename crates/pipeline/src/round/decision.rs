//! The pure half of a round: which workers the evaluator sees and in what order, the
//! evaluator's input, the evaluation stage, and the decision (scores by slot, the tally
//! and the report bytes). Live rounds and replays share these functions.

use alloy::primitives::Bytes;
use cresolver_core::tally::Vote;
use cresolver_core::{
    Dimensions, MarketId, Reputation, TallyError, TallyOutcome, TallyWorker, tally,
};
use cresolver_evaluate::{EvalError, EvalInput, EvalWorker, Evaluation, Evaluator};
use cresolver_workers::ChallengeOutcome;
use cresolver_workers::fanout::ResolveStage;

/// The slots of the valid responders, in slot order.
pub fn responders(stage: &ResolveStage) -> Vec<usize> {
    (0..stage.results.len())
        .filter(|&i| stage.results[i].answer().is_some())
        .collect()
}

/// `slots` in a random order.
pub(super) fn random_order(mut slots: Vec<usize>) -> Vec<usize> {
    use rand::seq::SliceRandom;
    slots.shuffle(&mut rand::thread_rng());
    slots
}

/// The evaluator's input for a resolve stage and its defences: the responders in
/// `order` (slots; `None` or an order that is not a permutation of the responders: slot
/// order), labelled `W1…` in that order, each with its answer and its challenges and
/// responses. Returns the slot of each evaluated worker. The one place this input is
/// built (live rounds and replays alike).
pub fn evaluation_input(
    market_id: MarketId,
    question: &str,
    reference_time: u64,
    stage: &ResolveStage,
    challenges: &[Option<ChallengeOutcome>],
    order: Option<&[usize]>,
) -> (EvalInput, Vec<usize>) {
    let order = evaluation_slots(stage, order);
    let mut workers = Vec::with_capacity(order.len());
    for &i in &order {
        let r = &stage.results[i];
        let Some(answer) = r.answer() else { continue };
        let (ch, resp) = match challenges.get(i).and_then(Option::as_ref) {
            Some(c) => (c.challenges.clone(), c.responses.clone()),
            None => (vec![], vec![]),
        };
        workers.push(EvalWorker {
            label: format!("W{}", workers.len() + 1),
            address: r.address,
            answer: answer.clone(),
            challenges: ch,
            responses: resp,
        });
    }
    let input = EvalInput {
        market_id,
        question: question.to_string(),
        workers,
        reference_time,
    };
    (input, order)
}

/// The slots the evaluator sees, in order: `order` when it is a permutation of the
/// responders, else the responders in slot order.
pub fn evaluation_slots(stage: &ResolveStage, order: Option<&[usize]>) -> Vec<usize> {
    let valid = responders(stage);
    match order {
        Some(o)
            if {
                let mut sorted = o.to_vec();
                sorted.sort_unstable();
                sorted == valid
            } =>
        {
            o.to_vec()
        }
        _ => valid,
    }
}

/// The evaluation stage: the responders (in `order`, see [`evaluation_input`]) scored by
/// `evaluator`, the order recorded with the scores. Live rounds run it with the
/// workflow's evaluator, replays with the rubric or the recorded LLM reply.
pub async fn evaluate(
    evaluator: &dyn Evaluator,
    market_id: MarketId,
    question: &str,
    reference_time: u64,
    stage: &ResolveStage,
    challenges: &[Option<ChallengeOutcome>],
    order: Option<&[usize]>,
) -> Result<Evaluation, EvalError> {
    let (input, slot_of) = evaluation_input(
        market_id,
        question,
        reference_time,
        stage,
        challenges,
        order,
    );
    let mut e = evaluator.evaluate(&input).await?;
    e.order = slot_of;
    Ok(e)
}

/// What a round decides from its answers and their evaluation.
#[derive(Debug, Clone)]
pub struct Decision {
    /// Scores per slot (`None`: not evaluated).
    pub scores: Vec<Option<Dimensions>>,
    /// The weighted vote over every registered worker.
    pub tally: TallyOutcome,
    /// The encoded report of the tally.
    pub report: Bytes,
}

/// The pure half of a round: scores placed by slot, the tally over every registered
/// worker (non-responders with weight 0) and the report bytes. Used by live rounds and
/// replays alike.
pub fn decide(
    market_id: MarketId,
    stage: &ResolveStage,
    slot_of: &[usize],
    evaluation: &Evaluation,
    reputations: &[Reputation],
    tie: cresolver_core::TieRule,
) -> Result<Decision, TallyError> {
    let mut scores: Vec<Option<Dimensions>> = vec![None; stage.results.len()];
    for (k, &i) in slot_of.iter().enumerate() {
        if let Some(slot) = scores.get_mut(i) {
            *slot = evaluation.scores.get(k).copied();
        }
    }
    let workers: Vec<TallyWorker> = stage
        .results
        .iter()
        .zip(&scores)
        .zip(reputations)
        .map(|((r, s), rep)| TallyWorker {
            address: r.address,
            vote: r.answer().map(|a| Vote {
                position: a.position(),
                confidence: a.confidence,
            }),
            scores: s.unwrap_or_default(),
            reputation: *rep,
        })
        .collect();
    let tally = tally(market_id, &workers, tie)?;
    let report = tally.report();
    Ok(Decision {
        scores,
        tally,
        report,
    })
}
