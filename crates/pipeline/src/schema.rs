//! JSON Schemas derived from the types (`schemars`; `NodeConfig::schema()` is that of
//! `node.toml`, `Workflow::schema()` that of a workflow file), and the one reading of them that the loaders, the environment variables
//! and the generated reference share: which keys exist, what type each holds, and how a
//! valid value is described to an operator ("an address: 0x and 40 hex digits", "one of:
//! bft, majority, all, or a whole number of at least 1").
//!
//! A key whose value is a path carries the extension keyword `"x-path": true`: the node
//! resolves such a path from a file relative to that file's directory. A key whose value
//! is a duration as text (`"2s"`, `"150ms"`) carries `"x-duration": true`: its text must
//! parse as one (`humantime`).

use cresolver_core::schema::{ADDRESS_PATTERN, B256_PATTERN};
use serde_json::{Map, Value};

/// The extension keyword that marks a key holding a path.
pub const PATH_KEYWORD: &str = "x-path";

pub use cresolver_core::schema::duration::DURATION_KEYWORD;

/// The JSON Schema (draft 2020-12) of `T`, as JSON.
pub fn generate<T: schemars::JsonSchema>() -> Value {
    let schema = schemars::generate::SchemaSettings::draft2020_12()
        .into_generator()
        .into_root_schema_for::<T>();
    serde_json::to_value(schema).unwrap_or(Value::Null)
}

/// A TOML file's text as JSON, for the schema: its tables and values (`Err`: the
/// parser's message, with the line and column).
pub fn toml_to_json(text: &str) -> Result<Value, String> {
    let table: toml::Table = toml::from_str(text).map_err(|e| e.to_string().trim().to_string())?;
    serde_json::to_value(table).map_err(|e| e.to_string())
}

/// One step of a key's path: a table's key or a list's index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seg {
    /// A key of a table.
    Key(String),
    /// An entry of a list (0-based).
    Index(usize),
}

/// A path as dotted text: `don.members[2].address`.
pub fn dotted(path: &[Seg]) -> String {
    let mut out = String::new();
    for s in path {
        match s {
            Seg::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// What is wrong at a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// The table has no such key; `known` lists the keys it has.
    Unknown {
        /// The table's keys.
        known: Vec<String>,
    },
    /// A required key is absent.
    Missing,
    /// The value does not fit: `expected` describes a valid one, `found` the value given.
    Wrong {
        /// A valid value, described ("a boolean: true or false").
        expected: String,
        /// The value given, shown.
        found: String,
    },
}

/// The first key of a value that its schema refuses, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// Where: the key's path.
    pub path: Vec<Seg>,
    /// What is wrong there.
    pub problem: Problem,
}

impl Mismatch {
    /// The problem in words, after the key: "must be …, not …", "is required", "is not a
    /// key of [chain] (its keys: …)".
    pub fn message(&self) -> String {
        match &self.problem {
            Problem::Missing => "is required".into(),
            Problem::Wrong { expected, found } => format!("must be {expected}, not {found}"),
            Problem::Unknown { known } => {
                let table = dotted(&self.path[..self.path.len().saturating_sub(1)]);
                let table = if table.is_empty() {
                    "the top level".to_string()
                } else {
                    format!("[{table}]")
                };
                let hint = match self.path.last() {
                    Some(Seg::Key(k)) => closest(k, known)
                        .map(|c| format!(": did you mean `{c}`?"))
                        .unwrap_or_default(),
                    _ => String::new(),
                };
                format!(
                    "is not a key of {table}{hint} (its keys: {})",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                )
            }
        }
    }
}

/// The key of `known` closest to a misspelt `word` (at most two edits away, or one
/// that contains it or is contained in it).
pub fn closest<'a>(word: &str, known: &'a [String]) -> Option<&'a str> {
    let distance = |a: &str, b: &str| -> usize {
        let b: Vec<char> = b.chars().collect();
        let mut row: Vec<usize> = (0..=b.len()).collect();
        for (i, ca) in a.chars().enumerate() {
            let mut prev = row[0];
            row[0] = i + 1;
            for (j, cb) in b.iter().enumerate() {
                let here = row[j + 1];
                row[j + 1] = (prev + usize::from(ca != *cb))
                    .min(row[j] + 1)
                    .min(here + 1);
                prev = here;
            }
        }
        row[b.len()]
    };
    known
        .iter()
        .map(|k| (distance(word, k), k))
        .filter(|(d, k)| {
            *d <= 2 || (word.len() > 3 && (k.contains(word) || word.contains(k.as_str())))
        })
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k.as_str())
}

