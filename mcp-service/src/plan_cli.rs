//! `mcp-service inspect` and `mcp-service check`: run the Werkbaum core on plan files from a
//! shell or a CI job and print the contract's JSON (pretty).
//!
//! `check FILE` checks the file on its own: every warning is a finding, structural ones
//! (mixedGate, unknownStatus, descStray) block, a duplicate id is reported without blocking
//! (the notation gives it one meaning: the first node keeps the id), and no `[^]` node counts
//! as newly set (there is no before). `check FILE --against OLD` reports only what FILE newly
//! introduces, including nodes newly set to `[^]`.
//!
//! Exit codes: 0 no blocking finding; 3 a blocking finding (the JSON is still printed); 64 a
//! usage error (bad arguments); 1 any other error (unreadable file, the core rejected the call,
//! engine failure), with the reason on stderr.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::{Value, json};

use crate::engine::{CoreSource, Engine, EngineConfig, EngineError};

/// Exit code of `check` when a finding blocks.
pub(crate) const EXIT_BLOCKING: u8 = 3;
/// Exit code of a usage error (EX_USAGE).
pub const EXIT_USAGE: u8 = 64;

/// Arguments of `mcp-service inspect`.
#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// The plan file (`.werkbaum`, UTF-8).
    pub file: PathBuf,
    /// Restrict the tree to the subtree of this node id.
    #[arg(long)]
    pub id: Option<String>,
    /// Sections to include (comma-separated: tree, warnings, path); default all.
    #[arg(long, value_delimiter = ',')]
    pub include: Option<Vec<String>>,
    /// Keep discarded roots in the view (they then count as needed).
    #[arg(long)]
    pub show_discarded: bool,
    /// Use the core bundle in this directory instead of the built-in one.
    #[arg(long, value_name = "DIR")]
    pub core: Option<PathBuf>,
}

/// Arguments of `mcp-service check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The plan file (`.werkbaum`, UTF-8).
    pub file: PathBuf,
    /// The previous version of the plan: report only what FILE newly introduces.
    #[arg(long, value_name = "OLD")]
    pub against: Option<PathBuf>,
    /// New structural warnings do not block.
    #[arg(long)]
    pub allow_warnings: bool,
    /// Nodes newly set to `[^]` do not block.
    #[arg(long)]
    pub allow_prod: bool,
    /// Use the core bundle in this directory instead of the built-in one.
    #[arg(long, value_name = "DIR")]
    pub core: Option<PathBuf>,
}

/// Why a plan command failed; its `Display` is the message for stderr.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PlanCliError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Engine(#[from] EngineError),
}

fn read_plan(path: &Path) -> Result<String, PlanCliError> {
    std::fs::read_to_string(path).map_err(|source| PlanCliError::Read {
        path: path.display().to_string(),
        source,
    })
}

fn start_engine(core: Option<&Path>) -> Result<Engine, PlanCliError> {
    let core = core.map_or(CoreSource::BuiltIn, |d| CoreSource::Dir(d.to_path_buf()));
    Ok(Engine::new(EngineConfig {
        pool_size: 1,
        core,
        ..EngineConfig::default()
    })?)
}

/// Runs `inspect` and returns the contract's result.
pub(crate) async fn inspect_value(args: &InspectArgs) -> Result<Value, PlanCliError> {
    let text = read_plan(&args.file)?;
    let engine = start_engine(args.core.as_deref())?;
    let mut params = json!({ "text": text, "showDiscarded": args.show_discarded });
    if let Some(id) = &args.id {
        params["id"] = json!(id);
    }
    if let Some(include) = &args.include {
        params["include"] = json!(include);
    }
    Ok(engine.call("inspect", params).await?)
}

/// Runs `check` and returns the contract's result.
pub(crate) async fn check_value(args: &CheckArgs) -> Result<Value, PlanCliError> {
    let text = read_plan(&args.file)?;
    let against = args.against.as_deref().map(read_plan).transpose()?;
    let engine = start_engine(args.core.as_deref())?;
    let params = json!({
        "text": text,
        "against": against,
        "allowWarnings": args.allow_warnings,
        "allowProd": args.allow_prod,
    });
    Ok(engine.call("check", params).await?)
}

fn print_json(value: &Value) {
    match serde_json::to_string_pretty(value) {
        Ok(s) => println!("{s}"),
        Err(e) => eprintln!("mcp-service: cannot print the result: {e}"),
    }
}

