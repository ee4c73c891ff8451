//! `RequestCtx`: what the phases of one request share, created in `new_ctx` and dropped when
//! the request ends (which releases its SSE stream slot and open-stream gauge).

use std::time::Instant;

use bytes::BytesMut;

use crate::{
    auth::Principal,
    limit::{Class, Decision, Policy},
    mcp::Message,
    metrics::{OpenStream, RouteLabel},
    reply::Framing,
    sessions::Holder,
    streams::StreamSlot,
};

/// Per-request state shared by the phases.
#[derive(Debug)]
pub(crate) struct RequestCtx {
    pub(crate) request_id: String,
    pub(crate) principal: Option<Principal>,
    /// `kind:subject:client`, formatted once when the request is authenticated: who owns the
    /// sessions it opens.
    pub(super) principal_key: String,
    /// `auth::person_key`: whom its sessions, streams, rates and tool budgets count against.
    pub(super) person_key: String,
    pub(super) client_ip: Option<std::net::IpAddr>,
    /// The rate-limit decision for this request, reported in response headers.
    pub(super) rate: Option<(Class, Policy, Decision)>,
    /// An allowed foreign browser origin: answers carry CORS headers for it.
    pub(super) cors_origin: Option<String>,
    /// Why the gateway refused the request, for the audit log.
    pub(super) refused: Option<&'static str>,
    /// The `[[policy]]` rule that refused it or held it for approval (audited with the reason).
    pub(super) rule: Option<String>,
    pub(super) mcp: Exchange,
    pub(super) body_bytes: u64,
    pub(super) started: Instant,
    /// Wall-clock arrival, milliseconds since the epoch (the audit line's time).
    pub(super) arrived_ms: u64,
    /// The route as a metrics label.
    pub(super) route: RouteLabel,
    /// The MCP route (index into `Settings::routes`) of a `/NAME/mcp` request or its RFC 9728
    /// document.
    pub(super) mcp_route: Option<usize>,
    /// The virtual server the request addresses (`[[virtual]]`), if any.
    pub(super) virtual_server: Option<usize>,
    /// Through a virtual server: the member route a call went to, and how it ended there.
    pub(super) member: Option<(usize, Option<crate::metrics::VirtualOutcome>)>,
    /// When the request went upstream (for the time to its response header).
    pub(super) upstream_sent: Option<Instant>,
    /// Counts an event-stream answer as open until the context drops.
    pub(super) stream: Option<OpenStream>,
    /// A balanced route: the instance (index into the route's `urls`) the request goes to.
    pub(super) instance: Option<usize>,
    /// The request carries `Mcp-Session-Id` (it must reach the session's instance).
    pub(super) in_session: bool,
    /// A task request: it must reach the instance holding the task (`instance`), never another.
    pub(super) task_pinned: bool,
    /// Its session is in use (not evicted at its person's cap) until the context drops.
    pub(super) session_use: Option<crate::sessions::InUse>,
    /// Failed attempts to connect to an instance (a retry goes to another one).
    pub(super) connect_failures: usize,
    /// The request's spans, when `[telemetry]` is on.
    pub(super) trace: Option<crate::telemetry::RequestTrace>,
    /// The route's upstream credential this request carries (`[routes.upstream_auth]`).
    pub(super) upstream_auth: Option<crate::credentials::Injected>,
}

/// What the gateway keeps of one `/mcp` exchange between phases.
#[derive(Debug, Default)]
pub(super) struct Exchange {
    /// The request is for `/mcp` (audited).
    pub(super) route: bool,
    /// The body is parsed and admitted by the body half of the pipeline.
    pub(super) inspect: bool,
    /// The request's body has been read to its end (or had none).
    pub(super) body_read: bool,
    /// `100 Continue` was sent.
    pub(super) continued: bool,
    pub(super) message: Option<Message>,
    /// A `tools/list` (or `server/discover`) answer to filter for the principal.
    pub(super) filter_list: bool,
    pub(super) list_is_sse: bool,
    pub(super) list_held: BytesMut,
    /// An `initialize`: the answer's `Mcp-Session-Id` is bound to the principal.
    pub(super) opens_session: bool,
    /// A `DELETE` of this session: its record goes when the upstream agrees.
    pub(super) ends_session: Option<String>,
    /// An SSE stream's slot among the principal's; released when the context drops.
    pub(super) stream: Option<StreamSlot>,
    /// No upstream credential for this person: the message gets the connect prompt.
    pub(super) connect: Option<crate::credentials::Ask>,
    /// A `tools/call` (its tool): an answer that creates a task records who created it.
    pub(super) watch_task: Option<String>,
    /// The `tools/call` answer is an event stream.
    pub(super) task_sse: bool,
    /// A copy of the `tools/call` answer so far (bounded by `tasks::MAX_WATCHED`), read for a
    /// task id once whole; the bytes sent on are the upstream's.
    pub(super) task_held: Vec<u8>,
    /// An admitted `tasks/cancel`: the tool whose call created the task (audited once the
    /// upstream answers).
    pub(super) cancels: Option<String>,
    /// An `initialize` whose client declared URL-mode elicitation (remembered with its session).
    pub(super) url_elicitation: bool,
    /// A `tools/list` a `[[policy]]` rule may cut: the person's attributes the rules read.
    pub(super) attributes: Option<super::rules::Attributes>,
}

impl RequestCtx {
    /// A request that arrived at `arrived_ms` (wall clock) with id `request_id`.
    pub(super) fn new(request_id: String, arrived_ms: u64) -> Self {
        Self {
            request_id,
            principal: None,
            principal_key: String::new(),
            person_key: String::new(),
            client_ip: None,
            rate: None,
            cors_origin: None,
            refused: None,
            rule: None,
            mcp: Exchange::default(),
            body_bytes: 0,
            started: Instant::now(),
            arrived_ms,
            route: RouteLabel::Other,
            mcp_route: None,
            virtual_server: None,
            member: None,
            upstream_sent: None,
            stream: None,
            instance: None,
            in_session: false,
            task_pinned: false,
            session_use: None,
            connect_failures: 0,
            trace: None,
            upstream_auth: None,
        }
    }

    /// Who this request's sessions belong to and count against.
    pub(super) fn holder(&self) -> Holder<'_> {
        Holder::new(&self.principal_key, &self.person_key)
    }

    /// How the gateway's own answers to this request are framed.
    pub(super) fn framing(&self) -> Framing<'_> {
        Framing {
            request_id: &self.request_id,
            cors_origin: self.cors_origin.as_deref(),
        }
    }

    /// The client IP as a limit key (IPv6 by its /64).
    pub(super) fn ip_key(&self) -> String {
        crate::limit::ip_key(self.client_ip)
    }
}