/// `schema` with its `$ref` followed (into `root`'s `$defs`).
pub fn resolve<'a>(schema: &'a Value, root: &'a Value) -> &'a Value {
    let mut s = schema;
    for _ in 0..16 {
        let Some(r) = s.get("$ref").and_then(Value::as_str) else {
            return s;
        };
        let Some(target) = r
            .strip_prefix("#/$defs/")
            .and_then(|name| root.get("$defs").and_then(|d| d.get(name)))
        else {
            return s;
        };
        s = target;
    }
    s
}

/// The branches of a `oneOf`/`anyOf` schema (none for another one).
fn branches(s: &Value) -> &[Value] {
    s.get("oneOf")
        .or_else(|| s.get("anyOf"))
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// The JSON types a schema allows (`type`, a word or a list).
fn types(s: &Value) -> Vec<&str> {
    match s.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    }
}

/// Whether a schema is only `null` (the absent half of an `Option`).
fn is_null(s: &Value) -> bool {
    types(s) == ["null"]
}

/// The table schema of `s`, if it describes a table of keys (an `Option` of one included).
pub fn table<'a>(s: &'a Value, root: &'a Value) -> Option<&'a Map<String, Value>> {
    let s = resolve(s, root);
    if let Some(p) = s.get("properties").and_then(Value::as_object) {
        return Some(p);
    }
    let bs: Vec<&Value> = branches(s).iter().filter(|b| !is_null(b)).collect();
    match bs.as_slice() {
        [one] => table(one, root),
        _ => None,
    }
}

/// The schema of `key` (dotted, without list indices) under `root`, if it is a key.
pub fn at<'a>(root: &'a Value, key: &[&str]) -> Option<&'a Value> {
    let mut s = root;
    for k in key {
        s = table(s, root)?.get(*k)?;
    }
    Some(s)
}

/// A JSON value shown to an operator: strings quoted, tables and lists named.
pub fn show(v: &Value) -> String {
    match v {
        Value::Object(_) => "a table".into(),
        Value::Array(_) => "a list".into(),
        Value::Null => "nothing".into(),
        // a private key in the wrong place is not echoed into a log
        Value::String(s) if is_hex(s, 64) || (s.len() == 64 && is_hex(&format!("0x{s}"), 64)) => {
            "a 32-byte hex value (not shown: it may be a private key)".into()
        }
        Value::String(s) => {
            let cut: String = s.chars().take(80).collect();
            format!(
                "{:?}",
                if cut.len() < s.len() {
                    cut + "…"
                } else {
                    cut
                }
            )
        }
        other => other.to_string(),
    }
}

