//! The layers of a node configuration, and where each value came from: the TOML file,
//! then `CRESOLVER__SECTION__KEY` environment variables, then the command line's flags.
//!
//! Every layer is checked against the schema derived from the types before serde sees
//! it, so that an error names the key, where its value came from and what a valid value
//! looks like. An environment variable's text takes the type of its key (`"1"` is no
//! boolean, `"2.5"` no whole number). A relative path from the file is resolved from the
//! file's directory; one from the environment or a flag from the working directory.
//!
//! Why not the `config` crate (used before): its merged tree forgets which layer a value
//! came from, so an error could not name the file, the variable or the flag; it guesses
//! the type of an environment variable's text (`try_parsing`: `"1"` became a boolean),
//! and converts strings to booleans and numbers from the file too; and an unknown
//! `CRESOLVER__…` variable came out as serde's "unknown field" with no word of the
//! environment. The layers here are small (a TOML table, the variables, five flags), and
//! the schema derived from the types already knows every key's type.

use super::{ConfigError, Overrides, duration};
use crate::schema::{self, Mismatch, Problem, Seg};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Component, Path, PathBuf};

/// The prefix of the environment variables that set keys.
pub const ENV_PREFIX: &str = "CRESOLVER__";

/// Where a configuration value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// The type's default.
    Default,
    /// The configuration file.
    File(PathBuf),
    /// An environment variable (its name).
    Env(String),
    /// A command-line flag (`--market-address`).
    Flag(&'static str),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Default => f.write_str("default"),
            Origin::File(p) => write!(f, "in {}", p.display()),
            Origin::Env(v) => write!(f, "from {v}"),
            Origin::Flag(flag) => write!(f, "from {flag}"),
        }
    }
}

/// Where each key of a loaded configuration came from (a key without an entry holds
/// its default).
#[derive(Debug, Clone, Default)]
pub struct Provenance {
    /// Values (lists whole) by dotted key.
    values: BTreeMap<String, Origin>,
    /// Tables by dotted key: where each was first written.
    tables: BTreeMap<String, Origin>,
    /// Duration keys given by their older key: `chain.poll_interval` →
    /// `chain.poll_interval_ms` (messages name the key that was written).
    renamed: BTreeMap<String, String>,
}

impl Provenance {
    /// Where `key` (dotted; list indices ignored) came from: its own entry, else that of
    /// the list holding it; a table's where it was first written; else the default.
    pub fn origin(&self, key: &str) -> Origin {
        let key = strip_indices(key);
        let mut k = key.as_str();
        loop {
            if let Some(o) = self.values.get(k) {
                return o.clone();
            }
            match k.rfind('.') {
                Some(i) => k = &k[..i],
                None => break,
            }
        }
        self.tables.get(&key).cloned().unwrap_or(Origin::Default)
    }

    fn set(&mut self, key: String, origin: Origin) {
        // a value replaced whole replaces what its keys came from
        let inner = format!("{key}.");
        self.values.retain(|k, _| !k.starts_with(&inner));
        let mut k = key.as_str();
        while let Some(i) = k.rfind('.') {
            k = &k[..i];
            self.tables
                .entry(k.to_string())
                .or_insert_with(|| origin.clone());
        }
        self.values.insert(key, origin);
    }

    /// "`key` (in FILE)", "`key` (from VAR)", "`key` (from --flag)", "`key` (default)";
    /// a duration given by its older key is named by that key (`chain.poll_interval_ms`).
    pub fn describe(&self, key: &str) -> String {
        let shown = self.renamed.get(key).map_or(key, String::as_str);
        format!("`{shown}` ({})", self.origin(key))
    }
}

/// `don.members[2].address` → `don.members.address`.
fn strip_indices(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    let mut depth = 0;
    for c in key.chars() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

/// The process's `CRESOLVER__…` variables. (`vars_os`: a variable that is not UTF-8,
/// none of ours, must not panic the load.)
pub(super) fn process_env() -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(k, v)| {
            let k = k.into_string().ok()?;
            k.starts_with(ENV_PREFIX)
                .then(|| (k, v.to_string_lossy().into_owned()))
        })
        .collect()
}

/// The layers merged: the JSON the config deserializes from, and where each key came from.
pub(super) struct Layers {
    pub(super) value: Value,
    pub(super) provenance: Provenance,
}

