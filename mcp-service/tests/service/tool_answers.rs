//! Every tool's answer on the shared fixtures (and on prose) validates against the tool's
//! published `outputSchema`, with a JSON Schema validator; `check` without `against` blocks
//! only on structural warnings; the not-a-plan notice shows on prose and on no fixture.
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use mcp_service::for_tests::{
    AddNodeInput, Answer, ApplyOpsInput, Bounds, Caller, CheckInput, CreateInput, Edit,
    HistoryInput, Identity, InspectInput, MoveNodeInput, RemoveNodeInput, SequentialIds,
    SetSizeInput, SetStatusInput, Source, SqliteStore, ToolError, WhoamiAnswer, WriteInput,
    catalog, to_value,
};
use mcp_service::{Engine, EngineConfig, EngineError, Planner};
use pforte_clock::ManualClock;
use serde_json::{Value, json};

const PROSE: &str = "hello world\nthis is a letter to a friend, not a plan.\n";

fn fixtures() -> Vec<(String, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/werkbaum");
    if !dir.is_dir() {
        assert!(
            !std::env::var("CI").is_ok_and(|v| v == "true"),
            "fixtures folder {} is missing (required when CI=true)",
            dir.display()
        );
        eprintln!("fixtures folder {} is absent", dir.display());
        return Vec::new();
    }
    let mut out: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "werkbaum"))
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read_to_string(&p).unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

fn planner() -> Planner {
    Planner::new(
        Engine::new(EngineConfig::default()).unwrap(),
        Arc::new(SqliteStore::in_memory().unwrap()),
        Arc::new(ManualClock::at(Duration::from_millis(1_700_000_000_000))),
        Arc::new(SequentialIds::default()),
        4 << 20,
    )
}

/// Validates a tool's structured answer (or error payload) against its published schema.
fn validate(tool: &str, structured: &Value) {
    let router = catalog();
    let schema = router
        .get(tool)
        .unwrap_or_else(|| panic!("no tool {tool}"))
        .output_schema
        .clone()
        .unwrap_or_else(|| panic!("{tool} has no outputSchema"));
    let schema = Value::Object(schema.as_ref().clone());
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(structured)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{tool}: {errors:?}\n{}",
        &structured.to_string()[..structured.to_string().len().min(2000)]
    );
}

fn ok(tool: &str, r: Result<Answer, ToolError>) -> Value {
    let a = r.unwrap_or_else(|e| panic!("{tool}: {e}"));
    validate(tool, &a.structured);
    a.structured
}

fn first_leaf_line(tree: &Value) -> u64 {
    let mut stack: Vec<&Value> = tree.as_array().unwrap().iter().collect();
    while let Some(n) = stack.pop() {
        let children = n["children"].as_array().unwrap();
        if children.is_empty() && n["statusCode"] != "-" {
            return n["line"].as_u64().unwrap();
        }
        stack.extend(children.iter().rev());
    }
    panic!("no leaf")
}

async fn edit(p: &Planner, tool: &str, args: Value, caller: &Caller) -> Result<Answer, ToolError> {
    match tool {
        "werkbaum_set_status" => {
            let i: SetStatusInput = serde_json::from_value(args).unwrap();
            let e = Edit::SetStatus {
                id: i.id,
                status: i.status,
            };
            p.edit(i.common, e, caller).await
        }
        "werkbaum_set_size" => {
            let i: SetSizeInput = serde_json::from_value(args).unwrap();
            let e = Edit::SetSize {
                id: i.id,
                size: i.size,
            };
            p.edit(i.common, e, caller).await
        }
        "werkbaum_add_node" => {
            let i: AddNodeInput = serde_json::from_value(args).unwrap();
            let e = Edit::AddNode {
                parent: i.parent,
                line: i.line,
                after: i.after,
            };
            p.edit(i.common, e, caller).await
        }
        "werkbaum_move_node" => {
            let i: MoveNodeInput = serde_json::from_value(args).unwrap();
            let e = Edit::MoveNode {
                id: i.id,
                parent: i.parent,
                after: i.after,
            };
            p.edit(i.common, e, caller).await
        }
        "werkbaum_remove_node" => {
            let i: RemoveNodeInput = serde_json::from_value(args).unwrap();
            let e = Edit::RemoveNode {
                id: i.id,
                discard: i.discard,
            };
            p.edit(i.common, e, caller).await
        }
        "werkbaum_apply_ops" => {
            let i: ApplyOpsInput = serde_json::from_value(args).unwrap();
            p.edit(i.common, Edit::ApplyOps(i.ops), caller).await
        }
        "werkbaum_write" => {
            let i: WriteInput = serde_json::from_value(args).unwrap();
            p.edit(i.common, Edit::Write(i.new_text), caller).await
        }
        other => panic!("not an edit tool: {other}"),
    }
}

