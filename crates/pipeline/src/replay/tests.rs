//! Tests of replay: transcripts replayed under changed workflows, comparisons and the summary table.

use super::*;
use cresolver_core::MarketId;

fn view(weights: &[u64], scores: &[u8], resolution: bool) -> ReportView {
    ReportView {
        market_id: MarketId::from(1),
        workers: (1..=weights.len() as u8)
            .map(Address::repeat_byte)
            .collect(),
        weights: weights.iter().map(|w| U256::from(*w)).collect(),
        dim_scores: scores.to_vec(),
        resolution,
    }
}

#[test]
fn differences_name_worker_and_field() {
    let a = view(&[100, 50], &[1, 2, 3, 4, 5, 6], true);
    let b = view(&[100, 60], &[1, 2, 3, 4, 9, 6], false);
    let d = differences(Some(&a), Some(&b));
    let what: Vec<(&str, Option<usize>)> = d.iter().map(|x| (x.what.as_str(), x.slot)).collect();
    assert_eq!(
        what,
        vec![
            ("resolution", None),
            ("weight", Some(2)),
            ("srcQuality", Some(2))
        ]
    );
    assert!(differences(Some(&a), Some(&a)).is_empty());
    assert_eq!(differences(Some(&a), None)[0].what, "outcome");
}

#[test]
fn workflow_changes_name_the_parameter() {
    let a = Workflow::default_named("x");
    let mut b = a.clone();
    b.tally.tie = cresolver_core::TieRule::No;
    b.resolve.timeout_ms = 5;
    let c = workflow_changes(&a, &b);
    assert_eq!(c.len(), 2);
    assert_eq!(c[0].parameter, "resolve.timeout_ms");
    assert!(!c[0].reflected_offline);
    assert_eq!(c[1].parameter, "tally.tie");
    assert_eq!(c[1].recorded, serde_json::json!("yes"));
    assert!(c[1].reflected_offline);
}

#[test]
fn calldata_decoding() {
    let call = ICREsolverMarket::resolveMarketCall {
        marketId: U256::from(3),
        workers: vec![Address::repeat_byte(1)],
        weights: vec![U256::from(7)],
        dimScores: vec![1, 2, 3],
        resolution: true,
    };
    let v = ReportView::from_calldata(&call.abi_encode()).unwrap();
    assert_eq!(v.weights, vec![U256::from(7)]);
    assert!(ReportView::from_calldata(&[1, 2, 3, 4]).is_none());
}
