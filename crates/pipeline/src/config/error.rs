//! Why a configuration cannot be loaded or used: each error names the key, where its
//! value came from and what a valid value looks like, and keeps its cause as its source.

use std::path::PathBuf;

/// A configuration that cannot be loaded or used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The configuration file does not exist.
    #[error("config file {path} not found")]
    NotFound {
        /// The file named.
        path: PathBuf,
    },
    /// The configuration file cannot be read.
    #[error("cannot read config file {path}: {error}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The operating system's refusal (in the message: not a source).
        error: std::io::Error,
    },
    /// The configuration file is not TOML.
    #[error("config file {path} is not valid TOML: {message}")]
    Toml {
        /// The file.
        path: PathBuf,
        /// The parser's message (line, column and the text around it).
        message: String,
    },
    /// A key's value is refused: `at` names the key and where it came from.
    #[error("config: {at} {message}")]
    Value {
        /// The key and where its value came from: "`chain.chain_id` (in node.toml)".
        at: String,
        /// What is wrong and what a valid value looks like.
        message: String,
    },
    /// A duration is given in both its forms (`poll_interval` and the older
    /// `poll_interval_ms`) in one layer.
    #[error(
        "config: {at} and {legacy_at} are the same setting: keep one (`{key}` takes a duration such as \"2s\" or \"150ms\"; `{legacy}` is its older form, a whole number)"
    )]
    BothForms {
        /// The duration key (`chain.poll_interval`).
        key: String,
        /// Its older key (`chain.poll_interval_ms`).
        legacy: String,
        /// The duration key and where it was set.
        at: String,
        /// The older key and where it was set.
        legacy_at: String,
    },
    /// An environment variable names no key.
    #[error(
        "config: the environment variable {var} names no key of node.toml (`{key}`){hint} (the keys there: {known})"
    )]
    UnknownEnv {
        /// The variable.
        var: String,
        /// The key it would set.
        key: String,
        /// ": did you mean `chain`?", or empty.
        hint: String,
        /// The keys of the table it reaches.
        known: String,
    },
    /// A key holds a value the node cannot use.
    #[error("config: `{key}` {message}")]
    Invalid {
        /// The dotted key (`chain.rpc_url`).
        key: String,
        /// What is wrong with its value.
        message: String,
    },
    /// A key file the configuration names (the Agora identity's) could not be read.
    #[error("cannot read key file {path}")]
    KeyFile {
        /// The file.
        path: PathBuf,
        /// The operating system's refusal.
        #[source]
        source: std::io::Error,
    },
}

/// The first of the errors `validator` found, as the dotted key and its message (keys in
/// order, so that the same config always gets the same message).
pub(super) fn first_invalid(errors: &validator::ValidationErrors) -> Option<(String, String)> {
    let mut all = Vec::new();
    flatten(errors, "", &mut all);
    all.sort();
    all.into_iter().next()
}

fn flatten(errors: &validator::ValidationErrors, prefix: &str, out: &mut Vec<(String, String)>) {
    use validator::ValidationErrorsKind as Kind;
    let join = |k: &str| {
        if prefix.is_empty() {
            k.to_string()
        } else {
            format!("{prefix}.{k}")
        }
    };
    for (field, kind) in errors.errors() {
        match kind {
            Kind::Field(list) => {
                for e in list {
                    // a struct-level check (`__all__`) names its key in its code
                    let key = if field == "__all__" {
                        join(&e.code)
                    } else {
                        join(field)
                    };
                    let message = e
                        .message
                        .as_deref()
                        .map_or_else(|| format!("is invalid ({})", e.code), str::to_string);
                    out.push((key, message));
                }
            }
            Kind::Struct(inner) => flatten(inner, &join(field), out),
            Kind::List(items) => {
                for (i, inner) in items {
                    flatten(inner, &format!("{}[{i}]", join(field)), out);
                }
            }
        }
    }
}
