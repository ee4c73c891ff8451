//! The service's resources: the notation guide and every stored document
//! (`werkbaum://doc/{uuid}`, its version and checksum in `_meta`), listed and read by URI.

use rmcp::{
    ErrorData as McpError,
    model::{
        ListResourceTemplatesResult, ListResourcesResult, MetaObject, ReadResourceRequestParams,
        ReadResourceResponse, ReadResourceResult, Resource, ResourceContents, ResourceTemplate,
    },
};
use serde_json::json;

use crate::{
    guide,
    tools::{DOC_URI_TEMPLATE, Planner, ToolError, doc_uri},
};

/// The guide and every document.
pub(super) async fn list(planner: &Planner) -> Result<ListResourcesResult, McpError> {
    let guide = Resource::new(guide::URI, "guide")
        .with_title("Werkbaum notation guide")
        .with_description("How to read and write Werkbaum plans; read this first.")
        .with_mime_type(guide::MIME)
        .with_size(guide::TEXT.len() as u64);
    let docs = planner
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

/// The template of a document's URI.
pub(super) fn templates() -> ListResourceTemplatesResult {
    let template = ResourceTemplate::new(DOC_URI_TEMPLATE, "werkbaum-document")
        .with_title("Werkbaum plan document")
        .with_description(
            "A shared Werkbaum plan by uuid; version and checksum are in _meta (use them as \
             `base` when writing).",
        )
        .with_mime_type("text/plain");
    ListResourceTemplatesResult::with_all_items(vec![template])
}

/// The guide or a document by URI; anything else is "resource not found".
pub(super) async fn read(
    planner: &Planner,
    request: ReadResourceRequestParams,
) -> Result<ReadResourceResponse, McpError> {
    if request.uri == guide::URI {
        let contents = ResourceContents::text(guide::TEXT, guide::URI).with_mime_type(guide::MIME);
        return Ok(ReadResourceResult::new(vec![contents]).into());
    }
    if let Some(uuid) = request.uri.strip_prefix("werkbaum://doc/") {
        return match planner.document(uuid).await {
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

fn store_failure(e: &ToolError) -> McpError {
    McpError::internal_error(e.to_string(), None)
}
