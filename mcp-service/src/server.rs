//! The MCP surface: tools, resources, resource templates, prompts and server info. Handlers
//! stay thin: they parse arguments, read who is calling (through `identity` and the
//! handshake's `clientInfo`) and delegate to `tools::Planner`; `tools::error` turns failures
//! into tool errors.

use std::collections::BTreeMap;
use std::sync::Arc;

use rmcp::{
    ErrorData as McpError, RoleServer, ServerHandler,
    handler::server::{router::tool::ToolRouter, wrapper::Parameters},
    model::{
        CallToolResult, ContentBlock, GetPromptRequestParams, GetPromptResponse, Implementation,
        ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, MetaObject,
        PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse,
        ReadResourceResult, Resource, ResourceContents, ResourceTemplate, ServerCapabilities,
        ServerConfig,
    },
    service::RequestContext,
    tool, tool_handler, tool_router,
};
use serde_json::json;

use crate::{
    guide,
    identity::Identity,
    prompts,
    tools::{
        Answer, Caller, DOC_URI_TEMPLATE, Edit, Planner, ToolError, doc_uri,
        input::{
            AddNodeInput, ApplyOpsInput, CheckInput, CreateInput, HistoryInput, InspectInput,
            MoveNodeInput, ReadInput, RemoveNodeInput, SetSizeInput, SetStatusInput, WriteInput,
        },
    },
};

/// The tools that change a plan (text form) or a document; absent in read-only mode.
pub const WRITE_TOOLS: [&str; 8] = [
    "werkbaum_set_status",
    "werkbaum_apply_ops",
    "werkbaum_write",
    "werkbaum_add_node",
    "werkbaum_move_node",
    "werkbaum_set_size",
    "werkbaum_remove_node",
    "werkbaum_create",
];

const WRITE_NOTE: &str = " Give `text` (a local plan; the answer carries the new text, findings \
     and `blocking` — save it yourself only when not blocking) or `document` with `base: \
     {version, checksum}` from your last read (a stale base is a `conflict` error carrying the \
     current text; nothing is written). Guard rails: new structural warnings and a node newly \
     set to [^] block unless `allowWarnings` / `allowProd`; the answer lists the warning delta.";

/// The Werkbaum MCP service. Cheap to clone; one instance per MCP session.
#[derive(Clone)]
pub struct PlanService {
    tool_router: ToolRouter<Self>,
    planner: Arc<Planner>,
}

impl std::fmt::Debug for PlanService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlanService").finish_non_exhaustive()
    }
}

fn respond(result: Result<Answer, ToolError>) -> Result<CallToolResult, McpError> {
    Ok(match result {
        Ok(answer) => {
            let mut r = CallToolResult::structured(answer.structured);
            r.content = vec![ContentBlock::text(answer.text)];
            r
        }
        Err(e) => e.into_result(),
    })
}

fn caller(ctx: &RequestContext<RoleServer>) -> Caller {
    let identity = Identity::of_request(ctx);
    let host = ctx.client_info().map(|h| h.name);
    Caller::new(
        host.as_deref(),
        identity.subject.as_deref(),
        identity.client.as_deref(),
    )
}

#[tool_router]
impl PlanService {
    /// A session's service; in read-only mode no write tool is registered at all.
    pub fn new(planner: Arc<Planner>, read_only: bool) -> Self {
        let mut tool_router = Self::tool_router();
        annotate_write_tools(&mut tool_router);
        if read_only {
            for name in WRITE_TOOLS {
                tool_router.remove_route(name);
            }
        }
        Self {
            tool_router,
            planner,
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

    #[tool(
        description = "Read a Werkbaum plan: its text, revision stamp ({document, version, \
                       checksum} or {checksum}) and summary figures. Give `text` or `document`.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn werkbaum_read(
        &self,
        Parameters(input): Parameters<ReadInput>,
    ) -> Result<CallToolResult, McpError> {
        respond(self.planner.read(input.source).await)
    }

    #[tool(
        description = "Ask what a plan means, computed exactly as the Werkbaum editor does: the \
                       tree (status, effective status, sizes, assumed sizes, needsBreakdown, \
                       needed/station flags), warnings and the cheapest path with stations and \
                       assignee loads. `id` restricts the tree to a subtree; `include` picks \
                       sections. Give `text` or `document`.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn werkbaum_inspect(
        &self,
        Parameters(input): Parameters<InspectInput>,
    ) -> Result<CallToolResult, McpError> {
        respond(self.planner.inspect(input).await)
    }