/// Reads the file (when given), the environment and the flags into one JSON table.
pub(super) fn layers(
    file: Option<&Path>,
    env: impl IntoIterator<Item = (String, String)>,
    overrides: &Overrides,
) -> Result<Layers, ConfigError> {
    let root = super::NodeConfig::schema();
    let mut value = Value::Object(Map::new());
    let mut provenance = Provenance::default();
    if let Some(f) = file {
        value = read_file(f)?;
        resolve_paths(&mut value, root, root, f.parent().unwrap_or(Path::new("")));
        let origin = Origin::File(f.to_path_buf());
        record(&value, "", &origin, &mut provenance);
    }
    let mut vars: Vec<(String, String)> = env
        .into_iter()
        .filter(|(k, _)| k.starts_with(ENV_PREFIX))
        .collect();
    vars.sort();
    let mut from_env: Vec<String> = Vec::new();
    for (var, text) in vars {
        let (key, v) = env_value(&var, &text)?;
        let path: Vec<&str> = key.split('.').collect();
        // a duration's other form from an earlier layer gives way; from this one, both
        // forms are an error
        if let Some(other) = other_form(root, &path) {
            if from_env.contains(&other) {
                return Err(both_forms(&key, &other, &provenance, &Origin::Env(var)));
            }
            remove(&mut value, &other);
        }
        insert(&mut value, &path, v);
        provenance.set(key.clone(), Origin::Env(var));
        from_env.push(key);
    }
    flags(&mut value, &mut provenance, overrides);
    check(&value, &provenance)?;
    let folded = duration::fold(&mut value, root, root, "").map_err(|b| {
        let origin = provenance.origin(&b.key);
        both_forms(&b.key, &b.legacy, &provenance, &origin)
    })?;
    for f in folded {
        let origin = provenance.origin(&f.legacy);
        provenance.values.insert(f.key.clone(), origin);
        provenance.renamed.insert(f.key, f.legacy);
    }
    Ok(Layers { value, provenance })
}

/// The dotted key of the other form of the duration at `path` (`chain.poll_interval_ms`
/// for `chain.poll_interval`, and back), if it is one.
fn other_form(root: &Value, path: &[&str]) -> Option<String> {
    let (last, parents) = path.split_last()?;
    let table = schema::table(schema::at(root, parents)?, root)?;
    let other = duration::sibling(last, table)?;
    let mut key: Vec<&str> = parents.to_vec();
    key.push(&other);
    Some(key.join("."))
}

/// The error for a duration given in both forms: `key` is one of them (either), `other`
/// the other; `origin` is where the later one came from.
fn both_forms(key: &str, other: &str, p: &Provenance, origin: &Origin) -> ConfigError {
    let (new, old, new_origin, old_origin) = if key.len() < other.len() {
        (key, other, origin.clone(), p.origin(other))
    } else {
        (other, key, p.origin(other), origin.clone())
    };
    ConfigError::BothForms {
        key: new.to_string(),
        legacy: old.to_string(),
        at: format!("`{new}` ({new_origin})"),
        legacy_at: format!("`{old}` ({old_origin})"),
    }
}

/// Removes dotted `key` from `v`, if it is there.
fn remove(v: &mut Value, key: &str) {
    let path: Vec<&str> = key.split('.').collect();
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = v;
    for p in parents {
        match cur.get_mut(*p) {
            Some(next) => cur = next,
            None => return,
        }
    }
    if let Value::Object(map) = cur {
        map.remove(*last);
    }
}

fn read_file(f: &Path) -> Result<Value, ConfigError> {
    if !f.is_file() {
        return Err(ConfigError::NotFound {
            path: f.to_path_buf(),
        });
    }
    let text = std::fs::read_to_string(f).map_err(|error| ConfigError::Read {
        path: f.to_path_buf(),
        error,
    })?;
    schema::toml_to_json(&text).map_err(|message| ConfigError::Toml {
        path: f.to_path_buf(),
        message,
    })
}

/// Every key of `v` (tables and their keys; lists whole) came from `origin`.
fn record(v: &Value, prefix: &str, origin: &Origin, p: &mut Provenance) {
    let Value::Object(map) = v else { return };
    for (k, x) in map {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        if x.is_object() {
            p.tables.insert(key.clone(), origin.clone());
            record(x, &key, origin, p);
        } else {
            p.values.insert(key, origin.clone());
        }
    }
}

/// Rewrites the relative paths of `v` (the keys marked as paths) as seen from `base`.
fn resolve_paths(v: &mut Value, s: &Value, root: &Value, base: &Path) {
    let s = schema::resolve(s, root);
    if s.get(schema::PATH_KEYWORD).is_some() {
        match v {
            Value::String(p) => *p = from_base(base, p),
            Value::Array(items) => {
                for item in items {
                    if let Value::String(p) = item {
                        *p = from_base(base, p);
                    }
                }
            }
            _ => {}
        }
        return;
    }
    let Value::Object(map) = v else { return };
    let Some(props) = schema::table(s, root) else {
        return;
    };
    for (k, x) in map.iter_mut() {
        if let Some(ps) = props.get(k) {
            resolve_paths(x, ps, root, base);
        }
    }
}

/// `path` as seen from `base`: unchanged when absolute (or empty), else joined (without
/// `./` steps).
fn from_base(base: &Path, path: &str) -> String {
    let p = Path::new(path);
    if p.is_absolute() || path.is_empty() || path.starts_with('~') {
        return path.to_string();
    }
    let mut out = PathBuf::new();
    for c in base.components().chain(p.components()) {
        if c != Component::CurDir {
            out.push(c);
        }
    }
    if out.as_os_str().is_empty() {
        out.push(".");
    }
    out.to_string_lossy().into_owned()
}