/// A valid value of `s`, described: "an address: 0x and 40 hex digits", "a boolean: true
/// or false", "one of: rubric, llm", "a whole number from 0 to 255", "a list of strings".
pub fn expected(s: &Value, root: &Value) -> String {
    let s = resolve(s, root);
    if let Some(c) = s.get("const") {
        return show(c);
    }
    if let Some(words) = s.get("enum").and_then(Value::as_array) {
        let words: Vec<String> = words.iter().map(word).collect();
        return format!("one of: {}", words.join(", "));
    }
    let bs: Vec<&Value> = branches(s).iter().filter(|b| !is_null(b)).collect();
    if !bs.is_empty() {
        return one_of(&bs, root);
    }
    match s.get("pattern").and_then(Value::as_str) {
        Some(ADDRESS_PATTERN) => return "an address: 0x and 40 hex digits".into(),
        Some(B256_PATTERN) => return "32 bytes in hex: 0x and 64 hex digits".into(),
        _ => {}
    }
    let ty = types(s).into_iter().find(|t| *t != "null").unwrap_or("");
    match ty {
        "boolean" => "a boolean: true or false".into(),
        "integer" => whole_number(s),
        "number" => "a number".into(),
        "string" if s.get(PATH_KEYWORD).is_some() => "a path (text)".into(),
        "string" if s.get(DURATION_KEYWORD).is_some() => {
            "a duration: text such as \"2s\", \"150ms\" or \"1m 30s\"".into()
        }
        "string" if s.get("format").and_then(Value::as_str) == Some("uri") => "a URL (text)".into(),
        "string" => "text (a quoted string)".into(),
        "array" => {
            let item = s
                .get("items")
                .map(|i| expected(i, root))
                .unwrap_or_else(|| "values".into());
            format!("a list of {}", plural(&item))
        }
        "object" => "a table".into(),
        _ => "a value".into(),
    }
}

/// An enum word, shown bare (`bft`), or a non-text value as JSON.
fn word(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), String::from)
}

/// "one of: bft, majority, all, or a whole number of at least 1".
fn one_of(bs: &[&Value], root: &Value) -> String {
    let mut words = Vec::new();
    let mut others = Vec::new();
    for b in bs {
        let b = resolve(b, root);
        if let Some(c) = b.get("const") {
            words.push(word(c));
        } else if let Some(e) = b.get("enum").and_then(Value::as_array) {
            words.extend(e.iter().map(word));
        } else {
            others.push(expected(b, root));
        }
    }
    match (words.is_empty(), others.is_empty()) {
        (false, true) => format!("one of: {}", words.join(", ")),
        (false, false) => format!("one of: {}, or {}", words.join(", "), others.join(" or ")),
        _ => others.join(" or "),
    }
}

/// "a whole number", with its range when it has one.
fn whole_number(s: &Value) -> String {
    let min = s.get("minimum").and_then(Value::as_i64);
    let max = s.get("maximum").and_then(Value::as_u64);
    match (min, max) {
        (Some(lo), Some(hi)) => format!("a whole number from {lo} to {hi}"),
        (Some(0), None) => "a whole number (0 or more)".into(),
        (Some(lo), None) => format!("a whole number of at least {lo}"),
        (None, Some(hi)) => format!("a whole number of at most {hi}"),
        (None, None) => "a whole number".into(),
    }
}

/// "an address: …" → "addresses: …" (roughly: the list's items).
fn plural(item: &str) -> String {
    if let Some(rest) = item.strip_prefix("text (a quoted string)") {
        return format!("strings{rest}");
    }
    if let Some(rest) = item.strip_prefix("a path (text)") {
        return format!("paths{rest}");
    }
    if let Some(rest) = item.strip_prefix("a table") {
        return format!("tables{rest}");
    }
    format!("({item})")
}