    #[tool(
        description = "Check a plan: its warnings as findings, each with `blocking` (new \
                       structural warnings and nodes newly set to [^] block). With `against` \
                       (an earlier text) only what the plan newly introduces is reported. \
                       Give `text` or `document`.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn werkbaum_check(
        &self,
        Parameters(input): Parameters<CheckInput>,
    ) -> Result<CallToolResult, McpError> {
        respond(self.planner.check(input).await)
    }

    #[tool(
        description = "Set a node's status box ([?] idea, [ ] planned, [~] in progress, [/] \
                       first cut, [x] done, [^] production, [-] discarded, [!] high risk); \
                       only that line changes.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            open_world_hint = false
        )
    )]
    async fn werkbaum_set_status(
        &self,
        Parameters(input): Parameters<SetStatusInput>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let edit = Edit::SetStatus {
            id: input.id,
            status: input.status,
        };
        respond(self.planner.edit(input.common, edit, &caller(&ctx)).await)
    }

    #[tool(
        description = "Apply line operations ({op: insert|replace|delete, index, count?, \
                       lines?} on text.split(\"\\n\"), in order).",
        annotations(
            read_only_hint = false,
            destructive_hint = true,
            open_world_hint = false
        )
    )]
    async fn werkbaum_apply_ops(
        &self,
        Parameters(input): Parameters<ApplyOpsInput>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let edit = Edit::ApplyOps(input.ops);
        respond(self.planner.edit(input.common, edit, &caller(&ctx)).await)
    }

    #[tool(
        description = "Replace the whole plan text with `newText` (prefer the node verbs; they \
                       leave every other line byte-identical).",
        annotations(
            read_only_hint = false,
            destructive_hint = true,
            open_world_hint = false
        )
    )]
    async fn werkbaum_write(
        &self,
        Parameters(input): Parameters<WriteInput>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let edit = Edit::Write(input.new_text);
        respond(self.planner.edit(input.common, edit, &caller(&ctx)).await)
    }

    #[tool(
        description = "Add one node line under `parent` (null: a root), after the child `after` \
                       or as the last child; indentation is chosen for you.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            open_world_hint = false
        )
    )]
    async fn werkbaum_add_node(
        &self,
        Parameters(input): Parameters<AddNodeInput>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let edit = Edit::AddNode {
            parent: input.parent,
            line: input.line,
            after: input.after,
        };
        respond(self.planner.edit(input.common, edit, &caller(&ctx)).await)
    }

    #[tool(
        description = "Move a node with its whole subtree (descriptions and continuation lines \
                       included, re-indented) under `parent` (null: a root), after `after`.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            open_world_hint = false
        )
    )]
    async fn werkbaum_move_node(
        &self,
        Parameters(input): Parameters<MoveNodeInput>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let edit = Edit::MoveNode {
            id: input.id,
            parent: input.parent,
            after: input.after,
        };
        respond(self.planner.edit(input.common, edit, &caller(&ctx)).await)
    }

    #[tool(
        description = "Set a node's size (XS, S, M, L, XL, XXL) or remove it (null).",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            open_world_hint = false
        )
    )]
    async fn werkbaum_set_size(
        &self,
        Parameters(input): Parameters<SetSizeInput>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let edit = Edit::SetSize {
            id: input.id,
            size: input.size,
        };
        respond(self.planner.edit(input.common, edit, &caller(&ctx)).await)
    }

    #[tool(
        description = "Remove a node: `discard: true` marks it [-]; `discard: false` deletes its \
                       subtree and its description blocks.",
        annotations(
            read_only_hint = false,
            destructive_hint = true,
            open_world_hint = false
        )
    )]
    async fn werkbaum_remove_node(
        &self,
        Parameters(input): Parameters<RemoveNodeInput>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let edit = Edit::RemoveNode {
            id: input.id,
            discard: input.discard,
        };
        respond(self.planner.edit(input.common, edit, &caller(&ctx)).await)
    }

    #[tool(
        description = "Create a shared plan document on this server (version 1) from `title` \
                       and `text`; returns its uuid, version and checksum. The same guard \
                       rails apply (structural warnings and [^] nodes block unless allowed).",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            open_world_hint = false
        )
    )]
    async fn werkbaum_create(
        &self,
        Parameters(input): Parameters<CreateInput>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        respond(self.planner.create(input, &caller(&ctx)).await)
    }

    #[tool(
        description = "List a document's versions, oldest first: version, time, author \
                       (host · user), what changed and the line operations. `since`: only \
                       versions after that one.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn werkbaum_history(
        &self,
        Parameters(input): Parameters<HistoryInput>,
    ) -> Result<CallToolResult, McpError> {
        respond(self.planner.history(input).await)
    }
}

