//! `mcp-service doc import|export|list`: operator commands on the configured document store
//! (they work while the service runs: SQLite in WAL mode takes several processes).
//!
//! Exit codes: 0 ok; 1 store or engine failure; 65 bad input (unreadable or non-UTF-8 file,
//! text over the cap, refused by the guard rails); 66 unknown document.

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
    Export { uuid: String },
    /// List documents: uuid, version, checksum prefix, title.
    List,
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

/// Runs a `doc` command against the store of `cfg`.
pub async fn run(cmd: DocCommand, cfg: &ServiceConfig) -> ExitCode {
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
                    ExitCode::SUCCESS
                }
                Err(e) => fail(tool_exit(&e), e),
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
            Err(e) => fail(tool_exit(&e), e),
        },
        DocCommand::List => match planner.list_documents().await {
            Ok(docs) => {
                for d in docs {
                    println!(
                        "{}\tv{}\t{}\t{}",
                        d.uuid,
                        d.version,
                        &d.checksum[..d.checksum.len().min(12)],
                        d.title
                    );
                }
                ExitCode::SUCCESS
            }
            Err(e) => fail(tool_exit(&e), e),
        },
    }
}
