//! `pforte tools pending` and `pforte tools approve`: the pinned tool definitions (`pins.rs`)
//! whose last seen definition is not the approved one, with a readable diff, and their
//! approval — on the same store a running gateway uses, which picks an approval up within
//! `pins::RELOAD`. Each approval is an audit line.

use serde_json::json;

use super::{CmdResult, Failure, admin::ListArgs};
use crate::{
    audit::{AuditLog, PinRecord},
    cli,
    pins::{self, Pin, PinStore, Which, diff},
};

/// `pforte tools …`.
#[derive(clap::Subcommand, Clone)]
pub enum ToolsAction {
    /// List tools whose definition changed since it was approved (or new ones held), with the
    /// change field by field.
    Pending {
        #[command(flatten)]
        list: ListArgs,
    },
    /// Approve a route's tool as it is now defined (or, with --all, every pending tool of the
    /// route).
    Approve {
        /// The route (`mcp` for `[upstream]`).
        route: String,
        /// The tool's name.
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        tool: Option<String>,
        /// Every pending tool of ROUTE.
        #[arg(long)]
        all: bool,
    },
}

/// Runs `action` on `store` at `now` (ms); approvals go to `audit`.
pub(crate) fn run(
    store: &dyn PinStore,
    action: ToolsAction,
    now: u64,
    audit: Option<&AuditLog>,
) -> CmdResult {
    let unavailable = |e: crate::pins::PinStoreError| Failure::Unavailable(e.to_string());
    match action {
        ToolsAction::Pending { list } => {
            let all = store.list().map_err(unavailable)?;
            let mut pinned: std::collections::BTreeMap<&str, usize> = Default::default();
            for pin in &all {
                *pinned.entry(pin.route.as_str()).or_default() += 1;
            }
            let pinned: Vec<String> = pinned.iter().map(|(r, n)| format!("{r} {n}")).collect();
            let pending: Vec<&Pin> = all.iter().filter(|p| p.pending()).collect();
            print_pending(list, &pending, &pinned.join(", "))
        }
        ToolsAction::Approve { route, tool, all } => {
            let which = match tool.as_deref() {
                Some(tool) if !all => Which::Tool(tool),
                _ => Which::All,
            };
            let approved = pins::approve(store, &route, which, now).map_err(unavailable)?;
            for pin in &approved {
                println!(
                    "approved tool {} of route {route}",
                    crate::logging::untrusted(&pin.tool)
                );
                if let Some(log) = audit {
                    log.record(&PinRecord::approved(pin, now, "cli"));
                }
            }
            if approved.is_empty() {
                return Err(Failure::Other(anyhow::anyhow!(
                    "nothing pending for route {route}{}",
                    if all {
                        String::new()
                    } else {
                        format!(", tool {}", tool.as_deref().unwrap_or_default())
                    }
                )));
            }
            Ok(())
        }
    }
}

/// The pending changes (`pinned`: how many tools each route has pinned, said when none is
/// pending).
fn print_pending(list: ListArgs, pending: &[&Pin], pinned: &str) -> CmdResult {
    if list.json {
        let rows: Vec<serde_json::Value> = pending
            .iter()
            .map(|p| {
                json!({
                    "route": p.route,
                    "tool": p.tool,
                    "new": p.approved.is_none(),
                    "seen_at": cli::rfc3339(p.seen_ms / 1000),
                    "approved_sha256": p.approved.as_deref().map(crate::pins::digest),
                    "seen_sha256": crate::pins::digest(&p.seen),
                    "changes": diff::diff(p.approved.as_deref(), &p.seen),
                })
            })
            .collect();
        let text = serde_json::to_string_pretty(&rows).map_err(|e| Failure::Other(e.into()))?;
        println!("{text}");
        return Ok(());
    }
    if pending.is_empty() {
        println!("no tool changes pending (tools pinned per route: {pinned})");
        return Ok(());
    }
    for p in pending {
        let what = if p.approved.is_none() {
            "new, not approved yet"
        } else {
            "changed"
        };
        println!(
            "route {}, tool {}: {what} (seen {})",
            crate::logging::untrusted(&p.route),
            crate::logging::untrusted(&p.tool),
            cli::rfc3339(p.seen_ms / 1000)
        );
        print!(
            "{}",
            diff::render(&diff::diff(p.approved.as_deref(), &p.seen))
        );
        println!(
            "  approve: pforte tools approve {} {}",
            p.route,
            crate::logging::untrusted(&p.tool)
        );
    }
    Ok(())
}