/// The key an environment variable sets, and its value typed as that key's.
fn env_value(var: &str, text: &str) -> Result<(String, Value), ConfigError> {
    let root = super::NodeConfig::schema();
    let words: Vec<String> = var[ENV_PREFIX.len()..]
        .split("__")
        .map(str::to_ascii_lowercase)
        .collect();
    let key = words.join(".");
    let path: Vec<&str> = words.iter().map(String::as_str).collect();
    let unknown = |word: &str, known: Vec<String>| ConfigError::UnknownEnv {
        var: var.to_string(),
        key: key.clone(),
        hint: schema::closest(word, &known)
            .map(|c| format!(": did you mean `{c}`?"))
            .unwrap_or_default(),
        known: known.join(", "),
    };
    // the deepest table the variable reaches, to list its keys when the next is wrong
    let mut s = root;
    for (i, w) in path.iter().enumerate() {
        let Some(props) = schema::table(s, root) else {
            return Err(unknown(w, vec![]));
        };
        match props.get(*w) {
            Some(next) => s = next,
            None if i == 0 && w.is_empty() => return Err(unknown(w, vec![])),
            None => return Err(unknown(w, props.keys().cloned().collect())),
        }
    }
    let v = schema::from_text(text, s, root).map_err(|expected| ConfigError::Value {
        at: format!("`{key}` (from {var})"),
        message: format!("must be {expected}, not {}", schema::show(&text.into())),
    })?;
    Ok((key, v))
}

/// Sets `path` of `v` to `x`, making the tables on the way.
fn insert(v: &mut Value, path: &[&str], x: Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = v;
    for p in parents {
        if !cur.is_object() {
            *cur = Value::Object(Map::new());
        }
        let Value::Object(map) = cur else { return };
        cur = map
            .entry((*p).to_string())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    if !cur.is_object() {
        *cur = Value::Object(Map::new());
    }
    if let Value::Object(map) = cur {
        map.insert((*last).to_string(), x);
    }
}

/// The flags, last: they replace what the file and the environment say.
fn flags(v: &mut Value, p: &mut Provenance, o: &Overrides) {
    let mut set = |key: &str, x: Value, flag: &'static str| {
        let path: Vec<&str> = key.split('.').collect();
        insert(v, &path, x);
        p.set(key.to_string(), Origin::Flag(flag));
    };
    if let Some(u) = &o.rpc_url {
        // the command line names the one endpoint to use
        set("chain.rpc_url", Value::String(u.clone()), "--rpc-url");
        set("chain.rpc_urls", Value::Array(vec![]), "--rpc-url");
    }
    if let Some(m) = o.market_address {
        set(
            "chain.market_address",
            Value::String(m.to_string()),
            "--market-address",
        );
    }
    if let Some(d) = &o.data_dir {
        set(
            "node.data_dir",
            Value::String(d.to_string_lossy().into_owned()),
            "--data-dir",
        );
    }
    if !o.workflows.is_empty() {
        let list = o
            .workflows
            .iter()
            .map(|w| Value::String(w.to_string_lossy().into_owned()))
            .collect();
        set("node.workflows", Value::Array(list), "--workflow");
    }
    if let Some(a) = &o.account {
        set("signer.account", Value::String(a.clone()), "--account");
        set("signer.keystore", Value::Null, "--account");
    }
}

/// The merged layers against the schema: the first refused key, where it came from.
fn check(v: &Value, p: &Provenance) -> Result<(), ConfigError> {
    let root = super::NodeConfig::schema();
    schema::check(v, root, root).map_err(|m| mismatch_error(&m, p))
}

/// A schema mismatch as the loader reports it: the key, where it came from, the problem.
fn mismatch_error(m: &Mismatch, p: &Provenance) -> ConfigError {
    let key = schema::dotted(&m.path);
    match &m.problem {
        Problem::Missing => {
            let table = schema::dotted(&m.path[..m.path.len() - 1]);
            let name = match m.path.last() {
                Some(Seg::Key(k)) => k.clone(),
                _ => key.clone(),
            };
            ConfigError::Value {
                at: format!("[{table}] ({})", p.origin(&table)),
                message: format!("lacks `{name}`, which is required"),
            }
        }
        _ => ConfigError::Value {
            at: p.describe(&key),
            message: m.message(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_resolve_from_the_file() {
        assert_eq!(
            from_base(Path::new("/etc/cresolver"), "./data"),
            "/etc/cresolver/data"
        );
        assert_eq!(
            from_base(Path::new("examples"), "../workflows/a.toml"),
            "examples/../workflows/a.toml"
        );
        assert_eq!(from_base(Path::new(""), "./data"), "data");
        assert_eq!(from_base(Path::new("/etc"), "/var/lib/x"), "/var/lib/x");
    }

    #[test]
    fn provenance_falls_back_to_the_table() {
        let mut p = Provenance::default();
        p.set("don.members".into(), Origin::File("/n.toml".into()));
        assert_eq!(
            p.describe("don.members[1].url"),
            "`don.members[1].url` (in /n.toml)"
        );
        assert_eq!(p.describe("don"), "`don` (in /n.toml)");
        assert_eq!(p.describe("don.f"), "`don.f` (default)");
    }
}
