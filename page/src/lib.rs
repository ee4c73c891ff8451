//! The one home of Pforte's HTML pages (issue 41): the page skeleton, the one stylesheet, the
//! one Content-Security-Policy (its style hash computed from that stylesheet, never pasted) and
//! the headers every page is served with, escaping, and the small pieces every page shares (forms with their CSRF field, buttons,
//! notices, tables). The authorization server's pages (sign-in, consent, account, errors) and
//! the gateway's (console, connect, refusals) all render through it; no other source file
//! writes a `<!doctype html>` or a `<style>` (the test `no_page_is_built_elsewhere` holds it).
//! Pure functions from text to text.

mod csp;
mod escape;
mod headers;
mod pieces;
mod skeleton;
mod style;
mod table;

pub use csp::{content_security_policy, style_hash};
pub use escape::escape;
pub use headers::headers;
pub use pieces::{Button, actions, alerts, button, csrf_field, error, hidden, notice};
pub use skeleton::{Page, card_page, console_page, document};
pub use style::STYLESHEET;
pub use table::table;

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    /// Every `.rs` file under `dir`.
    fn rust_files(dir: &Path) -> Vec<PathBuf> {
        let mut found = Vec::new();
        let mut todo = vec![dir.to_path_buf()];
        while let Some(dir) = todo.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for path in entries.flatten().map(|e| e.path()) {
                if path.is_dir() {
                    todo.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    found.push(path);
                }
            }
        }
        found
    }

    /// A tidy check: the crates that serve pages write no skeleton, stylesheet or CSP of their
    /// own; a page built outside this crate fails here.
    #[test]
    fn no_page_is_built_elsewhere() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let mut seen = 0;
        let mut bad = Vec::new();
        for krate in ["gateway", "oauth", "mcp-service", "outbound"] {
            for file in rust_files(&root.join(krate).join("src")) {
                seen += 1;
                let text = std::fs::read_to_string(&file)
                    .unwrap_or_default()
                    .to_ascii_lowercase();
                for marker in ["<!doctype", "<style", "default-src", "style-src"] {
                    if text.contains(marker) {
                        bad.push(format!("{}: {marker}", file.display()));
                    }
                }
            }
        }
        assert!(
            seen > 100,
            "the source tree was not found under {}",
            root.display()
        );
        assert!(bad.is_empty(), "render pages through pforte-page: {bad:#?}");
    }
}