fn fail(command: &str, file: &Path, error: &PlanCliError) -> ExitCode {
    match error {
        PlanCliError::Engine(EngineError::Core { code, message }) => {
            eprintln!(
                "mcp-service {command}: {}: the core rejected the call: {code}: {message}",
                file.display()
            );
        }
        other => eprintln!("mcp-service {command}: {}: {other}", file.display()),
    }
    ExitCode::FAILURE
}

/// `mcp-service inspect FILE [--id ID] [--core DIR]`.
pub async fn inspect(args: InspectArgs) -> ExitCode {
    match inspect_value(&args).await {
        Ok(value) => {
            print_json(&value);
            ExitCode::SUCCESS
        }
        Err(e) => fail("inspect", &args.file, &e),
    }
}

/// `mcp-service check FILE [--against OLD] [--core DIR]`.
pub async fn check(args: CheckArgs) -> ExitCode {
    match check_value(&args).await {
        Ok(value) => {
            print_json(&value);
            if value["blocking"] == Value::Bool(true) {
                eprintln!(
                    "mcp-service check: {}: blocking findings",
                    args.file.display()
                );
                ExitCode::from(EXIT_BLOCKING)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => fail("check", &args.file, &e),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn temp_file(name: &str, text: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("pforte-plan-cli-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[tokio::test]
    async fn inspect_and_check_a_file() {
        let file = temp_file("a.werkbaum", "R (S)\n  - [ ] #a: A (S)\n  - B (S)\n");
        let args = InspectArgs {
            file: file.clone(),
            id: Some("a".into()),
            include: Some(vec!["tree".into()]),
            show_discarded: false,
            core: None,
        };
        let r = inspect_value(&args).await.unwrap();
        assert_eq!(r["tree"][0]["id"], "a");
        assert_eq!(r["summary"]["warnings"], 1); // sizeConflict: S over S+S

        let old = temp_file("old.werkbaum", "R\n  - A\n");
        let new = temp_file("new.werkbaum", "R\n  - [^] A\n");
        let check = CheckArgs {
            file: new,
            against: Some(old),
            allow_warnings: false,
            allow_prod: false,
            core: None,
        };
        let r = check_value(&check).await.unwrap();
        assert_eq!(r["blocking"], true, "{r}");
        assert_eq!(
            inspect(InspectArgs {
                id: Some("nope".into()),
                ..args
            })
            .await,
            ExitCode::FAILURE
        );
    }

    /// A CI job checking the shared plan files on their own: no `[^]` node is "newly set" and
    /// a duplicate id (upstream's `example-werkbaum` has `#123` on lines 13 and 101) is reported
    /// without blocking, so every fixture exits 0.
    #[tokio::test]
    async fn check_alone_on_every_fixture() {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/werkbaum");
        let Ok(entries) = std::fs::read_dir(&dir) else {
            assert!(
                !std::env::var("CI").is_ok_and(|v| v == "true"),
                "fixtures folder {} is missing",
                dir.display()
            );
            return;
        };
        let mut seen = 0;
        for entry in entries {
            let file = entry.unwrap().path();
            if file.extension().is_none_or(|e| e != "werkbaum") {
                continue;
            }
            seen += 1;
            let name = file.file_name().unwrap().to_string_lossy().into_owned();
            let args = CheckArgs {
                file,
                against: None,
                allow_warnings: false,
                allow_prod: false,
                core: None,
            };
            let r = check_value(&args).await.unwrap();
            assert!(
                r["findings"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|f| f["type"] != "prodStatus"),
                "{name}"
            );
            assert_eq!(check(args).await, ExitCode::SUCCESS, "{name}");
        }
        assert_eq!(seen, 6);
    }

    #[tokio::test]
    async fn errors_are_clear() {
        let args = InspectArgs {
            file: PathBuf::from("/nonexistent/plan.werkbaum"),
            id: None,
            include: None,
            show_discarded: false,
            core: None,
        };
        let err = inspect_value(&args).await.unwrap_err();
        assert!(err.to_string().contains("cannot read"), "{err}");
        let file = temp_file("b.werkbaum", "R\n");
        let err = inspect_value(&InspectArgs {
            file,
            core: Some(PathBuf::from("/nonexistent/core")),
            ..args
        })
        .await
        .unwrap_err();
        assert!(
            matches!(err, PlanCliError::Engine(EngineError::Bundle(_))),
            "{err}"
        );
    }
}
