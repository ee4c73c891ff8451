//! The MCP surface: tools, resources, resource templates, prompts and server info. Handlers
//! stay thin: they parse arguments, read who is calling (through `identity` and the
//! handshake's `clientInfo`) and delegate to `tools::Planner`; `tools::error` turns failures
//! into tool errors. The resources (the guide and the documents) are listed and read in
//! [`resources`].

mod ask;
mod resources;

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::{
    identity::Identity,
    prompts,
    tools::{
        Answer, Caller, Edit, Planner, ToolError,
        answer::{
            self, CheckAnswer, CreateAnswer, EditAnswer, HistoryAnswer, InspectAnswer, ReadAnswer,
            WhoamiAnswer, output_schema,
        },
        input::{
            AddNodeInput, ApplyOpsInput, CheckInput, CreateInput, HistoryInput, InspectInput,
            MoveNodeInput, ReadInput, RemoveNodeInput, SetSizeInput, SetStatusInput, WriteInput,
        },
        render, schema,
    },
};
use rmcp::{
    ErrorData as McpError, RoleServer, ServerHandler,
    handler::server::{router::tool::ToolRouter, wrapper::Parameters},
    model::{
        CallToolResult, ContentBlock, GetPromptRequestParams, GetPromptResponse, Implementation,
        ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
        PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse,
        ServerCapabilities, ServerConfig,
    },
    service::RequestContext,
    tool, tool_handler, tool_router,
};

/// What every session learns at `initialize`: the two forms, `base` and the guard rails,
/// said once here (and in `werkbaum://guide`) instead of in every tool description.
pub(crate) const INSTRUCTIONS: &str = "Werkbaum plans (plain-text work breakdowns). Read werkbaum://guide \
     for the notation, the status keys and every field the tools return; ask werkbaum_inspect \
     instead of interpreting a plan yourself.\n\
     Two forms, exactly one per call: `text` (a plan you read yourself, e.g. a local file: \
     edits return the new text, checksum and findings; nothing is stored, save it yourself \
     unless `blocking`) or `document` (a uuid of this server, werkbaum://doc/{uuid}: writes \
     need `base: {version, checksum}` from your last read; a stale base is a `conflict` error \
     carrying the current text; redo your change on it). Every answer has a `revision`.\n\
     Guard rails: an edit that introduces structural warnings (mixedGate, unknownStatus, \
     descStray, duplicateId) or newly sets a node to [^] (production) is blocked (document \
     form: nothing is written) unless the call passes `allowWarnings` / `allowProd`; the answer \
     lists the new warnings as `findings`. Prefer the node verbs to werkbaum_write: they leave \
     every other line byte-identical.";

/// The names of the tools that change a plan: every tool not annotated `readOnlyHint: true`.
/// The gateway derives `mcp:write` from the same annotations.
pub(crate) fn write_tools(router: &ToolRouter<PlanService>) -> Vec<String> {
    router
        .list_all()
        .into_iter()
        .filter(|t| t.annotations.as_ref().and_then(|a| a.read_only_hint) != Some(true))
        .map(|t| t.name.into_owned())
        .collect()
}

/// Every input schema closed (`additionalProperties: false`: unknown arguments are refused)
/// and compact.
fn close_input_schemas(router: &mut ToolRouter<PlanService>) {
    for route in router.map.values_mut() {
        route.attr.input_schema = Arc::new(schema::compact_input(&route.attr.input_schema));
    }
}

/// The arguments a tool's input schema does not name, or `None` when all are known.
pub(crate) fn unknown_arguments(
    schema: &rmcp::model::JsonObject,
    arguments: Option<&rmcp::model::JsonObject>,
) -> Option<(Vec<String>, Vec<String>)> {
    let accepted: Vec<String> = schema
        .get("properties")
        .and_then(serde_json::Value::as_object)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default();
    let unknown: Vec<String> = arguments
        .into_iter()
        .flat_map(|a| a.keys())
        .filter(|k| !accepted.contains(k))
        .cloned()
        .collect();
    (!unknown.is_empty()).then_some((unknown, accepted))
}

