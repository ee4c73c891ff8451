//! The child's stderr in the gateway's log: a line at a time, escaped, cut at [`LOG_LINE_MAX`].

use tokio::io::BufReader;

use super::LOG_LINE_MAX;
use crate::stdio::lines::{self, Line};

/// Someone else's output for a log line: at most [`LOG_LINE_MAX`] bytes of it, escaped.
pub(super) fn loggable(text: &[u8]) -> String {
    let cut = &text[..text.len().min(LOG_LINE_MAX)];
    let shown = String::from_utf8_lossy(cut);
    let mut out = crate::logging::untrusted(&shown).to_string();
    if cut.len() < text.len() {
        out.push_str(&format!(" … ({} bytes)", text.len()));
    }
    out
}

/// Logs the child's stderr a line at a time: each line escaped, cut at [`LOG_LINE_MAX`] (the
/// rest of a longer line skipped, never held).
pub(super) async fn log_stderr(
    route: String,
    pid: Option<u32>,
    stderr: tokio::process::ChildStderr,
) {
    let mut stderr = BufReader::new(stderr);
    let mut text = Vec::new();
    loop {
        match lines::read_line(&mut stderr, &mut text, LOG_LINE_MAX).await {
            Ok(Line::Whole) => {
                tracing::info!(route = %route, pid, "stdio server: {}", loggable(&text));
            }
            Ok(Line::TooLong) => {
                tracing::info!(route = %route, pid, "stdio server: {} … (cut)", loggable(&text));
                if lines::skip_rest(&mut stderr, |_| {}).await.is_err() {
                    break;
                }
            }
            Ok(Line::End) | Err(_) => break,
        }
    }
}
