//! The MCP surface: tools, resources and server info. Handlers stay thin; they read the caller's
//! identity through `identity` and delegate the rest.

use rmcp::{
    ErrorData as McpError, RoleServer, ServerHandler,
    handler::server::router::tool::ToolRouter,
    model::{
        CallToolResult, ContentBlock, Implementation, ListResourcesResult, PaginatedRequestParams,
        ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource,
        ResourceContents, ServerCapabilities, ServerConfig,
    },
    service::RequestContext,
    tool, tool_handler, tool_router,
};
use serde_json::json;

use crate::{guide, identity::Identity};

/// The Werkbaum MCP service. Cheap to clone; one instance per MCP session.
#[derive(Clone)]
pub struct PlanService {
    tool_router: ToolRouter<Self>,
}

impl Default for PlanService {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for PlanService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlanService").finish_non_exhaustive()
    }
}

#[tool_router]
impl PlanService {
    pub fn new() -> Self {
        Self {
            tool_router: Self::tool_router(),
        }
    }

    /// An operator's first diagnostic: who the gateway says is calling, and from which host.
    #[tool(
        description = "Report the caller identity this service received from the gateway \
                       (subject, client, auth kind, scopes) and the MCP host name from the handshake.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn whoami(&self, ctx: RequestContext<RoleServer>) -> Result<CallToolResult, McpError> {
        let identity = Identity::of_request(&ctx);
        let host = ctx.client_info();
        let report = json!({
            "subject": identity.subject,
            "client": identity.client,
            "authKind": identity.auth_kind,
            "scopes": identity.scopes,
            "requestId": identity.request_id,
            "host": host.as_ref().map(|h| h.name.clone()),
            "hostVersion": host.as_ref().map(|h| h.version.clone()),
            "protocolVersion": ctx.protocol_version().map(|v| v.to_string()),
        });
        let text = format!(
            "subject: {}\nclient: {}\nauth: {}\nscopes: {}\nhost: {}",
            identity.subject.as_deref().unwrap_or("-"),
            identity.client.as_deref().unwrap_or("-"),
            identity.auth_kind.as_deref().unwrap_or("-"),
            if identity.scopes.is_empty() {
                "-".to_owned()
            } else {
                identity.scopes.join(" ")
            },
            host.as_ref().map(|h| h.name.as_str()).unwrap_or("-"),
        );
        let mut result = CallToolResult::structured(report);
        result.content = vec![ContentBlock::text(text)];
        Ok(result)
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for PlanService {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        );
        info.server_info = Implementation::new("pforte-werkbaum", env!("CARGO_PKG_VERSION"));
        info.instructions = Some(
            "Werkbaum plans as MCP resources and tools. Read werkbaum://guide first.".to_owned(),
        );
        info
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let guide = Resource::new(guide::URI, "guide")
            .with_title("Werkbaum notation guide")
            .with_description("How to read and write Werkbaum plans; read this first.")
            .with_mime_type(guide::MIME)
            .with_size(guide::TEXT.len() as u64);
        Ok(ListResourcesResult::with_all_items(vec![guide]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        if request.uri == guide::URI {
            let contents =
                ResourceContents::text(guide::TEXT, guide::URI).with_mime_type(guide::MIME);
            return Ok(ReadResourceResult::new(vec![contents]).into());
        }
        Err(McpError::resource_not_found(
            format!("no resource {}", request.uri),
            Some(json!({ "uri": request.uri })),
        ))
    }
}