fn source(text: &str) -> Source {
    serde_json::from_value(json!({ "text": text })).unwrap()
}

#[tokio::test]
async fn every_answer_validates_against_its_output_schema() {
    let p = planner();
    let caller = Caller::new(Some("Claude Code"), Some("alice"), Some("c-1"));
    let mut texts = fixtures();
    texts.push(("prose".to_owned(), PROSE.to_owned()));
    texts.push(("tiny".to_owned(), "R\n  - [ ] A (S)\n".to_owned()));
    for (name, text) in &texts {
        ok("werkbaum_read", p.read(source(text)).await);
        let i: InspectInput = serde_json::from_value(json!({"text": text})).unwrap();
        let inspected = ok("werkbaum_inspect", p.inspect(i).await);
        let i: InspectInput =
            serde_json::from_value(json!({"text": text, "include": ["warnings"]})).unwrap();
        ok("werkbaum_inspect", p.inspect(i).await);
        for args in [
            json!({"text": text}),
            json!({"text": text, "against": text}),
        ] {
            let i: CheckInput = serde_json::from_value(args).unwrap();
            ok("werkbaum_check", p.check(i).await);
        }
        let leaf = first_leaf_line(&inspected["tree"]);
        let edits = [
            ("werkbaum_set_status", json!({"id": leaf, "status": "done"})),
            ("werkbaum_set_size", json!({"id": leaf, "size": "XS"})),
            (
                "werkbaum_add_node",
                json!({"parent": leaf, "line": "- [ ] child (S) #t-child"}),
            ),
            ("werkbaum_move_node", json!({"id": leaf, "parent": null})),
            ("werkbaum_remove_node", json!({"id": leaf, "discard": true})),
            (
                "werkbaum_apply_ops",
                json!({"ops": [{"op": "insert", "index": 0, "lines": ["%% t"]}]}),
            ),
            (
                "werkbaum_write",
                json!({"newText": format!("{text}%% t\n")}),
            ),
        ];
        // Text form.
        for (tool, args) in &edits {
            let mut a = args.clone();
            a["text"] = json!(text);
            a["allowWarnings"] = json!(true);
            a["allowProd"] = json!(true);
            ok(tool, edit(&p, tool, a, &caller).await);
        }
        // Document form.
        let c: CreateInput = serde_json::from_value(
            json!({"title": name, "text": text, "allowWarnings": true, "allowProd": true}),
        )
        .unwrap();
        let created = ok("werkbaum_create", p.create(c, &caller).await);
        let doc = created["document"].as_str().unwrap().to_owned();
        let mut base = json!({"version": 1, "checksum": created["checksum"]});
        let doc_source: Source = serde_json::from_value(json!({ "document": doc })).unwrap();
        ok("werkbaum_read", p.read(doc_source).await);
        for (tool, args) in &edits {
            let mut a = args.clone();
            a["document"] = json!(doc);
            a["base"] = base.clone();
            a["allowWarnings"] = json!(true);
            a["allowProd"] = json!(true);
            let r = ok(tool, edit(&p, tool, a, &caller).await);
            base = json!({"version": r["version"], "checksum": r["checksum"]});
        }
        // A no-op edit: not written, still a valid answer.
        let mut a = json!({"ops": []});
        a["document"] = json!(doc);
        a["base"] = base.clone();
        let r = ok(
            "werkbaum_apply_ops",
            edit(&p, "werkbaum_apply_ops", a, &caller).await,
        );
        assert_eq!(r["written"], false);
        // A stale base: the error payload validates too.
        let mut a = json!({"id": 1, "status": "x"});
        a["document"] = json!(doc);
        a["base"] = json!({"version": 1, "checksum": "stale"});
        let e = edit(&p, "werkbaum_set_status", a, &caller)
            .await
            .unwrap_err();
        validate("werkbaum_set_status", &e.payload());
        let h: HistoryInput = serde_json::from_value(json!({ "document": doc })).unwrap();
        ok("werkbaum_history", p.history(h).await);
    }
    let me = WhoamiAnswer {
        identity: Identity {
            subject: Some("alice".into()),
            client: Some("c-1".into()),
            client_name: Some("Claude".into()),
            auth_kind: Some("oauth".into()),
            scopes: vec!["mcp:read".into()],
            request_id: None,
        },
        host: Some("Claude Code".into()),
        host_version: Some("1".into()),
        protocol_version: None,
    };
    validate("whoami", &to_value(&me));
}

