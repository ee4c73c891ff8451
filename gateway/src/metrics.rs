//! The gateway's metrics: one `prometheus-client` registry, built at start-up and passed in,
//! with typed families whose labels are small fixed enums — never a subject, token, path or
//! client id. Route names come from the config (bounded); tool names are bounded too: only
//! names the catalog or the config knows get a series of their own (a budget per route,
//! [`tool_budget`]), clipped to [`tool_names::MAX_TOOL_LABEL_BYTES`]; every other name counts as `other`. `live.rs`: the series read at
//! scrape time (`process_*`, upstream health, sessions, stdio children).

use std::{
    collections::HashMap,
    fmt::Write as _,
    sync::{Arc, RwLock},
    time::Duration,
};

use pforte_oauth::{Event, Observer};
use prometheus_client::{
    encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder, prometheus_text},
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram, info::Info},
    registry::Registry,
};

mod classify;
pub(crate) mod live;
mod pins;
mod rules;
mod tool_names;
mod virtuals;

pub(crate) use pins::PinMetrics;
pub(crate) use tool_names::{tool_budget, tool_label};
pub(crate) use virtuals::VirtualOutcome;

pub(crate) use classify::{
    auth_reason, credential_kind, method_class, oauth_event, status_class, tool_decision,
    upstream_failure,
};

/// The `Content-Type` of the exposition (Prometheus text format 0.0.4).
pub(crate) const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// A closed set of label values, each spelled once.
macro_rules! label_values {
    ($(#[$meta:meta])* $name:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub(crate) enum $name {
            $($variant),+
        }

        impl $name {
            /// Every value, for pre-created series and tests.
            #[allow(dead_code, reason = "generated for every label; not every label pre-creates")]
            pub(crate) const ALL: &'static [Self] = &[$(Self::$variant),+];

            pub(crate) fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $text),+
                }
            }
        }

        impl EncodeLabelValue for $name {
            fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> std::fmt::Result {
                encoder.write_str(self.as_str())
            }
        }
    };
}

/// An MCP route's name as a label value (`""` for a request that took no route); cloning it
/// is a reference count, not a copy.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) struct RouteName(Arc<str>);

impl From<&str> for RouteName {
    fn from(name: &str) -> Self {
        Self(Arc::from(name))
    }
}

impl EncodeLabelValue for RouteName {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> std::fmt::Result {
        encoder.write_str(&self.0)
    }
}

label_values!(
    /// Which kind of the gateway's endpoints a request took (the `endpoint` label).
    RouteLabel {
        Mcp => "mcp",
        OAuth => "oauth",
        WellKnown => "well_known",
        Health => "health",
        Metrics => "metrics",
        Other => "other",
    }
);

label_values!(
    /// The request method, folded to the ones the gateway serves.
    MethodClass {
        Get => "GET",
        Post => "POST",
        Delete => "DELETE",
        Options => "OPTIONS",
        Other => "other",
    }
);

label_values!(
    /// The response status by its first digit; `none` when no response was written (the client
    /// went away first).
    StatusClass {
        Informational => "1xx",
        Success => "2xx",
        Redirection => "3xx",
        ClientError => "4xx",
        ServerError => "5xx",
        None => "none",
    }
);

label_values!(
    /// Which kind of credential a `/mcp` request presented.
    CredentialKind {
        Static => "static",
        OAuth => "oauth",
        None => "none",
    }
);

label_values!(
    /// How authenticating a `/mcp` request ended (`invalid` covers unknown and revoked tokens:
    /// the stores do not tell them apart, on purpose).
    AuthReason {
        Ok => "ok",
        Missing => "missing",
        Malformed => "malformed",
        Invalid => "invalid",
        Expired => "expired",
        InsufficientScope => "insufficient_scope",
        Unavailable => "unavailable",
    }
);

label_values!(
    /// Events of the authorization server.
    OAuthEvent {
        Registration => "registration",
        LoginOk => "login_ok",
        LoginFailed => "login_failed",
        LoginThrottled => "login_throttled",
        CodeIssued => "code_issued",
        TokensIssued => "tokens_issued",
        Refresh => "refresh",
        ReuseDetected => "reuse_detected",
        Revocation => "revocation",
    }
);

label_values!(
    /// An access-token validation answered from the cache or from the store.
    CacheResult {
        Hit => "hit",
        Miss => "miss",
    }
);

label_values!(
    /// Why the upstream could not be used.
    UpstreamFailure {
        Connect => "connect",
        Timeout => "timeout",
        Other => "other",
    }
);

