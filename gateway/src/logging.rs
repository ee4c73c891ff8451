//! Log output: human-readable lines (colour only when stderr is a terminal) or one JSON object
//! per line (`log_format = "json"`, env `PFORTE_LOG_FORMAT`). The format is the subscriber's
//! concern: the events (e.g. the request line in `proxy.rs`) are the same in both.
//!
//! Lines are collected in memory and written to stderr in batches ([`BatchedStderr`]): a request
//! line costs a copy, not a `write(2)` and a lock on stderr on the request path. Warnings and
//! errors are written at once; [`flush`] writes what is pending (at exit).

use std::{
    io::IsTerminal as _,
    sync::{Mutex, OnceLock},
    time::Duration,
};

use serde::Deserialize;

mod line;

pub(crate) use line::RequestLine;

/// The level filter when `RUST_LOG` is unset: pingora's own chatter is kept to warnings.
pub(crate) const DEFAULT_FILTER: &str = "info,pingora_core=warn,pingora_proxy=warn";

/// How log lines are written (to stderr).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// `2026-12-01T19:03:00Z  INFO request request_id=… status=200 …`
    #[default]
    Text,
    /// `{"timestamp":"…","level":"INFO","message":"request","request_id":"…",…}`
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            other => Err(format!("{other:?}: expected \"text\" or \"json\"")),
        }
    }
}

/// Installs the global subscriber (once; later calls do nothing). Colour codes are written
/// only when `ansi` is true; [`init`] passes whether stderr is a terminal.
pub(crate) fn init_with(format: LogFormat, ansi: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| DEFAULT_FILTER.into());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(BatchedStderr::global());
    let installed = match format {
        LogFormat::Text => builder.with_ansi(ansi).try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .try_init(),
    };
    if installed.is_ok() && !(ansi && format == LogFormat::Text) {
        let _ = DIRECT.set(format);
    }
}

/// The layout request lines are written in without the subscriber ([`write_request`]); unset
/// before [`init_with`] and for colour text on a terminal.
static DIRECT: OnceLock<LogFormat> = OnceLock::new();

/// Writes one request line straight into the batch, in the subscriber's layout; `false` when
/// the caller must emit it as a tracing event instead (no subscriber of ours, or colour). The
/// caller has checked that the level is enabled for its target.
pub(crate) fn write_request(now_ms: u64, warn: bool, target: &str, line: &RequestLine<'_>) -> bool {
    let Some(format) = DIRECT.get() else {
        return false;
    };
    let bytes = line::render(*format, now_ms, warn, target, line);
    let log = BatchedStderr::global();
    if log.push(&bytes) || warn {
        log.write_pending(&mut std::io::stderr());
    }
    true
}

/// [`init_with`], colour only on a terminal.
pub fn init(format: LogFormat) {
    init_with(format, std::io::stderr().is_terminal());
}

/// Pending bytes past which a write flushes at once, whatever the interval.
const BATCH_BYTES: usize = 64 * 1024;
/// The longest a line waits in memory.
const BATCH_INTERVAL: Duration = Duration::from_millis(50);

/// Log lines for stderr, batched: appended to a buffer, written by a background thread every
/// [`BATCH_INTERVAL`], at once when over [`BATCH_BYTES`], for warnings and errors, and on
/// [`flush`].
#[derive(Debug)]
pub(crate) struct BatchedStderr {
    pending: Mutex<Vec<u8>>,
    /// No flushing thread: every line is written as it comes.
    through: std::sync::atomic::AtomicBool,
}

static GLOBAL: OnceLock<&'static BatchedStderr> = OnceLock::new();