#[tokio::test]
async fn check_alone_blocks_only_on_structure_and_no_node_is_newly_prod() {
    let p = planner();
    for (name, text) in fixtures() {
        let i: CheckInput = serde_json::from_value(json!({ "text": text })).unwrap();
        let r = p.check(i).await.unwrap().structured;
        assert!(
            r["findings"]
                .as_array()
                .unwrap()
                .iter()
                .all(|f| f["type"] != "prodStatus"),
            "{name}: {r}"
        );
        let blocking: Vec<&Value> = r["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["blocking"] == true)
            .collect();
        // Upstream's own example has a real duplicate id (#123 on lines 13 and 101): on its own
        // it is reported, not blocking.
        assert!(blocking.is_empty(), "{name}: {blocking:?}");
        assert_eq!(r["blocking"], false, "{name}");
        // Content warnings are still reported.
        assert_eq!(
            r["findings"].as_array().unwrap().len(),
            r["warnings"].as_array().unwrap().len(),
            "{name}"
        );
    }
    // A [^] node in a text on its own is not "newly set"; in a new document it is.
    let text = "R\n  - [^] A (S)\n";
    let i: CheckInput = serde_json::from_value(json!({ "text": text })).unwrap();
    assert_eq!(p.check(i).await.unwrap().structured["blocking"], false);
    let caller = Caller::new(None, None, None);
    let c: CreateInput = serde_json::from_value(json!({"title": "t", "text": text})).unwrap();
    let e = p.create(c, &caller).await.unwrap_err();
    assert_eq!(e.code(), "blocked");
}

#[tokio::test]
async fn prose_gets_a_notice_and_no_fixture_does() {
    let p = planner();
    for (name, text) in fixtures() {
        let i: InspectInput = serde_json::from_value(json!({ "text": text })).unwrap();
        let r = p.inspect(i).await.unwrap().structured;
        assert_eq!(r["notices"], json!([]), "{name}");
        let i: CheckInput = serde_json::from_value(json!({ "text": text })).unwrap();
        assert_eq!(
            p.check(i).await.unwrap().structured["notices"],
            json!([]),
            "{name}"
        );
    }
    let i: InspectInput = serde_json::from_value(json!({ "text": PROSE })).unwrap();
    let a = p.inspect(i).await.unwrap();
    let r = a.structured;
    assert_eq!(r["notices"][0]["type"], "notAPlan", "{r}");
    assert_eq!(r["warnings"], json!([]), "warnings stay upstream's");
    assert!(a.text.contains("notice notAPlan"), "{}", a.text);
    let i: CheckInput = serde_json::from_value(json!({ "text": PROSE })).unwrap();
    let a = p.check(i).await.unwrap();
    assert_eq!(a.structured["notices"][0]["type"], "notAPlan");
    assert!(
        a.text.contains("not look like a Werkbaum plan"),
        "{}",
        a.text
    );
}

#[test]
fn the_schemas_reject_what_they_do_not_describe() {
    let router = catalog();
    let schema = |tool: &str| {
        Value::Object(
            router
                .get(tool)
                .unwrap()
                .output_schema
                .clone()
                .unwrap()
                .as_ref()
                .clone(),
        )
    };
    let read = jsonschema::validator_for(&schema("werkbaum_read")).unwrap();
    assert!(!read.is_valid(&json!({"revision": {"checksum": 1}, "summary": {}, "text": "x"})));
    assert!(!read.is_valid(&json!({"text": "x"})));
    assert!(read.is_valid(&json!({"error": {"code": "conflict", "message": "m"}})));
    let inspect = jsonschema::validator_for(&schema("werkbaum_inspect")).unwrap();
    let bad_node = json!({
        "revision": {"checksum": "c"},
        "summary": {"nodes": 1, "warnings": 0, "needed": 1, "stations": 1, "exact": true},
        "tree": [{"line": "one"}],
        "notices": [],
    });
    assert!(!inspect.is_valid(&bad_node));
}

/// `werkbaum_history` pages (`since`, `limit`, `next`), refuses a `limit` over the maximum,
/// and `werkbaum_create` refuses a document beyond the instance's cap; every answer and error
/// validates against the tool's schema.
#[tokio::test]
async fn history_pages_and_the_document_cap_holds() {
    let p = planner().with_bounds(Bounds {
        max_documents: 2,
        history_page: 2,
        history_page_max: 3,
    });
    let caller = Caller::new(Some("Claude Code"), Some("alice"), None);
    let create = |title: &str| {
        serde_json::from_value::<CreateInput>(json!({"title": title, "text": "- [ ] R\n"})).unwrap()
    };
    let created = ok("werkbaum_create", p.create(create("A"), &caller).await);
    let doc = created["document"].as_str().unwrap().to_owned();
    let mut base = json!({"version": 1, "checksum": created["checksum"]});
    for k in 0..4 {
        let a =
            json!({"document": doc, "base": base, "newText": format!("- [ ] R\n  - [ ] k{k}\n")});
        let r = ok(
            "werkbaum_write",
            edit(&p, "werkbaum_write", a, &caller).await,
        );
        base = json!({"version": r["version"], "checksum": r["checksum"]});
    }
    // Five versions: pages of the default two, then of three, following `next`.
    let page = |args: Value| {
        let p = &p;
        async move {
            let h: HistoryInput = serde_json::from_value(args).unwrap();
            let a = p.history(h).await;
            let text = a.as_ref().map(|a| a.text.clone()).unwrap_or_default();
            (ok("werkbaum_history", a), text)
        }
    };
    let versions = |v: &Value| -> Vec<u64> {
        v["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["version"].as_u64().unwrap())
            .collect()
    };
    let (first, text) = page(json!({"document": doc})).await;
    assert_eq!(versions(&first), [1, 2]);
    assert_eq!(first["next"], 2);
    assert!(text.contains("since = 2"), "{text}");
    let (second, _) = page(json!({"document": doc, "since": 2, "limit": 3})).await;
    assert_eq!(versions(&second), [3, 4, 5]);
    assert!(second.get("next").is_none(), "{second}");
    let (last, _) = page(json!({"document": doc, "since": 4, "limit": 3})).await;
    assert_eq!(versions(&last), [5]);
    assert!(last.get("next").is_none());
    for limit in [0, 4, 101] {
        let h: HistoryInput =
            serde_json::from_value(json!({"document": doc, "limit": limit})).unwrap();
        let e = p.history(h).await.unwrap_err();
        assert_eq!(e.code(), "invalidInput");
        assert!(e.to_string().contains("`limit` must be 1..=3"), "{e}");
        validate("werkbaum_history", &e.payload());
    }
    // The cap: a second document fits, a third is refused clearly and nothing is stored.
    ok("werkbaum_create", p.create(create("B"), &caller).await);
    let e = p.create(create("C"), &caller).await.unwrap_err();
    assert_eq!(e.code(), "tooManyDocuments");
    assert!(e.to_string().contains("limit of 2 documents"), "{e}");
    assert_eq!(e.payload()["error"]["limit"], 2);
    validate("werkbaum_create", &e.payload());
    assert_eq!(p.list_documents().await.unwrap().len(), 2);
    let r = e.into_result();
    assert_eq!(r.is_error, Some(true));
}

/// A full engine queue is the tool error `busy` (isError, "retry"), like every tool failure.
#[test]
fn a_busy_engine_is_a_retryable_tool_error() {
    let e = ToolError::from(EngineError::Busy(64));
    assert_eq!(e.code(), "busy");
    assert!(
        e.to_string().contains("busy") && e.to_string().contains("retry"),
        "{e}"
    );
    assert_eq!(e.payload()["error"]["retry"], true);
    validate("werkbaum_read", &e.payload());
    assert_eq!(e.into_result().is_error, Some(true));
}