/// The Werkbaum MCP service. Cheap to clone; one instance per MCP session. The tool catalog
/// is built once per process ([`PlanService::tools`]) and shared: built per session, its
/// schemas were about 480 KiB of every idle session's memory.
#[derive(Clone)]
pub struct PlanService {
    tool_router: Arc<ToolRouter<Self>>,
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

/// The tool catalog (every tool, annotated and with closed input schemas).
pub fn catalog() -> ToolRouter<PlanService> {
    let mut router = PlanService::tool_router();
    close_input_schemas(&mut router);
    router
}

#[tool_router]
impl PlanService {
    /// A session's service with a catalog of its own (one session, e.g. stdio); a server of
    /// many sessions builds [`PlanService::tools`] once and calls [`PlanService::with_tools`].
    pub fn new(planner: Arc<Planner>, read_only: bool) -> Self {
        Self::with_tools(planner, Self::tools(read_only))
    }

    /// The tools every session of this process serves; in read-only mode no write tool is
    /// registered at all.
    pub fn tools(read_only: bool) -> Arc<ToolRouter<Self>> {
        let mut tool_router = catalog();
        if read_only {
            for name in write_tools(&tool_router) {
                tool_router.remove_route(&name);
            }
        }
        Arc::new(tool_router)
    }

    /// A session's service sharing `tools` (from [`PlanService::tools`]) with every other.
    pub fn with_tools(planner: Arc<Planner>, tools: Arc<ToolRouter<Self>>) -> Self {
        Self {
            tool_router: tools,
            planner,
        }
    }

    /// An operator's first diagnostic: who the gateway says is calling, and from which host.
    #[tool(
        title = "Who am I",
        description = "The caller identity the gateway forwarded (subject, client id and name, \
                       auth kind, scopes) and the MCP host.",
        output_schema = output_schema::<WhoamiAnswer>(),
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn whoami(&self, ctx: RequestContext<RoleServer>) -> Result<CallToolResult, McpError> {
        let identity = Identity::of_request(&ctx);
        let host = ctx.client_info();
        let report = WhoamiAnswer {
            identity,
            host: host.as_ref().map(|h| h.name.clone()),
            host_version: host.as_ref().map(|h| h.version.clone()),
            protocol_version: ctx.protocol_version().map(|v| v.to_string()),
        };
        let text = render::render_whoami(&report);
        let mut result = CallToolResult::structured(answer::to_value(&report));
        result.content = vec![ContentBlock::text(text)];
        Ok(result)
    }

    #[tool(
        title = "Read a plan",
        description = "Read a plan: its text, revision and summary figures.",
        output_schema = output_schema::<ReadAnswer>(),
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn werkbaum_read(
        &self,
        Parameters(input): Parameters<ReadInput>,
    ) -> Result<CallToolResult, McpError> {
        respond(self.planner.read(input.source).await)
    }

    #[tool(
        title = "Inspect a plan",
        description = "What a plan means, computed as the Werkbaum editor does: the tree \
                       (statuses, effective statuses, sizes, flags), warnings, the cheapest path \
                       and notices (e.g. the text is not a plan).",
        output_schema = output_schema::<InspectAnswer>(),
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn werkbaum_inspect(
        &self,
        Parameters(input): Parameters<InspectInput>,
    ) -> Result<CallToolResult, McpError> {
        respond(self.planner.inspect(input).await)
    }

    #[tool(
        title = "Check a plan",
        description = "Check a plan; writes nothing. Alone: every warning is a finding \
                       (structural ones block). With `against` (an earlier text): only what is \
                       new, including nodes newly set to [^].",
        output_schema = output_schema::<CheckAnswer>(),
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn werkbaum_check(
        &self,
        Parameters(input): Parameters<CheckInput>,
    ) -> Result<CallToolResult, McpError> {
        respond(self.planner.check(input).await)
    }

