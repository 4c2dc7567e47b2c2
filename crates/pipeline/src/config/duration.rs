//! Durations in `node.toml`: text such as `"2s"`, `"150ms"` or `"1m 30s"` (read by
//! `humantime`), and the older keys that held whole milliseconds or seconds
//! (`poll_interval_ms = 2000`), which are still read so that no existing file breaks.
//!
//! A duration field is declared with [`Text`] as its schema and its older key's unit
//! beside it: `#[schemars(with = "duration::Text", extend("x-legacy-unit" = "ms"))]`.
//! The section's schema transform [`legacy_keys`] adds the older key (`poll_interval_ms`,
//! a whole number, marked `deprecated`) to the schema, so that the loader, the
//! environment variables, the generated reference and editors all know both forms, and
//! forbids giving both. Those are `cresolver_core::schema::duration`'s (re-exported
//! here), so that the sections of crates below this one (`[don]`) declare their
//! durations the same way. The loader folds an older key into the duration before serde
//! reads the table ([`fold`]); giving both in one layer is an error, and a later layer
//! (the environment) giving either form replaces what an earlier one gave.

use serde_json::{Map, Value};

pub use cresolver_core::schema::duration::{
    DURATION_KEYWORD, LEGACY_OF_KEYWORD, LEGACY_UNIT_KEYWORD, PATTERN, Text, legacy_keys,
    legacy_name,
};

/// Parses a duration's text (`"2s"`, `"150ms"`, `"1m 30s"`).
pub fn parse(text: &str) -> Result<std::time::Duration, humantime::DurationError> {
    humantime::parse_duration(text.trim())
}

/// The text of an older key's whole number as a duration: `2000` ms → `"2000ms"`.
fn as_text(n: u64, unit: &str) -> String {
    match unit {
        "secs" => format!("{n}s"),
        _ => format!("{n}{unit}"),
    }
}

/// The other form of `key` in its table (schema `table`): the older key of a duration
/// key, or the duration key of an older one.
pub fn sibling(key: &str, table: &Map<String, Value>) -> Option<String> {
    let s = table.get(key)?;
    if let Some(of) = s.get(LEGACY_OF_KEYWORD).and_then(Value::as_str) {
        return Some(of.to_string());
    }
    let unit = s.get(LEGACY_UNIT_KEYWORD).and_then(Value::as_str)?;
    Some(legacy_name(key, unit))
}

/// An older key and the duration key it was folded into, both dotted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Folded {
    /// The duration key (`chain.poll_interval`).
    pub key: String,
    /// The older key that gave its value (`chain.poll_interval_ms`).
    pub legacy: String,
}

/// Both forms of one duration are given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BothGiven {
    /// The duration key (`chain.poll_interval`).
    pub key: String,
    /// Its older key (`chain.poll_interval_ms`).
    pub legacy: String,
}

/// Rewrites every older key of `v` (a table of schema `s`, under `root`) as its duration
/// key (`poll_interval_ms = 2000` → `poll_interval = "2000ms"`): the keys folded, or the
/// first duration given in both forms.
pub fn fold(
    v: &mut Value,
    s: &Value,
    root: &Value,
    prefix: &str,
) -> Result<Vec<Folded>, BothGiven> {
    let mut out = Vec::new();
    fold_into(v, s, root, prefix, &mut out)?;
    Ok(out)
}

fn fold_into(
    v: &mut Value,
    s: &Value,
    root: &Value,
    prefix: &str,
    out: &mut Vec<Folded>,
) -> Result<(), BothGiven> {
    let Value::Object(map) = v else {
        return Ok(());
    };
    let Some(props) = crate::schema::table(s, root) else {
        return Ok(());
    };
    let dotted = |k: &str| {
        if prefix.is_empty() {
            k.to_string()
        } else {
            format!("{prefix}.{k}")
        }
    };
    for (key, ps) in props {
        let Some(unit) = ps.get(LEGACY_UNIT_KEYWORD).and_then(Value::as_str) else {
            continue;
        };
        let old = legacy_name(key, unit);
        let Some(n) = map.get(&old) else { continue };
        if map.contains_key(key) {
            return Err(BothGiven {
                key: dotted(key),
                legacy: dotted(&old),
            });
        }
        let text = match n.as_u64() {
            Some(n) => Value::String(as_text(n, unit)),
            // `null` (an empty variable for an optional key): the duration is unset
            None => Value::Null,
        };
        map.remove(&old);
        map.insert(key.clone(), text);
        out.push(Folded {
            key: dotted(key),
            legacy: dotted(&old),
        });
    }
    for (k, x) in map.iter_mut() {
        if let Some(ps) = props.get(k) {
            fold_into(x, ps, root, &dotted(k), out)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn text_parses_as_humantime() {
        assert_eq!(parse("2s").unwrap(), Duration::from_secs(2));
        assert_eq!(parse("150ms").unwrap(), Duration::from_millis(150));
        assert_eq!(parse(" 1m 30s ").unwrap(), Duration::from_secs(90));
        assert!(parse("2").is_err(), "a unit is required");
        assert!(parse("2 parsecs").is_err());
        assert!(parse("").is_err());
        assert!(parse("-1s").is_err());
    }

    #[test]
    fn older_whole_numbers_become_text_in_their_unit() {
        assert_eq!(as_text(2000, "ms"), "2000ms");
        assert_eq!(as_text(15, "secs"), "15s");
        assert_eq!(
            parse(&as_text(15, "secs")).unwrap(),
            Duration::from_secs(15)
        );
    }
}