/// Whether `v` is one of the JSON types `t` names.
fn has_type(v: &Value, t: &str) -> bool {
    match t {
        "null" => v.is_null(),
        "boolean" => v.is_boolean(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        "string" => v.is_string(),
        "array" => v.is_array(),
        "object" => v.is_object(),
        _ => true,
    }
}

/// Whether text is `0x` and `n` hex digits.
fn is_hex(s: &str, n: usize) -> bool {
    s.strip_prefix("0x")
        .is_some_and(|h| h.len() == n && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Checks `v` against `s` (under `root`): the first key it refuses, or `Ok`.
pub fn check(v: &Value, s: &Value, root: &Value) -> Result<(), Mismatch> {
    check_at(v, s, root, &mut Vec::new())
}

fn wrong(v: &Value, s: &Value, root: &Value, path: &[Seg]) -> Mismatch {
    Mismatch {
        path: path.to_vec(),
        problem: Problem::Wrong {
            expected: expected(s, root),
            found: show(v),
        },
    }
}

fn check_at(v: &Value, s: &Value, root: &Value, path: &mut Vec<Seg>) -> Result<(), Mismatch> {
    let s = resolve(s, root);
    let bs = branches(s);
    if !bs.is_empty() {
        if bs
            .iter()
            .any(|b| check_at(v, b, root, &mut path.clone()).is_ok())
        {
            return Ok(());
        }
        // a table given for an `Option` of one: say which of its keys is wrong
        let tables: Vec<&Value> = bs.iter().filter(|b| table(b, root).is_some()).collect();
        if let ([one], true) = (tables.as_slice(), v.is_object()) {
            return check_at(v, one, root, path);
        }
        return Err(wrong(v, s, root, path));
    }
    let ts = types(s);
    if !ts.is_empty() && !ts.iter().any(|t| has_type(v, t)) {
        return Err(wrong(v, s, root, path));
    }
    if let Some(c) = s.get("const")
        && c != v
    {
        return Err(wrong(v, s, root, path));
    }
    if let Some(e) = s.get("enum").and_then(Value::as_array)
        && !e.contains(v)
    {
        return Err(wrong(v, s, root, path));
    }
    if let Some(text) = v.as_str() {
        let ok = match s.get("pattern").and_then(Value::as_str) {
            Some(ADDRESS_PATTERN) => is_hex(text, 40),
            Some(B256_PATTERN) => is_hex(text, 64),
            _ => true,
        };
        let ok = ok
            && (s.get(DURATION_KEYWORD).is_none()
                || humantime::parse_duration(text.trim()).is_ok());
        if !ok {
            return Err(wrong(v, s, root, path));
        }
    }
    if v.is_number() {
        let n = v.as_f64().unwrap_or(0.0);
        let lo = s.get("minimum").and_then(Value::as_f64);
        let hi = s.get("maximum").and_then(Value::as_f64);
        if lo.is_some_and(|lo| n < lo) || hi.is_some_and(|hi| n > hi) {
            return Err(wrong(v, s, root, path));
        }
    }
    match v {
        Value::Object(map) => check_table(map, s, root, path),
        Value::Array(items) => {
            if let Some(item) = s.get("items") {
                for (i, x) in items.iter().enumerate() {
                    path.push(Seg::Index(i));
                    check_at(x, item, root, path)?;
                    path.pop();
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

fn check_table(
    map: &Map<String, Value>,
    s: &Value,
    root: &Value,
    path: &mut Vec<Seg>,
) -> Result<(), Mismatch> {
    let props = s.get("properties").and_then(Value::as_object);
    let closed = s.get("additionalProperties") == Some(&Value::Bool(false));
    for (k, x) in map {
        path.push(Seg::Key(k.clone()));
        match props.and_then(|p| p.get(k)) {
            Some(ps) => check_at(x, ps, root, path)?,
            None if closed => {
                return Err(Mismatch {
                    path: path.clone(),
                    problem: Problem::Unknown {
                        known: props
                            .map(|p| p.keys().cloned().collect())
                            .unwrap_or_default(),
                    },
                });
            }
            None => {}
        }
        path.pop();
    }
    for r in s
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if !map.contains_key(r) {
            path.push(Seg::Key(r.to_string()));
            return Err(Mismatch {
                path: path.clone(),
                problem: Problem::Missing,
            });
        }
    }
    Ok(())
}

/// A value of `s` from the text of an environment variable: its type is the key's, so
/// `"1"` is no boolean and `"2.5"` no whole number; a list is comma-separated. `Err` holds
/// a description of a valid value.
pub fn from_text(text: &str, s: &Value, root: &Value) -> Result<Value, String> {
    let s = resolve(s, root);
    let bs: Vec<&Value> = branches(s).iter().filter(|b| !is_null(b)).collect();
    let nullable = branches(s).iter().any(is_null) || types(s).contains(&"null");
    if nullable && text.is_empty() {
        return Ok(Value::Null);
    }
    if !bs.is_empty() {
        return bs
            .iter()
            .filter_map(|b| from_text(text, b, root).ok())
            .find(|v| check(v, s, root).is_ok())
            .ok_or_else(|| expected(s, root));
    }
    let ty = types(s)
        .into_iter()
        .find(|t| *t != "null")
        .unwrap_or("string");
    let v = match ty {
        "boolean" => match text.trim() {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            _ => return Err(expected(s, root)),
        },
        "integer" => {
            let t = text.trim();
            if let Ok(n) = t.parse::<u64>() {
                Value::from(n)
            } else if let Ok(n) = t.parse::<i64>() {
                Value::from(n)
            } else {
                return Err(expected(s, root));
            }
        }
        "number" => match text.trim().parse::<f64>() {
            Ok(n) if n.is_finite() => Value::from(n),
            _ => return Err(expected(s, root)),
        },
        "array" => {
            let item = s.get("items").cloned().unwrap_or(Value::Bool(true));
            if table(&item, root).is_some() {
                return Err(format!(
                    "{} (set it in the file: a list of tables cannot come from the environment)",
                    expected(s, root)
                ));
            }
            let mut out = Vec::new();
            for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                out.push(from_text(part, &item, root).map_err(|_| expected(s, root))?);
            }
            Value::Array(out)
        }
        "object" => {
            return Err(format!(
                "{} (set its keys one by one, each in its own variable)",
                expected(s, root)
            ));
        }
        _ => Value::String(text.to_string()),
    };
    check(&v, s, root).map_err(|_| expected(s, root))?;
    Ok(v)
}

/// One key of a schema, as the reference lists it.
#[derive(Debug, Clone)]
pub struct Key {
    /// The dotted key (`chain.rpc_url`; a list of tables' keys as `don.members[].url`).
    pub key: String,
    /// Its schema (its `$ref` followed).
    pub schema: Value,
    /// Whether its table requires it.
    pub required: bool,
    /// Whether its table is optional itself (an `Option` of a table, such as `[don]`).
    pub in_optional_table: bool,
}

/// Every key that holds a value (not a table of keys), in schema order, with nested
/// tables' keys under them and a list of tables' keys as `key[].inner`.
pub fn keys(root: &Value) -> Vec<Key> {
    let mut out = Vec::new();
    collect(root, root, "", false, &mut out);
    out
}

fn collect(s: &Value, root: &Value, prefix: &str, optional: bool, out: &mut Vec<Key>) {
    let s = resolve(s, root);
    let tbl = match s.get("properties") {
        Some(_) => s,
        None => match branches(s).iter().find(|b| table(b, root).is_some()) {
            Some(b) => resolve(b, root),
            None => return,
        },
    };
    let required: Vec<&str> = tbl
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let Some(props) = tbl.get("properties").and_then(Value::as_object) else {
        return;
    };
    for (k, ps) in props {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        let resolved = resolve(ps, root);
        if table(ps, root).is_some() {
            let opt = optional || branches(resolved).iter().any(is_null);
            collect(ps, root, &key, opt, out);
            continue;
        }
        // a field's own description and default sit next to its `$ref`
        let mut schema = resolved.clone();
        if let (Some(obj), Some(field)) = (schema.as_object_mut(), ps.as_object()) {
            for (fk, fv) in field {
                if fk != "$ref" {
                    obj.insert(fk.clone(), fv.clone());
                }
            }
        }
        out.push(Key {
            key: key.clone(),
            schema,
            required: required.contains(&k.as_str()),
            in_optional_table: optional,
        });
        if let Some(item) = resolved.get("items")
            && table(item, root).is_some()
        {
            collect(item, root, &format!("{key}[]"), optional, out);
        }
    }
}
