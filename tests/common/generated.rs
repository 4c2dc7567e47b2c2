//! Generated documentation files kept current by the tests: a generated text is compared
//! with the committed file, or written when `CRESOLVER_UPDATE_DOCS` is set; and a message
//! made safe for a Markdown table cell.
#![allow(dead_code)] // each test file that includes it uses part of it

use std::path::Path;

/// Compares `generated` with the committed file `rel` (relative to the repository), or
/// writes it when `CRESOLVER_UPDATE_DOCS` is set; `test` names the test that rewrites it.
pub fn check(rel: &str, generated: &str, test: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    if std::env::var_os("CRESOLVER_UPDATE_DOCS").is_some() {
        std::fs::write(&path, generated).unwrap();
        return;
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == generated,
        "{rel} is not current: run `CRESOLVER_UPDATE_DOCS=1 cargo test --test suite -- {test}::` and commit it"
    );
}

/// `text` for a Markdown table cell: `<` outside code spans as `&lt;` (it would open an
/// HTML tag in the rendered book) and `|` escaped.
pub fn table_cell(text: &str) -> String {
    let escaped: Vec<String> = text
        .split('`')
        .enumerate()
        .map(|(i, part)| {
            if i % 2 == 0 {
                part.replace('<', "&lt;")
            } else {
                part.to_string()
            }
        })
        .collect();
    escaped.join("`").replace('|', "\\|")
}
