//! What the fuzz properties feed a parser: arbitrary bytes, an arbitrary JSON document
//! (its keys mostly the field names the parsers read), or one of the target's valid seeds
//! mutated, as bytes (a byte set, an interesting token inserted, a run deleted or
//! repeated, the tail cut, the whole nested in up to 200 brackets, a JSON document
//! spliced in) or as JSON (a node replaced by an arbitrary document, a field removed).
//! Every choice is a proptest strategy, so a failing input shrinks to a small one.

use proptest::prelude::*;
use proptest::sample::{Index, select};
use serde_json::Value;

/// One input, shown as hex and as lossy UTF-8 in a failure report (paste the hex into a
/// unit test with `alloy::hex::decode` to keep the case).
#[derive(Clone)]
pub struct Input(pub Vec<u8>);

impl std::fmt::Debug for Input {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} bytes, hex {} (text {:?})",
            self.0.len(),
            alloy::hex::encode(&self.0),
            String::from_utf8_lossy(&self.0)
        )
    }
}

/// Field names the parsers read, so that arbitrary objects reach past the first check.
const KEYS: &[&str] = &[
    "determination",
    "confidence",
    "evidence",
    "sources",
    "responses",
    "position",
    "reactCycle",
    "actions",
    "observations",
    "workers",
    "workerId",
    "type",
    "status",
    "job_id",
    "output_data",
    "execution_cost",
    "choices",
    "message",
    "content",
    "services",
    "endpoints",
    "endpoint",
    "name",
    "events",
    "ok",
    "sig",
    "sender",
    "id",
    "ts",
    "meta",
];

/// Byte strings that matter to JSON, base64 and URI parsers.
const INTERESTING: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b"\"",
    b":",
    b",",
    b"\\",
    b"\\u0000",
    b"\\ud800",
    b"null",
    b"true",
    b"-0",
    b"1e999",
    b"-1",
    b"18446744073709551616",
    b"NaN",
    b"%",
    b"%ff",
    b";base64,",
    b"=",
    b"\xff",
    b"\xc3",
    b"\xe2\x80\xae",
    b"\n",
    b" ",
    b"0.5",
    b"\"W1\"",
    b"[[[[[[[[",
    b"{\"a\":",
];

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        select(vec![
            "",
            "W1",
            "W2",
            "W3",
            "YES",
            "NO",
            "SUCCESS",
            "FAILURE",
            "PENDING",
            "job-1",
            "A2A",
            "1.0",
            "REQUEST",
            "RESULT",
            "https://a.example/x",
            "data:,x",
            "2026-05-01T00:00:00Z",
            "```json\n{}\n```",
        ])
        .prop_map(String::from),
    ]
}

