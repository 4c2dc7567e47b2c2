//! The schema side of durations in the configuration files: text such as `"2s"`,
//! `"150ms"` or `"1m 30s"` (read by `humantime`), and the older keys that held whole
//! milliseconds or seconds (`poll_interval_ms = 2000`), which are still read so that no
//! existing file breaks. Here, below every crate with a config section, so that each
//! declares its durations the same way; the loader folds an older key into its duration
//! (`cresolver_pipeline::config::duration::fold`).
//!
//! A duration field is declared with [`Text`] as its schema and its older key's unit
//! beside it: `#[schemars(with = "duration::Text", extend("x-legacy-unit" = "ms"))]`,
//! with `#[serde(with = "humantime_serde")]`. The section's schema transform
//! [`legacy_keys`] adds the older key (`poll_interval_ms`, a whole number, marked
//! `deprecated`) to the schema, so that the loader, the environment variables, the
//! generated reference and editors all know both forms, and forbids giving both.

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde_json::Value;
use std::borrow::Cow;

/// The extension keyword that marks a key holding a duration as text (`"2s"`).
pub const DURATION_KEYWORD: &str = "x-duration";
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

/// The older key of duration key `key` whose older unit is `unit`: `poll_interval_ms`.
pub fn legacy_name(key: &str, unit: &str) -> String {
    format!("{key}_{unit}")
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