fn store_failure(e: &ToolError) -> McpError {
    McpError::internal_error(e.to_string(), None)
}

/// Tool descriptions of write tools end with the shared note on forms and guard rails.
fn annotate_write_tools(router: &mut ToolRouter<PlanService>) {
    for name in WRITE_TOOLS {
        if name == "werkbaum_create" {
            continue;
        }
        if let Some(route) = router.map.get_mut(name) {
            let d = route.attr.description.clone().unwrap_or_default();
            route.attr.description = Some(format!("{d}{WRITE_NOTE}").into());
        }
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for PlanService {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .enable_prompts()
                .build(),
        );
        info.server_info = Implementation::new("pforte-werkbaum", env!("CARGO_PKG_VERSION"));
        info.instructions = Some(
            "Werkbaum plans as MCP resources, tools and prompts. Read werkbaum://guide first; \
             shared documents are werkbaum://doc/{uuid}. Ask werkbaum_inspect instead of \
             interpreting the notation yourself; write with the node verbs and the base you read."
                .to_owned(),
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
        let docs = self
            .planner
            .list_documents()
            .await
            .map_err(|e| store_failure(&e))?;
        let mut items = vec![guide];
        items.extend(docs.into_iter().map(|d| {
            Resource::new(doc_uri(&d.uuid), d.title.clone())
                .with_title(d.title.clone())
                .with_description(format!(
                    "Werkbaum plan \"{}\" (document {}, version {})",
                    d.title, d.uuid, d.version
                ))
                .with_mime_type("text/plain")
                .with_meta(MetaObject(
                    json!({"document": d.uuid, "version": d.version, "checksum": d.checksum})
                        .as_object()
                        .cloned()
                        .unwrap_or_default(),
                ))
        }));
        Ok(ListResourcesResult::with_all_items(items))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let template = ResourceTemplate::new(DOC_URI_TEMPLATE, "werkbaum-document")
            .with_title("Werkbaum plan document")
            .with_description(
                "A shared Werkbaum plan by uuid; version and checksum are in _meta (use them as \
                 `base` when writing).",
            )
            .with_mime_type("text/plain");
        Ok(ListResourceTemplatesResult::with_all_items(vec![template]))
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
        if let Some(uuid) = request.uri.strip_prefix("werkbaum://doc/") {
            return match self.planner.document(uuid).await {
                Ok(d) => {
                    let meta = json!({
                        "document": d.uuid, "title": d.title,
                        "version": d.version, "checksum": d.checksum,
                    });
                    let contents = ResourceContents::text(d.text, request.uri.clone())
                        .with_mime_type("text/plain")
                        .with_meta(MetaObject(meta.as_object().cloned().unwrap_or_default()));
                    Ok(ReadResourceResult::new(vec![contents]).into())
                }
                Err(ToolError::UnknownDocument(_)) => Err(McpError::resource_not_found(
                    format!("no document {uuid} on this server"),
                    Some(json!({ "uri": request.uri })),
                )),
                Err(e) => Err(store_failure(&e)),
            };
        }
        Err(McpError::resource_not_found(
            format!("no resource {}", request.uri),
            Some(json!({ "uri": request.uri })),
        ))
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        Ok(ListPromptsResult::with_all_items(prompts::list()))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        let args: BTreeMap<String, String> = request
            .arguments
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| {
                let v = match v {
                    serde_json::Value::String(s) => s,
                    other => other.to_string(),
                };
                (k, v)
            })
            .collect();
        prompts::get(&request.name, &args)
            .map(Into::into)
            .map_err(|e| McpError::invalid_params(e.to_string(), None))
    }
}
