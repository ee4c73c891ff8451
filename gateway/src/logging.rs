//! Log output: human-readable lines (colour only when stderr is a terminal) or one JSON object
//! per line (`log_format = "json"`, env `PFORTE_LOG_FORMAT`). The format is the subscriber's
//! concern: the events (e.g. the request line in `proxy.rs`) are the same in both.

use std::io::IsTerminal as _;

use serde::Deserialize;

/// The level filter when `RUST_LOG` is unset: pingora's own chatter is kept to warnings.
pub const DEFAULT_FILTER: &str = "info,pingora_core=warn,pingora_proxy=warn";

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
pub fn init_with(format: LogFormat, ansi: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| DEFAULT_FILTER.into());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.with_ansi(ansi).try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .try_init(),
    };
}

/// [`init_with`], colour only on a terminal.
pub fn init(format: LogFormat) {
    init_with(format, std::io::stderr().is_terminal());
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn formats_parse() {
        assert_eq!("json".parse::<LogFormat>().unwrap(), LogFormat::Json);
        assert_eq!("text".parse::<LogFormat>().unwrap(), LogFormat::Text);
        assert!("JSON!".parse::<LogFormat>().is_err());
    }
}