label_values!(
    /// What became of a `tools/call`.
    ToolDecision {
        Allowed => "allowed",
        Denied => "denied",
        Budget => "budget",
    }
);

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    endpoint: RouteLabel,
    route: RouteName,
    method: MethodClass,
    status: StatusClass,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DurationLabels {
    endpoint: RouteLabel,
    route: RouteName,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    route: RouteName,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AuthLabels {
    kind: CredentialKind,
    reason: AuthReason,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EventLabels {
    event: OAuthEvent,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CacheLabels {
    result: CacheResult,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UpstreamLabels {
    route: RouteName,
    kind: UpstreamFailure,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabels {
    route: RouteName,
    tool: String,
    decision: ToolDecision,
}

/// The rate limiter's series; the limiter holds this and counts into it.
#[derive(Clone, Debug, Default)]
pub(crate) struct RateLimitMetrics {
    /// 1 while the shared (redis) limiter is unavailable.
    pub(crate) degraded: Gauge,
    pub(crate) fallback_decisions: Counter,
    pub(crate) refusals: Counter,
}

/// The TLS listener's series: each served certificate's expiry, and reload and renewal
/// failures. The certificate store and the ACME client count into a clone.
#[derive(Clone, Debug, Default)]
pub(crate) struct TlsMetrics {
    not_after: Family<NameLabels, Gauge>,
    pub(crate) renewal_failures: Counter,
    pub(crate) renewals: Counter,
    pub(crate) reload_failures: Counter,
}

/// A certificate by its first name (names come from the configuration's certificates and
/// ACME domains: bounded).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NameLabels {
    name: String,
}

impl TlsMetrics {
    /// The certificate known as `name` expires at `not_after` (seconds since the epoch).
    pub(crate) fn not_after(&self, name: &str, not_after: i64) {
        self.not_after
            .get_or_create(&NameLabels {
                name: name.to_owned(),
            })
            .set(not_after);
    }
}

/// Per-user upstream credentials: what happened to them, by route (counts only; no secret, no
/// user). The credential service counts into a clone.
#[derive(Clone, Debug, Default)]
pub(crate) struct CredentialMetrics {
    events: Family<CredentialLabels, Counter>,
}

label_values! {
    /// What happened to an upstream credential: a user connected (a secret entered, or an
    /// upstream authorization finished); this gateway refreshed an access token; a caller
    /// found the token stale and took another caller's (or gateway's) refresh; the upstream
    /// refused a refresh or a credential (the user must reconnect); a user disconnected.
    CredentialEvent {
        Connected => "connected",
        Refreshed => "refreshed",
        RefreshJoined => "refresh_joined",
        ReconnectNeeded => "reconnect_needed",
        Disconnected => "disconnected",
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CredentialLabels {
    route: String,
    event: CredentialEvent,
}

impl CredentialMetrics {
    /// Counts `event` on route `route` (a configured route's name: bounded).
    pub(crate) fn count(&self, route: &str, event: CredentialEvent) {
        self.events
            .get_or_create(&CredentialLabels {
                route: route.to_owned(),
                event,
            })
            .inc();
    }
}

/// One counter per [`ToolDecision`], indexed by it.
type ToolCounters = [Counter; 3];

/// Request-duration buckets in seconds (SSE streams land in `+Inf`).
const DURATION_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

/// Every series the gateway exports. Share it as `Arc<Metrics>`.
pub(crate) struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    duration: Family<DurationLabels, Histogram, fn() -> Histogram>,
    upstream_first_byte: Family<RouteLabels, Histogram, fn() -> Histogram>,
    auth: Family<AuthLabels, Counter>,
    oauth: Family<EventLabels, Counter>,
    validation_cache: Family<CacheLabels, Counter>,
    upstream_errors: Family<UpstreamLabels, Counter>,
    open_streams: Gauge,
    tool_calls: Family<ToolLabels, Counter>,
    /// Per route, the counters of each known tool name, found without building a label set.
    tools: RwLock<Vec<HashMap<String, ToolCounters>>>,
    /// Per route, the counters of `other`.
    other_tool: Vec<ToolCounters>,
    /// The configured routes' names, by route index.
    routes: Vec<RouteName>,
    /// The `route` of a request that took none.
    no_route: RouteName,
    ratelimit: RateLimitMetrics,
    pins: PinMetrics,
    rules: rules::RuleMetrics,
    virtuals: virtuals::VirtualMetrics,
    tls: TlsMetrics,
    credentials: CredentialMetrics,
    live: live::Live,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new(&[])
    }
}

impl Metrics {
    /// Registers every family for the routes named `routes` (in route order); series with a
    /// fixed, small label set exist from the start at 0.
    pub(crate) fn new(routes: &[&str]) -> Self {
        let routes: Vec<RouteName> = routes.iter().map(|&r| RouteName::from(r)).collect();
        let mut registry = Registry::default();
        registry.register(
            "pforte_build",
            "The running gateway's version",
            Info::new(vec![("version", env!("CARGO_PKG_VERSION"))]),
        );
        let live = live::Live::default();
        registry.register_collector(Box::new(live.clone()));
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "pforte_http_requests",
            "Requests by endpoint kind, MCP route, method class and status class",
            requests.clone(),
        );
        let duration: Family<DurationLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(duration_histogram);
        registry.register(
            "pforte_http_request_duration_seconds",
            "Whole-request latency, from arrival to the last byte of the answer, by endpoint kind and MCP route",
            duration.clone(),
        );
        let upstream_first_byte: Family<RouteLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(duration_histogram);
        registry.register(
            "pforte_upstream_first_byte_seconds",
            "Time from sending a request upstream to its response header, by route",
            upstream_first_byte.clone(),
        );
        let auth = Family::<AuthLabels, Counter>::default();
        registry.register(
            "pforte_auth",
            "Authentication outcomes on /mcp by credential kind and reason",
            auth.clone(),
        );
        let oauth = Family::<EventLabels, Counter>::default();
        for &event in OAuthEvent::ALL {
            oauth.get_or_create_owned(&EventLabels { event });
        }
        registry.register(
            "pforte_oauth_events",
            "Authorization-server events",
            oauth.clone(),
        );
        let validation_cache = Family::<CacheLabels, Counter>::default();
        for &result in CacheResult::ALL {
            validation_cache.get_or_create_owned(&CacheLabels { result });
        }
        registry.register(
            "pforte_token_validation_cache",
            "OAuth access-token validations answered from the 1 s cache (hit) or the store (miss)",
            validation_cache.clone(),
        );
        let upstream_errors = Family::<UpstreamLabels, Counter>::default();
        for route in &routes {
            for &kind in UpstreamFailure::ALL {
                upstream_errors.get_or_create_owned(&UpstreamLabels {
                    route: route.clone(),
                    kind,
                });
            }
        }
        registry.register(
            "pforte_upstream_errors",
            "Requests the upstream failed, by route: connect errors, timeouts, other",
            upstream_errors.clone(),
        );
        let open_streams = Gauge::default();
        registry.register(
            "pforte_sse_streams_open",
            "Responses streaming text/event-stream right now",
            open_streams.clone(),
        );
        let tool_calls = Family::<ToolLabels, Counter>::default();
        registry.register(
            "pforte_tool_calls",
            "tools/call requests by tool (names the catalog or config knows, else other) and decision",
            tool_calls.clone(),
        );
        let pins = PinMetrics::register(&mut registry);
        let rules = rules::RuleMetrics::register(&mut registry);
        let virtuals = virtuals::VirtualMetrics::register(&mut registry);
        let ratelimit = RateLimitMetrics::default();
        registry.register(
            "pforte_ratelimit_degraded",
            "1 while the shared (redis) limiter is unavailable and limits are per process",
            ratelimit.degraded.clone(),
        );
        registry.register(
            "pforte_ratelimit_fallback_decisions",
            "Decisions made in-process because redis did not answer",
            ratelimit.fallback_decisions.clone(),
        );
        registry.register(
            "pforte_ratelimit_refusals",
            "Requests answered 429",
            ratelimit.refusals.clone(),
        );
        let credentials = CredentialMetrics::default();
        registry.register(
            "pforte_upstream_credential_events",
            "Per-user upstream credentials connected, refreshed (by this gateway, or joined: \
             another caller's refresh taken), needing reconnect, and disconnected, by route",
            credentials.events.clone(),
        );
        let tls = TlsMetrics::default();
        registry.register(
            "pforte_tls_certificate_not_after_seconds",
            "When each served certificate expires (Unix time), by its first name",
            tls.not_after.clone(),
        );
        registry.register(
            "pforte_tls_renewal_failures",
            "ACME orders that failed (the previous certificate stays served)",
            tls.renewal_failures.clone(),
        );
        registry.register(
            "pforte_tls_renewals",
            "Certificates obtained from the ACME CA",
            tls.renewals.clone(),
        );
        registry.register(
            "pforte_tls_reload_failures",
            "Changed PEM pairs on disk that could not be loaded (the previous pair stays served)",
            tls.reload_failures.clone(),
        );
        let other_tool = routes
            .iter()
            .map(|route| tool_counters(&tool_calls, route, "other"))
            .collect();
        Self {
            registry,
            requests,
            duration,
            upstream_first_byte,
            auth,
            oauth,
            validation_cache,
            upstream_errors,
            open_streams,
            tool_calls,
            tools: RwLock::new(vec![HashMap::new(); routes.len()]),
            other_tool,
            routes,
            no_route: RouteName::from(""),
            ratelimit,
            pins,
            rules,
            virtuals,
            tls,
            credentials,
            live,
        }
    }

    /// The scrape-time series' sources, attached once the gateway is built.
    pub(crate) fn live(&self) -> &live::Live {
        &self.live
    }

    /// The `route` label of route `i` (none: `""`).
    fn route(&self, i: Option<usize>) -> RouteName {
        i.and_then(|i| self.routes.get(i))
            .unwrap_or(&self.no_route)
            .clone()
    }

    /// The TLS series, for the certificate store and the ACME client.
    pub(crate) fn tls(&self) -> TlsMetrics {
        self.tls.clone()
    }

    /// The upstream credentials' series, for the credential service.
    pub(crate) fn credentials(&self) -> CredentialMetrics {
        self.credentials.clone()
    }

    /// The pinned definitions' series.
    pub(crate) fn pins(&self) -> PinMetrics {
        self.pins.clone()
    }

    /// The limiter's series, for `SharedLimiter::new`.
    pub(crate) fn ratelimit(&self) -> RateLimitMetrics {
        self.ratelimit.clone()
    }

    /// The exposition text.
    pub(crate) fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut text = String::with_capacity(8 * 1024);
        prometheus_text::encode(&mut text, &self.registry)?;
        Ok(text)
    }

    /// One finished request.
    /// One finished request to an `endpoint` of MCP route `route` (if any).
    pub(crate) fn request(
        &self,
        endpoint: RouteLabel,
        route: Option<usize>,
        method: MethodClass,
        status: u16,
        took: Duration,
    ) {
        let status = status_class(status);
        let route = self.route(route);
        self.requests
            .get_or_create(&RequestLabels {
                endpoint,
                route: route.clone(),
                method,
                status,
            })
            .inc();
        self.duration
            .get_or_create(&DurationLabels { endpoint, route })
            .observe(took.as_secs_f64());
    }

    /// Route `route`'s upstream's time to its response header.
    pub(crate) fn upstream_first_byte(&self, route: Option<usize>, took: Duration) {
        self.upstream_first_byte
            .get_or_create(&RouteLabels {
                route: self.route(route),
            })
            .observe(took.as_secs_f64());
    }

    /// One authentication on `/mcp`.
    pub(crate) fn auth(&self, kind: CredentialKind, reason: AuthReason) {
        self.auth.get_or_create(&AuthLabels { kind, reason }).inc();
    }

    /// Route `route`'s upstream failed a request.
    pub(crate) fn upstream_failure(&self, route: Option<usize>, kind: UpstreamFailure) {
        self.upstream_errors
            .get_or_create(&UpstreamLabels {
                route: self.route(route),
                kind,
            })
            .inc();
    }

    /// An event-stream response started; the stream counts as open until the guard drops
    /// (the request's context ends: finished, failed or the client went away).
    pub(crate) fn stream_opened(&self) -> OpenStream {
        self.open_streams.inc();
        OpenStream(self.open_streams.clone())
    }

    /// One `tools/call` on route `route`. `known` says whether the name comes from the
    /// catalog or the config; unknown names, and names past the route's [`tool_budget`],
    /// count as `other`. Long names are clipped ([`tool_label`]).
    pub(crate) fn tool_call(&self, route: usize, name: &str, known: bool, decision: ToolDecision) {
        let index = decision as usize;
        let Some(other) = self.other_tool.get(route) else {
            return;
        };
        let name = tool_label(name);
        let name = name.as_ref();
        if known {
            if let Ok(tools) = self.tools.read()
                && let Some(counters) = tools.get(route).and_then(|t| t.get(name))
            {
                counters[index].inc();
                return;
            }
            if let Ok(mut tools) = self.tools.write() {
                let budget = tool_budget(tools.len());
                if let Some(known) = tools.get_mut(route) {
                    if let Some(counters) = known.get(name) {
                        counters[index].inc();
                        return;
                    }
                    if known.len() < budget {
                        let counters = tool_counters(&self.tool_calls, &self.routes[route], name);
                        counters[index].inc();
                        known.insert(name.to_owned(), counters);
                        return;
                    }
                }
            }
        }
        other[index].inc();
    }
}

/// The three counters of one tool name on one route, created in the family.
fn tool_counters(
    family: &Family<ToolLabels, Counter>,
    route: &RouteName,
    tool: &str,
) -> ToolCounters {
    [
        ToolDecision::Allowed,
        ToolDecision::Denied,
        ToolDecision::Budget,
    ]
    .map(|decision| {
        family.get_or_create_owned(&ToolLabels {
            route: route.clone(),
            tool: tool.to_owned(),
            decision,
        })
    })
}

impl Observer for Metrics {
    fn event(&self, event: Event) {
        match oauth_event(event) {
            Ok(event) => self.oauth.get_or_create(&EventLabels { event }).inc(),
            Err(result) => self
                .validation_cache
                .get_or_create(&CacheLabels { result })
                .inc(),
        };
    }
}

/// Keeps one event stream counted as open until dropped.
#[derive(Debug)]
pub(crate) struct OpenStream(Gauge);

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[cfg(test)]
mod tests;
