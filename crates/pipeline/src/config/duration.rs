//! Durations in `node.toml`: text such as `"2s"`, `"150ms"` or `"1m 30s"` (read by
//! `humantime`), and the older keys that held whole milliseconds or seconds
//! (`poll_interval_ms = 2000`), which are still read so that no existing file breaks.
//!
//! A duration field is declared with [`Text`] as its schema and its older key's unit
//! beside it: `#[schemars(with = "duration::Text", extend("x-legacy-unit" = "ms"))]`.
//! The section's schema transform [`legacy_keys`] adds the older key (`poll_interval_ms`,
//! a whole number, marked `deprecated`) to the schema, so that the loader, the
//! environment variables, the generated reference and editors all know both forms, and
//! forbids giving both. The loader folds an older key into the duration before serde
//! reads the table ([`fold`]); giving both in one layer is an error, and a later layer
//! (the environment) giving either form replaces what an earlier one gave.

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde_json::{Map, Value};
use std::borrow::Cow;

pub use crate::schema::DURATION_KEYWORD;
/// On a duration key: the unit of its older key (`ms` or `secs`), whose name is the
/// key's with `_ms` or `_secs` after it.
pub const LEGACY_UNIT_KEYWORD: &str = "x-legacy-unit";
/// On an older key: the duration key it is the older form of.
pub const LEGACY_OF_KEYWORD: &str = "x-legacy-of";

/// What a duration's text looks like: numbers, each with its unit, optionally spaced.
pub const PATTERN: &str = r"^\s*([0-9]+\s*[a-zA-Zµ]+\s*)+$";

/// The schema of a duration given as text (`"2s"`, `"150ms"`, `"1m 30s"`).
pub struct Text;

impl JsonSchema for Text {
    fn schema_name() -> Cow<'static, str> {
        "Duration".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "pattern": PATTERN,
            DURATION_KEYWORD: true,
        })
    }
}

/// Parses a duration's text (`"2s"`, `"150ms"`, `"1m 30s"`).
pub fn parse(text: &str) -> Result<std::time::Duration, humantime::DurationError> {
    humantime::parse_duration(text.trim())
}

/// The older key of duration key `key` whose older unit is `unit`: `poll_interval_ms`.
pub fn legacy_name(key: &str, unit: &str) -> String {
    format!("{key}_{unit}")
}

/// The text of an older key's whole number as a duration: `2000` ms → `"2000ms"`.
fn as_text(n: u64, unit: &str) -> String {
    match unit {
        "secs" => format!("{n}s"),
        _ => format!("{n}{unit}"),
    }
}

/// A section's schema transform: each duration key that names an older unit gets its
/// older key beside it (a whole number in that unit, `deprecated`), and the two are
/// declared exclusive.
pub fn legacy_keys(schema: &mut Schema) {
    let Some(obj) = schema.as_object_mut() else {
        return;
    };
    let Some(Value::Object(props)) = obj.get_mut("properties") else {
        return;
    };
    let mut added = Vec::new();
    for (key, s) in props.iter() {
        let Some(unit) = s.get(LEGACY_UNIT_KEYWORD).and_then(Value::as_str) else {
            continue;
        };
        let word = if unit == "ms" {
            "milliseconds"
        } else {
            "seconds"
        };
        let old = legacy_name(key, unit);
        let legacy = serde_json::json!({
            "description": format!(
                "The older form of `{key}`: a whole number of {word}. Still read; give one of the two."
            ),
            "type": if s.get("type").is_some_and(|t| t.is_array()) {
                serde_json::json!(["integer", "null"])
            } else {
                Value::from("integer")
            },
            "format": "uint64",
            "minimum": 0,
            "deprecated": true,
            LEGACY_OF_KEYWORD: key,
        });
        added.push((key.clone(), old, legacy));
    }
    if added.is_empty() {
        return;
    }
    let mut pairs = Vec::new();
    for (key, old, legacy) in added {
        props.insert(old.clone(), legacy);
        pairs.push(serde_json::json!({ "required": [key, old] }));
    }
    obj.insert("not".into(), serde_json::json!({ "anyOf": pairs }));
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
