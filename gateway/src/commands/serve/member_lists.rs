//! What `pforte check` asks the member routes of `[[virtual]]` servers for itself: each one's
//! `prompts/list` and `resources/list` (first pages), on a session of its own opened as the
//! gateway's tool catalog opens one (the route's shared credential and identity headers), 3 s
//! per request. A member that takes each person's own credential, or that does not answer
//! (down; a command route while no gateway runs its bridge), is not asked, and `check` says so.
//! The tools come from the pins store instead (`virtuals::recorded`).

use std::{collections::BTreeMap, time::Duration};

use serde_json::{Value, json};

use crate::{
    catalog::{Catalog, CatalogOptions},
    config::Settings,
    credentials::shared_header,
};

/// How long `check` waits for one answer of a member.
const ASK_TIMEOUT: Duration = Duration::from_secs(3);

/// One member route's prompts and resources as it answered.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Listed {
    pub(super) prompts: Vec<Value>,
    pub(super) resources: Vec<Value>,
}

/// The member routes of every virtual server `s` has, each asked once: its lists, or why not.
pub(super) fn ask_members(s: &Settings) -> BTreeMap<String, Result<Listed, String>> {
    let mut out = BTreeMap::new();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            for v in &s.virtuals {
                for m in &v.server.members {
                    out.insert(m.route.clone(), Err(e.to_string()));
                }
            }
            return out;
        }
    };
    for v in &s.virtuals {
        for m in &v.server.members {
            if out.contains_key(&m.route) {
                continue;
            }
            let asked = match s.route_named(&m.route).map(|i| &s.routes[i]) {
                None => Err("no such route".to_owned()),
                Some(r) if r.upstream_auth.as_ref().is_some_and(|a| a.per_user()) => {
                    Err("it takes each person's own credential".to_owned())
                }
                Some(r) => runtime.block_on(ask(r)),
            };
            out.insert(m.route.clone(), asked);
        }
    }
    out
}

/// Route `r`'s prompts and resources, asked on a session of its own.
async fn ask(r: &crate::config::Route) -> Result<Listed, String> {
    let upstream = r.upstream.primary();
    let catalog = Catalog::new(
        upstream.http_url(),
        CatalogOptions {
            unix_socket: upstream.socket.clone(),
            ca_file: r.upstream.ca_file().map(std::path::Path::to_path_buf),
            header: shared_header(r)
                .map_err(|e| e.to_string())?
                .map(|h| (h.name, h.value)),
            identity: r.identity_headers,
            request_timeout: ASK_TIMEOUT,
            ..CatalogOptions::default()
        },
    )
    .map_err(|e| e.to_string())?;
    let session = catalog
        .open_member_session(&[], ASK_TIMEOUT)
        .await
        .map_err(|e| e.to_string())?;
    let mut listed = Listed::default();
    for (n, (method, key)) in [("prompts/list", "prompts"), ("resources/list", "resources")]
        .into_iter()
        .enumerate()
    {
        let id = json!(n + 2);
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method}).to_string();
        let answer = catalog
            .member_request(session.as_deref(), body.into_bytes(), &id, &[], ASK_TIMEOUT)
            .await;
        // A member that serves none answers with an error: an empty list.
        let items = match answer {
            Ok((mut answer, _)) => match answer["result"][key].take() {
                Value::Array(items) => items,
                _ => Vec::new(),
            },
            Err(e) => return Err(e.to_string()),
        };
        match key {
            "prompts" => listed.prompts = items,
            _ => listed.resources = items,
        }
    }
    if let Some(id) = session {
        catalog.end_member_session(&id, &[]).await;
    }
    Ok(listed)
}