impl BatchedStderr {
    /// The process's one instance; the first call starts its flushing thread.
    pub(crate) fn global() -> &'static Self {
        GLOBAL.get_or_init(|| {
            let this: &'static Self = Box::leak(Box::new(Self::new()));
            let started = std::thread::Builder::new()
                .name("pforte-log".into())
                .spawn(move || {
                    loop {
                        std::thread::sleep(BATCH_INTERVAL);
                        this.write_pending(&mut std::io::stderr());
                    }
                });
            if started.is_err() {
                // No thread: every line is written as it comes.
                this.unbatched();
            }
            this
        })
    }

    fn new() -> Self {
        Self {
            pending: Mutex::new(Vec::with_capacity(BATCH_BYTES)),
            through: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn unbatched(&self) {
        self.through
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<u8>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends `line`; returns whether the pending bytes should be written now.
    fn push(&self, line: &[u8]) -> bool {
        let mut pending = self.lock();
        pending.extend_from_slice(line);
        self.through.load(std::sync::atomic::Ordering::Relaxed) || pending.len() >= BATCH_BYTES
    }

    /// Writes what is pending to `out` (outside the buffer's lock).
    fn write_pending(&self, out: &mut impl std::io::Write) {
        let batch = {
            let mut pending = self.lock();
            if pending.is_empty() {
                return;
            }
            std::mem::replace(&mut *pending, Vec::with_capacity(BATCH_BYTES))
        };
        let _ = out.write_all(&batch);
        let _ = out.flush();
    }
}

/// Writes the pending log lines to stderr now.
pub(crate) fn flush() {
    if let Some(log) = GLOBAL.get() {
        log.write_pending(&mut std::io::stderr());
    }
}

/// One event's writer: the formatter writes its line, then it is queued (or written at once).
pub(crate) struct EventWriter {
    log: &'static BatchedStderr,
    urgent: bool,
}

impl std::io::Write for EventWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.log.push(buf) || self.urgent {
            self.log.write_pending(&mut std::io::stderr());
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for &'static BatchedStderr {
    type Writer = EventWriter;

    fn make_writer(&'a self) -> EventWriter {
        EventWriter {
            log: self,
            urgent: false,
        }
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> EventWriter {
        EventWriter {
            log: self,
            urgent: *meta.level() <= tracing::Level::WARN,
        }
    }
}

/// Someone else's text (a stdio server's output, a name from a request) made safe for one log
/// line: control characters (C0, DEL, C1 — newlines, carriage returns, NUL, terminal escapes),
/// Unicode line separators and bidirectional overrides/isolates are written as escapes
/// (`\n`, `\r`, `\t`, `\0`, `\u{1b}`, `\u{202e}`), and a backslash as `\\`, so the text stays
/// on its line, cannot move the cursor or reorder what a terminal shows, and reads back
/// unambiguously.
pub(crate) fn untrusted(text: &str) -> Untrusted<'_> {
    Untrusted(text)
}

/// [`untrusted`]'s result: escapes as it is displayed, allocating nothing.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Untrusted<'a>(&'a str);

impl<'a> Untrusted<'a> {
    /// The escaped text: the original, borrowed, when nothing in it needs an escape.
    pub(crate) fn to_cow(self) -> std::borrow::Cow<'a, str> {
        if self.0.chars().any(needs_escape) {
            std::borrow::Cow::Owned(self.to_string())
        } else {
            std::borrow::Cow::Borrowed(self.0)
        }
    }
}

/// Whether `c` is written escaped by [`untrusted`].
fn needs_escape(c: char) -> bool {
    c.is_control()
        || c == '\\'
        || matches!(
            c,
            '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

impl std::fmt::Display for Untrusted<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut rest = self.0;
        while let Some((at, c)) = rest.char_indices().find(|(_, c)| needs_escape(*c)) {
            f.write_str(&rest[..at])?;
            match c {
                '\n' => f.write_str("\\n")?,
                '\r' => f.write_str("\\r")?,
                '\t' => f.write_str("\\t")?,
                '\0' => f.write_str("\\0")?,
                '\\' => f.write_str("\\\\")?,
                other => write!(f, "\\u{{{:x}}}", u32::from(other))?,
            }
            rest = &rest[at + c.len_utf8()..];
        }
        f.write_str(rest)
    }
}

/// The longest name or method (in bytes) copied into an audit line or a refusal body.
pub(crate) const MAX_NAME_BYTES: usize = 256;

/// `s` cut to at most `max` bytes on a character boundary, with `…(+N bytes)` naming what was
/// cut; `s` itself when it fits.
pub(crate) fn clip(s: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if s.len() <= max {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    std::borrow::Cow::Owned(format!("{}…(+{} bytes)", &s[..end], s.len() - end))
}

/// Someone else's name for a log or audit line: [`clip`]ped to [`MAX_NAME_BYTES`], then
/// [`untrusted`].
pub(crate) fn untrusted_name(s: &str) -> String {
    untrusted(&clip(s, MAX_NAME_BYTES)).to_string()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn lines_wait_until_written_in_one_batch() {
        let log = BatchedStderr::new();
        assert!(!log.push(b"one\n"));
        assert!(!log.push(b"two\n"));
        let mut out = Vec::new();
        log.write_pending(&mut out);
        assert_eq!(out, b"one\ntwo\n");
        let mut again = Vec::new();
        log.write_pending(&mut again);
        assert!(again.is_empty(), "written once");
    }

    #[test]
    fn a_full_batch_or_an_unbatched_log_writes_at_once() {
        let log = BatchedStderr::new();
        assert!(log.push(&vec![b'x'; BATCH_BYTES]));
        let through = BatchedStderr::new();
        through.unbatched();
        assert!(through.push(b"line\n"));
    }

    #[test]
    fn formats_parse() {
        assert_eq!("json".parse::<LogFormat>().unwrap(), LogFormat::Json);
        assert_eq!("text".parse::<LogFormat>().unwrap(), LogFormat::Text);
        assert!("JSON!".parse::<LogFormat>().is_err());
    }

    #[test]
    fn untrusted_text_is_escaped_for_one_log_line() {
        let show = |s: &str| untrusted(s).to_string();
        assert_eq!(show("plain text, ünïcode ✓"), "plain text, ünïcode ✓");
        assert_eq!(show("a\nb\r\tc\0"), "a\\nb\\r\\tc\\0");
        assert_eq!(show("\u{1b}[31mred\u{1b}[0m"), "\\u{1b}[31mred\\u{1b}[0m");
        assert_eq!(show("\u{7f}\u{85}\u{9b}"), "\\u{7f}\\u{85}\\u{9b}");
        assert_eq!(show("abc\u{202e}fed\u{2066}"), "abc\\u{202e}fed\\u{2066}");
        assert_eq!(show("x\u{2028}y"), "x\\u{2028}y");
        // A backslash is escaped too, so a written "\n" cannot pass for an escaped newline.
        assert_eq!(show("C:\\dir\\n"), "C:\\\\dir\\\\n");
        assert_eq!(show(""), "");
        // Neighbours of the escaped ranges stay.
        assert_eq!(
            show(" \u{a0}\u{202f}\u{2065}\u{206a}"),
            " \u{a0}\u{202f}\u{2065}\u{206a}"
        );
    }

    #[test]
    fn clip_cuts_on_a_char_boundary_and_says_how_much() {
        assert_eq!(clip("whoami", 256), "whoami");
        assert!(matches!(clip("whoami", 6), std::borrow::Cow::Borrowed(_)));
        assert_eq!(clip("whoami", 3), "who…(+3 bytes)");
        // "ü" is two bytes: a cut inside it moves back to its start.
        assert_eq!(clip("aüb", 2), "a…(+3 bytes)");
        let huge = "x".repeat(4 << 20);
        let clipped = untrusted_name(&huge);
        assert!(clipped.len() < MAX_NAME_BYTES + 32, "{}", clipped.len());
        assert!(clipped.ends_with(&format!("…(+{} bytes)", (4 << 20) - MAX_NAME_BYTES)));
        // Escaping follows the cut: the output stays bounded whatever the input.
        let controls = "\u{1b}".repeat(1 << 20);
        assert!(untrusted_name(&controls).len() <= MAX_NAME_BYTES * 6 + 32);
    }
}
