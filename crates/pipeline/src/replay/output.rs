//! A replay's output: the per-market summary and the table printed at the end.

use super::*;

// ─── Output ─────────────────────────────────────────────────────────────────────────

/// The whole run, for `--json`.
#[derive(Debug, Clone, Serialize)]
pub struct ReplaySummary {
    /// Every replayed market, in order.
    pub markets: Vec<MarketReplay>,
    /// Whether every market agrees.
    pub all_agree: bool,
}

impl ReplaySummary {
    /// The summary of `markets`.
    pub fn new(markets: Vec<MarketReplay>) -> Self {
        Self {
            all_agree: markets.iter().all(|m| m.agree),
            markets,
        }
    }
}

pub(super) fn short_diffs(d: &[Difference], weights: bool) -> String {
    let parts: Vec<String> = d
        .iter()
        .filter(|x| (x.what == "weight") == weights && x.slot.is_some())
        .map(|x| {
            let slot = x.slot.unwrap_or(0);
            if weights {
                format!("#{slot} {}→{}", x.baseline, x.replayed)
            } else {
                let dim = match x.what.as_str() {
                    "resQuality" => "res",
                    "srcQuality" => "src",
                    _ => "depth",
                };
                format!("#{slot} {dim} {}→{}", x.baseline, x.replayed)
            }
        })
        .collect();
    if parts.is_empty() {
        "=".into()
    } else {
        parts.join(", ")
    }
}

/// The table: market, on-chain outcome, replayed outcome, agree?, weight and score
/// differences (against the submitted report, else the transcript), report bytes;
/// then one line of detail per market that needs it.
pub fn render_table(s: &ReplaySummary) -> String {
    let header = [
        "MARKET", "ON CHAIN", "REPLAYED", "AGREE", "WEIGHTS", "SCORES", "REPORT",
    ];
    let rows: Vec<[String; 7]> = s.markets.iter().map(table_row).collect();
    let mut out = aligned(header, &rows);
    for m in &s.markets {
        let _ = writeln!(out, "\nmarket {} ({}):", m.market_id, m.market);
        for d in details(m) {
            let _ = writeln!(out, "  - {d}");
        }
    }
    let agree = s.markets.iter().filter(|m| m.agree).count();
    let _ = writeln!(
        out,
        "\n{agree} of {} market(s) agree with the chain",
        s.markets.len()
    );
    out
}

/// A market's row of the table.
fn table_row(m: &MarketReplay) -> [String; 7] {
    let diffs = m
        .differences_vs_chain
        .as_ref()
        .or(m.differences_vs_transcript.as_ref());
    let (w, sc) = match diffs {
        Some(d) if d.iter().any(|x| x.what == "workers") => {
            ("worker set".to_string(), "-".to_string())
        }
        Some(d) if m.replayed.tally.is_some() => (short_diffs(d, true), short_diffs(d, false)),
        _ => ("-".into(), "-".into()),
    };
    let report = match (m.report_identical, m.source.as_str()) {
        (Some(true), _) => "identical".to_string(),
        (Some(false), _) => "differs".to_string(),
        (None, "none") => "no transcript".to_string(),
        _ => "-".to_string(),
    };
    [
        m.market_id.to_string(),
        m.on_chain.label(),
        m.replayed.label(),
        if m.agree { "yes" } else { "NO" }.to_string(),
        w,
        sc,
        report,
    ]
}

/// The header and the rows as lines of left-aligned columns, each as wide as its
/// widest cell (the last column unpadded).
fn aligned(header: [&str; 7], rows: &[[String; 7]]) -> String {
    let mut widths = header.map(str::len);
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    let line = |cells: Vec<&str>, out: &mut String| {
        let mut l = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                l.push_str(c);
            } else {
                let _ = write!(l, "{c:<w$}  ", w = widths[i]);
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(header.to_vec(), &mut out);
    for r in rows {
        line(r.iter().map(String::as_str).collect(), &mut out);
    }
    out
}

/// A market's detail lines: the verdict, changed workflow parameters, differences that
/// are not per worker, why the replayed round fails, the replay's and the chain's
/// notes, and what the chain check found.
fn details(m: &MarketReplay) -> Vec<String> {
    let mut details = vec![m.verdict.clone()];
    for c in &m.workflow_changes {
        details.push(format!(
            "workflow parameter `{}` changed: {} → {}{}",
            c.parameter,
            c.recorded,
            c.replayed,
            if c.reflected_offline || m.source == "live" {
                ""
            } else {
                " (not reflected by a transcript replay)"
            }
        ));
    }
    if let Some(d) = &m.differences_vs_transcript
        && m.differences_vs_chain.is_some()
        && !d.is_empty()
    {
        details.push(format!(
            "{} difference(s) with the transcript's recorded tally",
            d.len()
        ));
    }
    if let Some(d) = m
        .differences_vs_chain
        .as_ref()
        .or(m.differences_vs_transcript.as_ref())
    {
        for x in d.iter().filter(|x| x.slot.is_none()) {
            details.push(format!("{}: {} → {}", x.what, x.baseline, x.replayed));
        }
    }
    if let ReplayStatus::Failed { reason } = &m.replayed.status {
        details.push(format!("replayed round fails: {reason}"));
    }
    details.extend(m.replayed.notes.iter().cloned());
    if let Some(n) = &m.on_chain.note {
        details.push(n.clone());
    }
    if let Some(c) = &m.chain_check {
        details.extend(
            c.differences
                .iter()
                .map(|d| format!("chain at block {}: {d}", c.block)),
        );
    }
    details
}