    #[tool(
        title = "Set a node's status",
        description = "Set a node's status; only its box changes.",
        output_schema = output_schema::<EditAnswer>(),
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = true,
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
        title = "Apply line operations",
        description = "Apply line operations to text.split(\"\\n\"), in order.",
        output_schema = output_schema::<EditAnswer>(),
        annotations(
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = false,
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
        title = "Replace the whole text",
        description = "Replace the whole plan text with `newText` (prefer the node verbs).",
        output_schema = output_schema::<EditAnswer>(),
        annotations(
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = true,
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
        title = "Add a node",
        description = "Add one node line under `parent`, after the child `after` or last; \
                       indentation is chosen for you.",
        output_schema = output_schema::<EditAnswer>(),
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
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
        title = "Move a node",
        description = "Move a node with its subtree (descriptions and continuation lines \
                       included, re-indented) under `parent`, after `after` or last.",
        output_schema = output_schema::<EditAnswer>(),
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = true,
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
        title = "Set a node's size",
        description = "Set a node's size or remove it (null).",
        output_schema = output_schema::<EditAnswer>(),
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = true,
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
        title = "Remove a node",
        description = "Remove a node: `discard: true` marks it [-]; `discard: false` deletes its \
                       subtree and its description blocks.",
        output_schema = output_schema::<EditAnswer>(),
        annotations(
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = false,
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
        title = "Create a shared plan",
        description = "Create a document on this server (version 1); returns its uuid, version \
                       and checksum. Its [^] nodes count as newly set.",
        output_schema = output_schema::<CreateAnswer>(),
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
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
        title = "Document history",
        description = "List a document's versions, oldest first: time, author (host · user), \
                       what changed and the line operations. Paged: pass `next` as `since` for \
                       more.",
        output_schema = output_schema::<HistoryAnswer>(),
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn werkbaum_history(
        &self,
        Parameters(input): Parameters<HistoryInput>,
    ) -> Result<CallToolResult, McpError> {
        respond(self.planner.history(input).await)
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
        info.instructions = Some(INSTRUCTIONS.to_owned());
        info
    }

    async fn call_tool(
        &self,
        request: rmcp::model::CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, McpError> {
        if let Some(tool) = self.tool_router.get(&request.name)
            && let Some((unknown, accepted)) =
                unknown_arguments(&tool.input_schema, request.arguments.as_ref())
        {
            return Ok(ToolError::UnknownArguments { unknown, accepted }
                .into_result()
                .into());
        }
        let elicits = context
            .client_capabilities()
            .is_some_and(|c| c.elicitation.is_some());
        if !ask::can_ask(context.protocol_version().as_ref(), elicits) {
            let tcc = rmcp::handler::server::tool::ToolCallContext::new(self, request, context);
            return self.tool_router.call(tcc).await;
        }
        // A 2026-07-28 client that can elicit: ask the person where Werkbaum needs them.
        let mut request = request;
        match ask::before_call(&request) {
            Err(why) => return Err(McpError::invalid_params(why, None)),
            Ok(ask::Before::Ask(question)) => return Ok(question.into()),
            Ok(ask::Before::Answer(answer)) => return Ok(answer.into()),
            Ok(ask::Before::Run(arguments)) => request.arguments = arguments,
        }
        let asked = request.clone();
        request.input_responses = None;
        request.request_state = None;
        let tcc = rmcp::handler::server::tool::ToolCallContext::new(self, request, context);
        match self.tool_router.call(tcc).await? {
            rmcp::model::CallToolResponse::Complete(result) => {
                Ok(match ask::after_call(result, &asked) {
                    Ok(result) => result.into(),
                    Err(question) => question.into(),
                })
            }
            other => Ok(other),
        }
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        resources::list(&self.planner).await
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        Ok(resources::templates())
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        resources::read(&self.planner, request).await
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

#[cfg(test)]
mod tests;
