//! `cresolver tally`: the audit tool. Reads a round's inputs as JSON, runs the same tally
//! as the engine, and prints the resolution, weights, packed scores and report bytes.

use alloy::primitives::Address;
use cresolver_core::MarketId;
use cresolver_core::Position;
use cresolver_core::tally::Vote;
use cresolver_core::{Dimensions, Reputation, TallyError, TallyWorker, TieRule, tally};
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    #[serde(with = "cresolver_core::round_key::as_number")]
    market_id: MarketId,
    #[serde(default)]
    tie: Option<TieRule>,
    workers: Vec<InputWorker>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct InputWorker {
    address: Address,
    responded: bool,
    #[serde(default)]
    determination: Option<bool>,
    /// Responded without a position (scored and rewarded, no vote weight).
    #[serde(default)]
    abstain: bool,
    #[serde(default)]
    confidence: Option<f64>,
    #[serde(default)]
    scores: Option<Dimensions>,
    #[serde(default)]
    reputation: Option<Reputation>,
}

/// Why the input could not be tallied.
#[derive(Debug, thiserror::Error)]
pub enum TallyInputError {
    /// A field of the input is missing or malformed.
    #[error("invalid input at `{path}`: {message}")]
    Field {
        /// Where in the input, as a JSON path.
        path: String,
        /// What is wrong with it.
        message: String,
    },
    /// The input is well formed but the tally refuses it.
    #[error("cannot tally: {0}")]
    Tally(#[from] TallyError),
}

/// Runs the tally on JSON input text and returns the output JSON.
pub fn run(text: &str) -> Result<Value, TallyInputError> {
    let de = &mut serde_json::Deserializer::from_str(text);
    let input: Input = serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        TallyInputError::Field {
            path: if path == "." {
                "(document)".into()
            } else {
                path
            },
            message: e.inner().to_string(),
        }
    })?;
    let mut workers = Vec::with_capacity(input.workers.len());
    for (i, w) in input.workers.iter().enumerate() {
        let vote = if w.responded {
            let field = |name: &str| TallyInputError::Field {
                path: format!("workers[{i}].{name}"),
                message: "is required when `responded` is true".into(),
            };
            let determination = match (w.abstain, w.determination) {
                (true, d) => d.unwrap_or(false),
                (false, d) => d.ok_or_else(|| field("determination"))?,
            };
            let confidence = w.confidence.ok_or_else(|| field("confidence"))?;
            if !(confidence.is_finite() && (0.0..=1.0).contains(&confidence)) {
                return Err(TallyInputError::Field {
                    path: format!("workers[{i}].confidence"),
                    message: format!("{confidence} is outside [0, 1]"),
                });
            }
            let scores = w.scores.ok_or_else(|| field("scores"))?;
            if let Some((name, v)) = scores.out_of_range() {
                return Err(TallyInputError::Field {
                    path: format!("workers[{i}].scores.{name}"),
                    message: format!("{v} is outside [0, 100]"),
                });
            }
            Some(Vote {
                position: Position::from_answer(determination, w.abstain),
                confidence,
            })
        } else {
            None
        };
        let reputation = w.reputation.unwrap_or_default();
        for (name, v) in [
            ("resQuality", reputation.res_quality),
            ("srcQuality", reputation.src_quality),
            ("analysisDepth", reputation.analysis_depth),
        ] {
            if !(v.is_finite() && (0.0..=100.0).contains(&v)) {
                return Err(TallyInputError::Field {
                    path: format!("workers[{i}].reputation.{name}"),
                    message: format!("{v} is outside [0, 100]"),
                });
            }
        }
        workers.push(TallyWorker {
            address: w.address,
            vote,
            scores: w.scores.unwrap_or_default(),
            reputation,
        });
    }
    let outcome = tally(input.market_id, &workers, input.tie.unwrap_or_default())?;
    Ok(json!({
        "resolution": outcome.resolution,
        "workers": outcome.addresses().iter().map(|a| a.to_string()).collect::<Vec<_>>(),
        "weights": outcome.weights().iter().map(|w| w.to_string()).collect::<Vec<_>>(),
        "dimScores": outcome.dim_scores(),
        "report": outcome.report().to_string(),
    }))
}