/// Any JSON document, at most 6 levels deep.
pub fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        (-1.0f64..101.0).prop_map(Value::from),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(6, 64, 6, |inner| {
        let key = prop_oneof![3 => select(KEYS).prop_map(String::from), 1 => any::<String>()];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((key, inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// One byte-level mutation; positions are drawn as [`Index`]es into the current bytes.
#[derive(Debug, Clone)]
enum ByteEdit {
    Set(Index, u8),
    Insert(Index, &'static [u8]),
    Delete(Index, usize),
    Truncate(Index),
    Repeat(Index, usize, usize),
    Nest(usize),
    Splice(Index, Value),
}

fn byte_edit() -> impl Strategy<Value = ByteEdit> {
    prop_oneof![
        (any::<Index>(), any::<u8>()).prop_map(|(i, b)| ByteEdit::Set(i, b)),
        (any::<Index>(), select(INTERESTING)).prop_map(|(i, s)| ByteEdit::Insert(i, s)),
        (any::<Index>(), 0usize..16).prop_map(|(i, n)| ByteEdit::Delete(i, n)),
        any::<Index>().prop_map(ByteEdit::Truncate),
        (any::<Index>(), 0usize..64, 0usize..20).prop_map(|(i, n, k)| ByteEdit::Repeat(i, n, k)),
        (0usize..200).prop_map(ByteEdit::Nest),
        (any::<Index>(), json_value()).prop_map(|(i, v)| ByteEdit::Splice(i, v)),
    ]
}

fn apply_bytes(seed: &[u8], edits: &[ByteEdit]) -> Vec<u8> {
    let mut b = seed.to_vec();
    for edit in edits {
        let at = |i: &Index, b: &[u8]| i.index(b.len() + 1);
        match edit {
            ByteEdit::Set(i, x) if !b.is_empty() => {
                let k = i.index(b.len());
                b[k] = *x;
            }
            ByteEdit::Set(..) => {}
            ByteEdit::Insert(i, s) => {
                let k = at(i, &b);
                b.splice(k..k, s.iter().copied());
            }
            ByteEdit::Delete(i, n) => {
                let k = at(i, &b);
                b.drain(k..(k + n).min(b.len()));
            }
            ByteEdit::Truncate(i) => b.truncate(at(i, &b)),
            ByteEdit::Repeat(i, n, times) => {
                // repetition: long runs, deep nesting
                let k = at(i, &b);
                let piece = b[k..(k + n).min(b.len())].to_vec();
                for _ in 0..*times {
                    b.splice(k..k, piece.iter().copied());
                }
            }
            ByteEdit::Nest(depth) => {
                let mut nested = vec![b'['; *depth];
                nested.append(&mut b);
                nested.extend(std::iter::repeat_n(b']', *depth));
                b = nested;
            }
            ByteEdit::Splice(i, v) => {
                let k = at(i, &b);
                b.splice(k..k, v.to_string().into_bytes());
            }
        }
    }
    b
}

/// One JSON-level edit: the node at a position (in pre-order) replaced, or removed.
#[derive(Debug, Clone)]
enum JsonEdit {
    Replace(Index, Value),
    Remove(Index),
}

fn pointers(v: &Value, at: String, out: &mut Vec<String>) {
    out.push(at.clone());
    match v {
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                pointers(item, format!("{at}/{i}"), out);
            }
        }
        Value::Object(m) => {
            for (k, item) in m {
                let k = k.replace('~', "~0").replace('/', "~1");
                pointers(item, format!("{at}/{k}"), out);
            }
        }
        _ => {}
    }
}

fn apply_json(mut v: Value, edits: &[JsonEdit]) -> Value {
    for edit in edits {
        let mut all = Vec::new();
        pointers(&v, String::new(), &mut all);
        match edit {
            JsonEdit::Replace(i, new) => {
                if let Some(node) = v.pointer_mut(&all[i.index(all.len())]) {
                    *node = new.clone();
                }
            }
            JsonEdit::Remove(i) => {
                let Some((parent, last)) = all[i.index(all.len())].rsplit_once('/') else {
                    continue;
                };
                match v.pointer_mut(parent) {
                    Some(Value::Object(m)) => {
                        m.remove(&last.replace("~1", "/").replace("~0", "~"));
                    }
                    Some(Value::Array(items)) => {
                        if let Ok(k) = last.parse::<usize>() {
                            items.remove(k);
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    v
}

/// The inputs for a target with these seeds (at least one): a quarter arbitrary bytes,
/// a quarter arbitrary JSON, a quarter seeds mutated as bytes, a quarter seeds edited as
/// JSON (a seed that is not JSON is mutated as bytes there too).
pub fn inputs(seeds: Vec<Vec<u8>>) -> impl Strategy<Value = Input> {
    assert!(!seeds.is_empty(), "a target needs a seed");
    let json_edit = prop_oneof![
        3 => (any::<Index>(), json_value()).prop_map(|(i, v)| JsonEdit::Replace(i, v)),
        1 => any::<Index>().prop_map(JsonEdit::Remove),
    ];
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..256),
        json_value().prop_map(|v| v.to_string().into_bytes()),
        (
            select(seeds.clone()),
            prop::collection::vec(byte_edit(), 1..=8)
        )
            .prop_map(|(s, e)| apply_bytes(&s, &e)),
        (
            select(seeds),
            prop::collection::vec(json_edit, 1..=4),
            prop::collection::vec(byte_edit(), 1..=2),
        )
            .prop_map(|(s, je, be)| match serde_json::from_slice::<Value>(&s) {
                Ok(v) => apply_json(v, &je).to_string().into_bytes(),
                Err(_) => apply_bytes(&s, &be),
            }),
    ]
    .prop_map(Input)
}
