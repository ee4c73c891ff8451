//! `mcp-service doc import|export|list`: operator commands on the configured document store
//! (they work while the service runs: SQLite in WAL mode takes several processes).
//!
//! Exit codes: 0 ok; 1 store or engine failure; 65 bad input (unreadable or non-UTF-8 file,
//! text over the cap, refused by the guard rails); 66 unknown document, or no store in the data
//! dir (`list` and `export` create nothing; `import` may create a store and says so).
//! `pforte up` keeps its documents in `<its data dir>/service`.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::config::ServiceConfig;
use crate::identity::Identity;
use crate::tools::{Caller, ToolError, input::Allow, input::CreateInput};

/// Arguments of `mcp-service doc`.
#[derive(Debug, clap::Subcommand)]
pub enum DocCommand {
    /// Store a plan file as a new document; prints its uuid.
    Import {
        /// The plan file (UTF-8).
        file: PathBuf,
        /// The document's title.
        #[arg(long)]
        title: String,
        /// Import even with structural warnings or `[^]` nodes (existing plans often have them).
        #[arg(long)]
        force: bool,
    },
    /// Print a document's text, byte-exact.
    Export {
        /// The document's uuid, as `doc list` shows it.
        uuid: String,
    },
    /// List documents sorted by title: title, version, last update (UTC), uuid.
    List {
        /// Print a JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
}

fn fail(code: u8, msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("mcp-service doc: {msg}");
    ExitCode::from(code)
}

fn tool_exit(e: &ToolError) -> u8 {
    match e {
        ToolError::UnknownDocument(_) => 66,
        ToolError::Store(_) | ToolError::Engine(_) => 1,
        _ => 65,
    }
}

/// A tool error in CLI words: flags instead of tool arguments, commands instead of MCP methods.
fn cli_message(e: &ToolError) -> String {
    match e {
        ToolError::UnknownDocument(id) => {
            format!("no document {id} in this store (`mcp-service doc list` shows them)")
        }
        ToolError::Blocked { summary, .. } => format!(
            "blocked by guard rails: {summary}; nothing was written (pass --force to import \
             anyway, if that is really intended)"
        ),
        other => other.to_string(),
    }
}

/// `2026-12-01 19:03Z` for Unix seconds (UTC).
pub(crate) fn utc_minute(secs: u64) -> String {
    let t = pforte_clock::UtcDateTime::from_unix_secs(secs);
    format!("{} {:02}:{:02}Z", t.date(), t.hour, t.minute)
}

/// The `doc list` table: sorted by title (then uuid), a header, aligned columns.
pub(crate) fn list_table(docs: &mut [crate::store::DocumentSummary]) -> String {
    if docs.is_empty() {
        return "no documents\n".to_owned();
    }
    docs.sort_by(|a, b| a.title.cmp(&b.title).then_with(|| a.uuid.cmp(&b.uuid)));
    let rows: Vec<[String; 4]> = docs
        .iter()
        .map(|d| {
            [
                d.title.clone(),
                format!("v{}", d.version),
                utc_minute(d.updated_at / 1000),
                d.uuid.clone(),
            ]
        })
        .collect();
    let header = ["title", "version", "updated", "uuid"].map(str::to_owned);
    let mut widths = [0usize; 4];
    for row in std::iter::once(&header).chain(&rows) {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        for (i, cell) in row.iter().enumerate() {
            out.push_str(cell);
            if i < 3 {
                out.push_str(&" ".repeat(widths[i] - cell.chars().count() + 2));
            }
        }
        out.push('\n');
    }
    out
}

/// Runs a `doc` command against the store of `cfg`.
pub async fn run(cmd: DocCommand, cfg: &ServiceConfig) -> ExitCode {
    let embedded = cfg.store == crate::config::StoreKind::Sqlite;
    let missing = embedded && !cfg.data_dir.join(crate::app::SQLITE_FILE).is_file();
    if missing && !matches!(cmd, DocCommand::Import { .. }) {
        return fail(
            66,
            format!(
                "no document store at {} — pass the --data-dir the service uses (`pforte up` \
                 keeps its documents in <its data dir>/service)",
                cfg.data_dir.display()
            ),
        );
    }
    let planner = match crate::app::planner(cfg) {
        Ok(p) => p,
        Err(e) => return fail(1, e),
    };
    match cmd {
        DocCommand::Import { file, title, force } => {
            let bytes = match std::fs::read(&file) {
                Ok(b) => b,
                Err(e) => return fail(65, format!("cannot read {}: {e}", file.display())),
            };
            let text = match String::from_utf8(bytes) {
                Ok(t) => t,
                Err(e) => {
                    return fail(
                        65,
                        format!(
                            "{} is not UTF-8 (invalid byte at offset {})",
                            file.display(),
                            e.utf8_error().valid_up_to()
                        ),
                    );
                }
            };
            let who = Identity::operator_shell(|k| std::env::var(k).ok());
            let caller = Caller::new(Some("mcp-service doc import"), who.subject.as_deref(), None);
            let input = CreateInput {
                title,
                text,
                allow: Allow {
                    allow_warnings: force,
                    allow_prod: force,
                },
            };
            match planner.create(input, &caller).await {
                Ok(answer) => {
                    println!("{}", answer.structured["document"].as_str().unwrap_or(""));
                    if missing {
                        eprintln!(
                            "mcp-service doc: created a new, empty store at {}; no service uses \
                             it yet",
                            cfg.data_dir.display()
                        );
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => fail(tool_exit(&e), cli_message(&e)),
            }
        }
        DocCommand::Export { uuid } => match planner.document(&uuid).await {
            Ok(doc) => {
                use std::io::Write as _;
                let mut out = std::io::stdout().lock();
                if let Err(e) = out
                    .write_all(doc.text.as_bytes())
                    .and_then(|()| out.flush())
                {
                    return fail(1, format!("writing stdout: {e}"));
                }
                ExitCode::SUCCESS
            }
            Err(e) => fail(tool_exit(&e), cli_message(&e)),
        },
        DocCommand::List { json } => match planner.list_documents().await {
            Ok(mut docs) => {
                if json {
                    docs.sort_by(|a, b| a.title.cmp(&b.title).then_with(|| a.uuid.cmp(&b.uuid)));
                    let list: Vec<_> = docs
                        .iter()
                        .map(|d| {
                            serde_json::json!({
                                "uuid": d.uuid,
                                "title": d.title,
                                "version": d.version,
                                "checksum": d.checksum,
                                "updated_at_ms": d.updated_at,
                            })
                        })
                        .collect();
                    println!("{}", serde_json::Value::from(list));
                } else {
                    print!("{}", list_table(&mut docs));
                }
                ExitCode::SUCCESS
            }
            Err(e) => fail(tool_exit(&e), cli_message(&e)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::DocumentSummary;

    fn doc(uuid: &str, title: &str, version: u64) -> DocumentSummary {
        DocumentSummary {
            uuid: uuid.into(),
            title: title.into(),
            version,
            checksum: "abc".into(),
            updated_at: 1_796_151_787_000,
        }
    }

    #[test]
    fn list_is_a_table_sorted_by_title() {
        let mut docs = vec![doc("u1", "Zeta", 2), doc("u2", "Alpha plan", 10)];
        assert_eq!(
            list_table(&mut docs),
            "title       version  updated            uuid\n\
             Alpha plan  v10      2026-12-01 19:03Z  u2\n\
             Zeta        v2       2026-12-01 19:03Z  u1\n"
        );
        assert_eq!(list_table(&mut []), "no documents\n");
    }

    #[test]
    fn messages_name_cli_flags() {
        let e = ToolError::UnknownDocument("nosuch".into());
        assert!(!cli_message(&e).contains("resources/list"));
        let e = ToolError::Blocked {
            summary: "2 warnings".into(),
            findings: serde_json::Value::Null,
            revision: serde_json::Value::Null,
        };
        let m = cli_message(&e);
        assert!(m.contains("--force") && !m.contains("allowWarnings"), "{m}");
    }
}
