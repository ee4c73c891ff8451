//! `[telemetry]`: where OpenTelemetry traces go (OTLP over HTTP, JSON), off by default —
//! as written, and checked into [`Telemetry`]. Pure.

use serde::Deserialize;

use super::{ConfigError, invalid};

/// `[telemetry]` as written.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct TelemetryConfig {
    /// The OTLP/HTTP collector (`http://HOST:4318` or `https://…`); spans go to
    /// `<endpoint>/v1/traces` (a URL already ending in `/v1/traces` is used as it is). Absent:
    /// no traces, and no span is built.
    pub(crate) otlp_endpoint: Option<String>,
    /// `service.name` of the spans (default `pforte`).
    pub(crate) service_name: Option<String>,
    /// How often finished spans are sent, in milliseconds.
    pub(crate) export_interval_ms: u64,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            otlp_endpoint: None,
            service_name: None,
            export_interval_ms: 5_000,
        }
    }
}

/// Traces are on: where they go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Telemetry {
    /// The full URL spans are posted to (`…/v1/traces`).
    pub(crate) traces_url: String,
    pub(crate) service_name: String,
    pub(crate) export_interval_ms: u64,
}

impl TelemetryConfig {
    /// `None` when traces are off; an error names the field.
    pub(crate) fn validate(&self) -> Result<Option<Telemetry>, ConfigError> {
        let Some(endpoint) = self.otlp_endpoint.as_deref().filter(|e| !e.is_empty()) else {
            return Ok(None);
        };
        let uri: http::Uri = endpoint.parse().map_err(|_| {
            invalid(
                "telemetry.otlp_endpoint",
                format!("{endpoint:?} is not a URL (http://HOST:4318)"),
            )
        })?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
            return Err(invalid(
                "telemetry.otlp_endpoint",
                format!(
                    "{endpoint:?}: expected http://HOST:PORT or https://HOST:PORT (OTLP over HTTP)"
                ),
            ));
        }
        if uri.query().is_some() {
            return Err(invalid("telemetry.otlp_endpoint", "no query string"));
        }
        let base = endpoint.trim_end_matches('/');
        let traces_url = if base.ends_with("/v1/traces") {
            base.to_owned()
        } else {
            format!("{base}/v1/traces")
        };
        let service_name = self
            .service_name
            .clone()
            .unwrap_or_else(|| "pforte".to_owned());
        if service_name.trim().is_empty() || service_name.chars().any(char::is_control) {
            return Err(invalid(
                "telemetry.service_name",
                "not blank, no control characters",
            ));
        }
        if !(10..=60_000).contains(&self.export_interval_ms) {
            return Err(invalid(
                "telemetry.export_interval_ms",
                "10 to 60000 milliseconds",
            ));
        }
        Ok(Some(Telemetry {
            traces_url,
            service_name,
            export_interval_ms: self.export_interval_ms,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(endpoint: &str) -> TelemetryConfig {
        TelemetryConfig {
            otlp_endpoint: Some(endpoint.to_owned()),
            ..TelemetryConfig::default()
        }
    }

    #[test]
    fn off_by_default_and_the_traces_path_is_added_once() {
        assert_eq!(TelemetryConfig::default().validate().ok(), Some(None));
        let on = with("http://127.0.0.1:4318/").validate();
        assert_eq!(
            on.ok().flatten().map(|t| (t.traces_url, t.service_name)),
            Some((
                "http://127.0.0.1:4318/v1/traces".to_owned(),
                "pforte".to_owned()
            ))
        );
        let full = with("https://otel.example/v1/traces").validate();
        assert_eq!(
            full.ok().flatten().map(|t| t.traces_url),
            Some("https://otel.example/v1/traces".to_owned())
        );
    }

    #[test]
    fn bad_endpoints_and_intervals_are_named() {
        for bad in [
            "grpc://127.0.0.1:4317",
            "not a url",
            "http://h:4318/?x=1",
            "/v1/traces",
        ] {
            let err = with(bad).validate().err().map(|e| e.to_string());
            assert!(
                err.as_deref()
                    .is_some_and(|e| e.contains("telemetry.otlp_endpoint")),
                "{bad}: {err:?}"
            );
        }
        let mut c = with("http://127.0.0.1:4318");
        c.export_interval_ms = 0;
        assert!(c.validate().is_err());
    }
}
