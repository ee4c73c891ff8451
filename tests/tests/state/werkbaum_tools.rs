//! Werkbaum over MCP through the gateway with an rmcp client: every tool in text and document
//! form on the shared fixture plans, revision stamps, guard rails, conflicts, attribution,
//! resources, prompts, read-only mode and precise errors for bad input. Every answer of the
//! fixtures test is validated against the tool's published `outputSchema`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::werkbaum_support::{
    Client, Werkbaum, base_of, call, create, fixture, ids, sha256, try_call,
};
use rmcp::model::{
    GetPromptRequestParams, ListResourceTemplatesResult, ReadResourceRequestParams,
    ResourceContents,
};
use serde_json::{Value, json};

/// The published output schemas of the session's tools, as validators.
async fn validators(c: &Client) -> std::collections::HashMap<String, jsonschema::Validator> {
    c.list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| {
            let schema = Value::Object(t.output_schema.expect("an outputSchema").as_ref().clone());
            (
                t.name.to_string(),
                jsonschema::validator_for(&schema).unwrap(),
            )
        })
        .collect()
}

/// `call(…).ok()`, with the answer validated against the tool's `outputSchema`.
async fn vcall(
    c: &Client,
    v: &std::collections::HashMap<String, jsonschema::Validator>,
    tool: &str,
    args: Value,
) -> Value {
    let r = call(c, tool, args).await.ok();
    let errors: Vec<String> = v[tool].iter_errors(&r).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{tool}: {errors:?}");
    r
}

/// The figures issue 4 fixes for the shared fixtures: nodes, warnings, needed, stations.
const FIGURES: [(&str, u64, u64, u64, u64); 6] = [
    ("werkbaum.werkbaum", 233, 0, 188, 30),
    ("example-werkbaum.werkbaum", 104, 3, 80, 21),
    ("example-plan-0.werkbaum", 19, 0, 16, 5),
    ("example-plan-1.werkbaum", 26, 1, 20, 11),
    ("example-plan-2.werkbaum", 43, 1, 40, 16),
    ("example-plan-3.werkbaum", 28, 1, 22, 11),
];

const PLAN: &str = "- [ ] Login feature (L) #login\n  - [ ] Design the form (S) #form\n  - [~] API endpoint (M) #api\n- [x] Setup (XS) #setup\n";

/// A leaf to edit, addressed by id when it has one, else by its line number; and its line.
fn first_leaf(tree: &Value) -> (Value, Value) {
    let mut stack: Vec<&Value> = tree.as_array().unwrap().iter().collect();
    let mut fallback = None;
    while let Some(n) = stack.pop() {
        if n["children"].as_array().unwrap().is_empty() {
            if n["id"].is_string() {
                return (n["id"].clone(), n["line"].clone());
            }
            fallback.get_or_insert_with(|| (n["line"].clone(), n["line"].clone()));
        }
        stack.extend(n["children"].as_array().unwrap().iter());
    }
    fallback.expect("a leaf")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tool_in_both_forms_on_the_fixtures() {
    let Some(_) = super::werkbaum_support::fixtures() else {
        return;
    };
    let stack = Werkbaum::start(&[]).await;
    let c = stack.client().await;
    let v = validators(&c).await;
    vcall(&c, &v, "whoami", json!({})).await;
    for (name, nodes, warnings, needed, stations) in FIGURES {
        let text = fixture(name).unwrap();
        let sum = sha256(&text);
        // --- reading tools, text form: stamped with the input's checksum.
        let r = vcall(&c, &v, "werkbaum_read", json!({"text": text})).await;
        assert_eq!(r["revision"], json!({"checksum": sum}), "{name}");
        let r = vcall(&c, &v, "werkbaum_inspect", json!({"text": text})).await;
        let s = &r["summary"];
        assert_eq!(
            (
                s["nodes"].as_u64(),
                s["warnings"].as_u64(),
                s["needed"].as_u64(),
                s["stations"].as_u64(),
                s["exact"].as_bool()
            ),
            (
                Some(nodes),
                Some(warnings),
                Some(needed),
                Some(stations),
                Some(true)
            ),
            "{name}"
        );
        assert_eq!(r["revision"]["checksum"], sum);
        let tree = r["tree"].clone();
        let (leaf, leaf_line) = first_leaf(&tree);
        let r = vcall(
            &c,
            &v,
            "werkbaum_check",
            json!({"text": text, "against": text}),
        )
        .await;
        assert_eq!(
            r["findings"],
            json!([]),
            "{name}: nothing new against itself"
        );
        assert_eq!(r["revision"]["checksum"], sum);
        // On its own: content warnings are reported, no [^] node is "newly set", and a
        // duplicate id already there (upstream's example-werkbaum, #123) does not block.
        let r = vcall(&c, &v, "werkbaum_check", json!({"text": text})).await;
        assert_eq!(r["blocking"], false, "{name}: {}", r["findings"]);
        assert_eq!(r["findings"].as_array().unwrap().len() as u64, warnings);
        assert_eq!(r["notices"], json!([]), "{name}");
        // A subtree and one section only.
        let r = vcall(
            &c,
            &v,
            "werkbaum_inspect",
            json!({"text": text, "id": leaf, "include": ["tree"]}),
        )
        .await;
        assert_eq!(r["tree"][0]["line"], leaf_line);
        assert!(r.get("warnings").is_none() && r.get("path").is_none());

        // --- write tools, text form: the new text comes back, nothing is stored.
        let edits = [
            ("werkbaum_set_status", json!({"id": leaf, "status": "!"})),
            ("werkbaum_set_size", json!({"id": leaf, "size": "XS"})),
            (
                "werkbaum_add_node",
                json!({"parent": leaf, "line": "- [ ] e2e child (S) #e2e-child"}),
            ),
            ("werkbaum_move_node", json!({"id": leaf, "parent": null})),
            ("werkbaum_remove_node", json!({"id": leaf, "discard": true})),
            (
                "werkbaum_apply_ops",
                json!({"ops": [{"op": "insert", "index": 0, "lines": ["%% e2e"]}]}),
            ),
            (
                "werkbaum_write",
                json!({"newText": format!("{text}%% appended\n")}),
            ),
        ];
        // Moving a node changes its label path, so the core may count an old duplicate id or
        // an old [^] as new; this test is about the tools, so the rails are lifted here (the
        // guard-rail test covers them precisely).
        let allow = true;
        for (tool, args) in &edits {
            let mut a = args.clone();
            a["text"] = json!(text);
            a["allowWarnings"] = json!(allow);
            a["allowProd"] = json!(allow);
            let r = vcall(&c, &v, tool, a).await;
            assert_eq!(r["revision"], json!({"checksum": sum}), "{name} {tool}");
            assert_eq!(r["blocking"], false, "{name} {tool}: {r}");
            let new = r["text"].as_str().unwrap();
            assert_eq!(r["checksum"], sha256(new), "{name} {tool}");
            assert!(r["ops"].is_array());
        }

        // --- document form: create, read, inspect, check, every write with its base, history.
        let (doc, mut base) = create(&c, name, &text, true).await;
        let r = vcall(&c, &v, "werkbaum_read", json!({"document": doc})).await;
        assert_eq!(r["text"], text.as_str());
        assert_eq!(
            r["revision"],
            json!({"document": doc, "version": 1, "checksum": sum})
        );
        let r = vcall(
            &c,
            &v,
            "werkbaum_inspect",
            json!({"document": doc, "include": ["warnings"]}),
        )
        .await;
        assert_eq!(r["summary"]["nodes"], nodes);
        assert_eq!(r["revision"]["version"], 1);
        let r = vcall(&c, &v, "werkbaum_check", json!({"document": doc})).await;
        assert_eq!(r["revision"]["document"], doc.as_str());
        let doc_edits = [
            ("werkbaum_set_status", json!({"id": leaf, "status": "!"})),
            ("werkbaum_set_size", json!({"id": leaf, "size": "XS"})),
            (
                "werkbaum_add_node",
                json!({"parent": null, "line": "- [ ] e2e added (S) #e2e-added"}),
            ),
            (
                "werkbaum_move_node",
                json!({"id": "e2e-added", "parent": leaf}),
            ),
            (
                "werkbaum_remove_node",
                json!({"id": "e2e-added", "discard": false}),
            ),
            (
                "werkbaum_apply_ops",
                json!({"ops": [{"op": "insert", "index": 0, "lines": ["%% e2e"]}]}),
            ),
        ];
        let mut version = 1;
        for (tool, args) in &doc_edits {
            let mut a = args.clone();
            a["document"] = json!(doc);
            a["base"] = base.clone();
            a["allowWarnings"] = json!(allow);
            a["allowProd"] = json!(allow);
            let r = vcall(&c, &v, tool, a).await;
            assert_eq!(r["revision"]["version"], base["version"], "{name} {tool}");
            assert_eq!(r["revision"]["checksum"], base["checksum"], "{name} {tool}");
            if r["written"] == true {
                version += 1;
            }
            assert_eq!(r["version"], version, "{name} {tool}: {r}");
            base = json!({"version": r["version"], "checksum": r["checksum"]});
        }
        let current = vcall(&c, &v, "werkbaum_read", json!({"document": doc})).await;
        let new_text = format!("{}%% written whole\n", current["text"].as_str().unwrap());
        let r = vcall(
            &c,
            &v,
            "werkbaum_write",
            json!({"document": doc, "base": base, "newText": new_text}),
        )
        .await;
        version += 1;
        assert_eq!(r["version"], version);
        assert_eq!(r["checksum"], sha256(&new_text));
        let h = vcall(&c, &v, "werkbaum_history", json!({"document": doc})).await;
        let versions: Vec<u64> = h["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["version"].as_u64().unwrap())
            .collect();
        assert_eq!(versions, (1..=version).collect::<Vec<_>>(), "{name}");
        assert_eq!(h["revision"]["version"], version);
        let since = vcall(
            &c,
            &v,
            "werkbaum_history",
            json!({"document": doc, "since": version - 1}),
        )
        .await;
        assert_eq!(since["entries"].as_array().unwrap().len(), 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guard_rails_block_structure_and_prod_but_write_content_warnings() {
    let stack = Werkbaum::start(&[]).await;
    let c = stack.client().await;
    let (doc, base) = create(&c, "Guard rails", PLAN, false).await;

    // mixedGate: an or-child among and-children. Text form: the text comes back, blocking.
    let mixed = json!({"parent": "login", "line": "| [ ] Magic link (M) #magic"});
    let mut a = mixed.clone();
    a["text"] = json!(PLAN);
    let r = call(&c, "werkbaum_add_node", a).await.ok();
    assert_eq!(r["blocking"], true);
    assert!(r["text"].as_str().unwrap().contains("| [ ] Magic link"));
    let f = &r["findings"][0];
    assert_eq!(
        (f["type"].as_str(), f["blocking"].as_bool()),
        (Some("mixedGate"), Some(true))
    );
    // Document form: refused, nothing written.
    let mut a = mixed.clone();
    a["document"] = json!(doc);
    a["base"] = base.clone();
    let e = call(&c, "werkbaum_add_node", a.clone()).await.err();
    assert_eq!(e["code"], "blocked");
    assert_eq!(e["findings"][0]["type"], "mixedGate");
    assert_eq!(
        base_of(&c, &doc).await,
        base,
        "a blocked write is not written"
    );
    // allowWarnings lifts it explicitly.
    a["allowWarnings"] = json!(true);
    let r = call(&c, "werkbaum_add_node", a).await.ok();
    assert_eq!(r["version"], 2);
    assert_eq!(
        r["findings"][0]["reason"],
        "structural warning, allowed by allowWarnings"
    );
    let base = json!({"version": 2, "checksum": r["checksum"]});

    // [^] may only be set by a person.
    let e = call(
        &c,
        "werkbaum_set_status",
        json!({"document": doc, "base": base, "id": "setup", "status": "^"}),
    )
    .await
    .err();
    assert_eq!(e["code"], "blocked");
    assert_eq!(e["findings"][0]["type"], "prodStatus");
    assert_eq!(base_of(&c, &doc).await, base);
    let r = call(
        &c,
        "werkbaum_set_status",
        json!({"document": doc, "base": base, "id": "setup", "status": "^", "allowProd": true}),
    )
    .await
    .ok();
    assert_eq!(r["version"], 3);
    assert_eq!(r["findings"][0]["blocking"], false);
    let base = json!({"version": 3, "checksum": r["checksum"]});

    // sizeConflict is a content warning: written and reported.
    let r = call(
        &c,
        "werkbaum_set_size",
        json!({"document": doc, "base": base, "id": "form", "size": "XXL"}),
    )
    .await
    .ok();
    assert_eq!(r["written"], true);
    assert_eq!(r["version"], 4);
    let types: Vec<&str> = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["type"].as_str().unwrap())
        .collect();
    assert!(types.contains(&"sizeConflict"), "{types:?}");
    assert_eq!(r["blocking"], false);

    // create is guarded too: a plan with a duplicate id needs allowWarnings.
    let dup = "- a #x\n- b #x\n";
    let e = call(&c, "werkbaum_create", json!({"title": "dup", "text": dup}))
        .await
        .err();
    assert_eq!(e["code"], "blocked");
    let r = call(
        &c,
        "werkbaum_create",
        json!({"title": "dup", "text": dup, "allowWarnings": true}),
    )
    .await
    .ok();
    assert_eq!(r["version"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicts_are_errors_with_the_current_text_and_history_names_authors() {
    let stack = Werkbaum::start(&[]).await;
    let claude = stack.client_as("Claude Code").await;
    let other = stack.client().await;
    let (doc, base) = create(&claude, "Shared plan", PLAN, false).await;

    // Two writers with the same base: exactly one wins.
    let a = super::werkbaum_support::call(
        &claude,
        "werkbaum_set_status",
        json!({"document": doc, "base": base, "id": "form", "status": "x"}),
    );
    let b = super::werkbaum_support::call(
        &other,
        "werkbaum_set_size",
        json!({"document": doc, "base": base, "id": "api", "size": "S"}),
    );
    let (a, b) = tokio::join!(a, b);
    assert_eq!(
        u8::from(a.is_error) + u8::from(b.is_error),
        1,
        "exactly one wins: {} / {}",
        a.text,
        b.text
    );
    let a_lost = a.is_error;
    let (winner, loser) = if a.is_error { (b, a) } else { (a, b) };
    let won = winner.ok();
    let e = loser.err();
    assert_eq!(e["code"], "conflict");
    assert_eq!(e["baseVersion"], 1);
    assert_eq!(e["current"]["version"], 2);
    assert_eq!(e["current"]["checksum"], won["checksum"]);
    let current_text = e["current"]["text"].as_str().unwrap().to_owned();
    // Non-overlapping edits are not merged silently: the loser's change is absent.
    let now = call(&other, "werkbaum_read", json!({"document": doc}))
        .await
        .ok();
    assert_eq!(now["text"], current_text.as_str());
    assert_eq!(now["revision"]["version"], 2);

    // The stale writer redoes its own change on the current version.
    let fresh = json!({"version": e["current"]["version"], "checksum": e["current"]["checksum"]});
    let (client, tool, mut args) = if a_lost {
        (
            &claude,
            "werkbaum_set_status",
            json!({"id": "form", "status": "x"}),
        )
    } else {
        (
            &other,
            "werkbaum_set_size",
            json!({"id": "api", "size": "S"}),
        )
    };
    args["document"] = json!(doc);
    args["base"] = fresh;
    let r = call(client, tool, args).await.ok();
    assert_eq!(r["version"], 3);
    // A mismatching checksum with the right version is stale too.
    let bad = json!({"version": 3, "checksum": "0".repeat(64)});
    let e = call(
        &claude,
        "werkbaum_set_status",
        json!({"document": doc, "base": bad, "id": "api", "status": "x"}),
    )
    .await
    .err();
    assert_eq!(e["code"], "conflict");

    let h = call(&other, "werkbaum_history", json!({"document": doc}))
        .await
        .ok();
    let authors: Vec<&str> = h["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["author"].as_str().unwrap())
        .collect();
    assert_eq!(authors[0], "Claude Code · operator");
    assert!(authors.contains(&"pforte-tests · operator"));
    let e1 = &h["entries"][0];
    assert_eq!(e1["host"], "Claude Code");
    assert_eq!(e1["user"], "operator");
    assert_eq!(e1["clientId"], "werkbaum-tests");
    assert!(e1["subject"].as_str().unwrap().starts_with("create"));
    assert!(
        h["entries"][2]["ops"]
            .as_array()
            .is_some_and(|o| !o.is_empty())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_templates_and_prompts() {
    let stack = Werkbaum::start(&[]).await;
    let c = stack.client().await;
    let (doc, _) = create(&c, "Roadmap 2027", PLAN, false).await;
    let list = c.list_all_resources().await.unwrap();
    let r = list
        .iter()
        .find(|r| r.uri == format!("werkbaum://doc/{doc}"))
        .expect("doc listed");
    assert_eq!(r.name, "Roadmap 2027");
    assert!(r.description.as_deref().unwrap().contains(&doc));
    assert!(list.iter().any(|r| r.uri == "werkbaum://guide"));
    let t: ListResourceTemplatesResult = c.list_resource_templates(None).await.unwrap();
    assert_eq!(
        t.resource_templates[0].uri_template,
        "werkbaum://doc/{uuid}"
    );
    let read = c
        .read_resource(ReadResourceRequestParams::new(format!(
            "werkbaum://doc/{doc}"
        )))
        .await
        .unwrap();
    let ResourceContents::TextResourceContents {
        text,
        mime_type,
        meta,
        ..
    } = &read.contents[0]
    else {
        panic!("text contents")
    };
    assert_eq!(text, PLAN);
    assert_eq!(mime_type.as_deref(), Some("text/plain"));
    let meta = meta.as_ref().unwrap();
    assert_eq!(meta.0["version"], 1);
    assert_eq!(meta.0["checksum"], sha256(PLAN));
    let missing = c
        .read_resource(ReadResourceRequestParams::new("werkbaum://doc/nope"))
        .await
        .unwrap_err();
    assert!(
        missing.to_string().contains("no document nope"),
        "{missing}"
    );

    let prompts = c.list_all_prompts().await.unwrap();
    let names: Vec<_> = prompts.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["werkbaum/review", "werkbaum/decompose"]);
    let mut args = serde_json::Map::new();
    args.insert("id".into(), json!("login"));
    args.insert("document".into(), json!(doc));
    let p = c
        .get_prompt(GetPromptRequestParams::new("werkbaum/decompose").with_arguments(args))
        .await
        .unwrap();
    let text = serde_json::to_value(&p.messages[0]).unwrap()["content"]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        text.contains("#login") && text.contains("pull-doc") && text.contains("werkbaum_add_node")
    );
    let e = c
        .get_prompt(GetPromptRequestParams::new("werkbaum/decompose"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("needs the argument id"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_mode_registers_no_write_tool() {
    let stack = Werkbaum::start(&["--read-only"]).await;
    // Seed a document through the operator CLI on the same data dir.
    let plan = stack.data.path().join("plan.werkbaum");
    std::fs::write(&plan, PLAN).unwrap();
    let out = std::process::Command::new(pforte_tests::bin("mcp-service"))
        .args(["doc", "import"])
        .arg(&plan)
        .args(["--title", "Seeded", "--data-dir"])
        .arg(stack.data.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc = String::from_utf8(out.stdout).unwrap().trim().to_owned();

    let c = stack.client().await;
    let tools = c.list_all_tools().await.unwrap();
    let names: Vec<_> = tools.iter().map(|t| t.name.to_string()).collect();
    for t in [
        "werkbaum_read",
        "werkbaum_inspect",
        "werkbaum_check",
        "werkbaum_history",
        "whoami",
    ] {
        assert!(names.contains(&t.to_owned()), "{t} missing from {names:?}");
    }
    for t in [
        "werkbaum_set_status",
        "werkbaum_apply_ops",
        "werkbaum_write",
        "werkbaum_add_node",
        "werkbaum_move_node",
        "werkbaum_set_size",
        "werkbaum_remove_node",
        "werkbaum_create",
    ] {
        assert!(
            !names.contains(&t.to_owned()),
            "{t} is registered in read-only mode"
        );
    }
    let base = base_of(&c, &doc).await;
    let e = try_call(
        &c,
        "werkbaum_set_status",
        json!({"document": doc, "base": base, "id": "form", "status": "x"}),
    )
    .await
    .unwrap_err();
    assert!(e.to_string().contains("tool not found"), "{e}");
    assert_eq!(base_of(&c, &doc).await, base);
    // Reading works.
    let r = call(&c, "werkbaum_inspect", json!({"document": doc}))
        .await
        .ok();
    assert_eq!(r["summary"]["nodes"], 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_precise_errors_and_writes_nothing() {
    let stack = Werkbaum::start(&["--max-text-bytes", "4096"]).await;
    let c = stack.client().await;
    let (doc, base) = create(&c, "Bad input", PLAN, false).await;
    let code = |v: Value| v["code"].as_str().unwrap().to_owned();

    let e = call(
        &c,
        "werkbaum_read",
        json!({"document": "00000000-0000-0000-0000-000000000000"}),
    )
    .await
    .err();
    assert_eq!(code(e), "unknownDocument");
    let e = call(
        &c,
        "werkbaum_inspect",
        json!({"document": doc, "text": PLAN}),
    )
    .await
    .err();
    assert_eq!(code(e.clone()), "invalidInput");
    assert!(e["message"].as_str().unwrap().contains("not both"));
    let e = call(&c, "werkbaum_check", json!({})).await.err();
    assert!(e["message"].as_str().unwrap().contains("neither"));
    let e = call(
        &c,
        "werkbaum_set_status",
        json!({"document": doc, "id": "form", "status": "x"}),
    )
    .await
    .err();
    assert!(
        e["message"].as_str().unwrap().contains("missing `base`"),
        "{e}"
    );
    let e = call(
        &c,
        "werkbaum_set_status",
        json!({"document": doc, "base": base, "id": "nope", "status": "x"}),
    )
    .await
    .err();
    assert_eq!(code(e), "unknownNode");
    // Schema violations (an invalid enum value, a missing required field) are rejected by the
    // schema: rmcp answers them as tool errors naming the field.
    let r = call(
        &c,
        "werkbaum_set_status",
        json!({"document": doc, "base": base, "id": "form", "status": "finished"}),
    )
    .await;
    assert!(
        r.is_error
            && r.text.contains("unknown status \"finished\"")
            && r.text.contains("done")
            && r.text.contains("fertig"),
        "{}",
        r.text
    );
    // Unknown arguments are named, with the accepted ones; nothing runs.
    let e = call(&c, "werkbaum_inspect", json!({"txt": PLAN}))
        .await
        .err();
    assert_eq!(code(e.clone()), "unknownArguments");
    assert_eq!(e["unknown"], json!(["txt"]));
    assert_eq!(e["accepted"], json!(["document", "id", "include", "text"]));
    assert!(e["message"].as_str().unwrap().contains("`txt`"), "{e}");
    let e = call(
        &c,
        "werkbaum_set_status",
        json!({"document": doc, "base": base, "id": "form", "status": "x", "force": true, "why": 1}),
    )
    .await
    .err();
    assert_eq!(e["unknown"], json!(["force", "why"]));
    let e = call(
        &c,
        "werkbaum_check",
        json!({"text": PLAN, "allowWarnings": true}),
    )
    .await
    .err();
    assert_eq!(
        e["unknown"],
        json!(["allowWarnings"]),
        "check offers only what it uses"
    );
    let r = call(
        &c,
        "werkbaum_set_size",
        json!({"document": doc, "base": base, "id": "form", "size": "XXXL"}),
    )
    .await;
    assert!(
        r.is_error && r.text.contains("unknown variant `XXXL`"),
        "{}",
        r.text
    );
    let r = call(
        &c,
        "werkbaum_set_size",
        json!({"document": doc, "base": base, "id": "form"}),
    )
    .await;
    assert!(
        r.is_error && r.text.contains("missing field `size`"),
        "{}",
        r.text
    );
    let e = call(
        &c,
        "werkbaum_apply_ops",
        json!({"document": doc, "base": base, "ops": [{"op": "delete", "index": 99}]}),
    )
    .await
    .err();
    assert_eq!(code(e.clone()), "opOutOfRange");
    assert!(e["message"].as_str().unwrap().contains("op 0"), "{e}");
    let big = "- x\n".repeat(2000);
    let e = call(
        &c,
        "werkbaum_write",
        json!({"document": doc, "base": base, "newText": big}),
    )
    .await
    .err();
    assert_eq!(code(e.clone()), "textTooLarge");
    assert_eq!(e["limit"], 4096);
    let e = call(&c, "werkbaum_inspect", json!({"text": big}))
        .await
        .err();
    assert_eq!(code(e), "textTooLarge");
    let e = call(&c, "werkbaum_history", json!({"document": "nope"}))
        .await
        .err();
    assert_eq!(code(e), "unknownDocument");
    let e = call(&c, "werkbaum_create", json!({"title": " ", "text": PLAN}))
        .await
        .err();
    assert_eq!(code(e), "invalidInput");
    assert_eq!(base_of(&c, &doc).await, base, "nothing was written");

    // Invalid UTF-8 (a lone surrogate escape, and raw 0xFF bytes) never reaches a tool: the
    // request is refused as malformed JSON, and the service keeps serving.
    for body in [
        br#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"werkbaum_read","arguments":{"text":"\ud800"}}}"#.to_vec(),
        [&br#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"werkbaum_read","arguments":{"text":""#[..], &[0xff, 0xfe], br#""}}}"#].concat(),
    ] {
        let status = raw_post(&stack, body).await;
        assert!(status.0 >= 400 || status.1.contains("-32700") || status.1.contains("-32602"), "{status:?}");
    }
    assert_eq!(base_of(&c, &doc).await, base);
}

/// Posts `body` on a fresh session (initialize first); returns (status, body text).
async fn raw_post(stack: &Werkbaum, body: Vec<u8>) -> (u16, String) {
    let mut client = stack.gw.mcp(&stack.token).client_name("raw");
    let _ = client.initialize().await.text().await;
    client.notify("notifications/initialized").await;
    let r = client.post_raw(body).await;
    let status = r.status().as_u16();
    (status, r.text().await.unwrap_or_default())
}

#[allow(dead_code)]
fn _ids_used(v: &Value) -> Vec<String> {
    ids(v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statuses_by_code_key_or_english_name_and_a_compact_catalog() {
    let stack = Werkbaum::start(&[]).await;
    let c = stack.client().await;
    for status in ["x", "fertig", "done", "Done"] {
        let r = call(
            &c,
            "werkbaum_set_status",
            json!({"text": PLAN, "id": "form", "status": status}),
        )
        .await
        .ok();
        assert!(
            r["text"]
                .as_str()
                .unwrap()
                .contains("- [x] Design the form"),
            "{status}: {r}"
        );
    }
    let r = call(
        &c,
        "werkbaum_set_status",
        json!({"text": PLAN, "id": "form", "status": "in progress"}),
    )
    .await
    .ok();
    assert!(
        r["text"]
            .as_str()
            .unwrap()
            .contains("- [~] Design the form")
    );

    // The catalog as the model reads it, through the gateway.
    let tools = c.list_all_tools().await.unwrap();
    assert_eq!(tools.len(), 13);
    let model: Vec<Value> = tools
        .iter()
        .map(|t| {
            assert!(t.title.is_some(), "{} has no title", t.name);
            assert!(t.output_schema.is_some(), "{} has no outputSchema", t.name);
            assert_eq!(
                t.input_schema.get("additionalProperties"),
                Some(&Value::Bool(false)),
                "{}",
                t.name
            );
            json!({"name": t.name, "title": t.title, "description": t.description, "inputSchema": t.input_schema})
        })
        .collect();
    let bytes = serde_json::to_string(&model).unwrap().len();
    assert!(bytes <= 10_000, "{bytes} bytes");
    let info = c.peer_info().unwrap();
    let instructions = info.instructions.as_deref().unwrap();
    assert!(
        instructions.contains("`base: {version, checksum}`"),
        "{instructions}"
    );

    // Prose: inspect says it is not a plan, in notices (warnings stay upstream's).
    let r = call(
        &c,
        "werkbaum_inspect",
        json!({"text": "hello world\nthis is a letter to a friend.\n"}),
    )
    .await
    .ok();
    assert_eq!(r["notices"][0]["type"], "notAPlan", "{r}");
    assert_eq!(r["warnings"], json!([]));
}

/// The configured bounds hold end to end: `werkbaum_history` pages with `next`, refuses a
/// `limit` over the maximum, and the instance refuses a document beyond `max_documents`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_is_paged_and_documents_are_capped() {
    let conf = tempfile::tempdir().unwrap();
    let path = conf.path().join("mcp-service.toml");
    std::fs::write(&path, "max_documents = 1\nhistory_page = 2\n").unwrap();
    let stack = Werkbaum::start(&["--config", path.to_str().unwrap()]).await;
    let c = stack.client().await;
    let v = validators(&c).await;
    let (doc, mut base) = create(&c, "Paged", PLAN, true).await;
    for k in 0..2 {
        let current = call(&c, "werkbaum_read", json!({"document": doc}))
            .await
            .ok();
        let text = format!("{}%% page {k}\n", current["text"].as_str().unwrap());
        let r = vcall(
            &c,
            &v,
            "werkbaum_write",
            json!({"document": doc, "base": base, "newText": text}),
        )
        .await;
        base = json!({"version": r["version"], "checksum": r["checksum"]});
    }
    let first = vcall(&c, &v, "werkbaum_history", json!({"document": doc})).await;
    assert_eq!(first["entries"].as_array().unwrap().len(), 2);
    assert_eq!(first["next"], 2);
    let rest = vcall(
        &c,
        &v,
        "werkbaum_history",
        json!({"document": doc, "since": first["next"]}),
    )
    .await;
    assert_eq!(rest["entries"][0]["version"], 3);
    assert!(rest.get("next").is_none(), "{rest}");
    let e = call(
        &c,
        "werkbaum_history",
        json!({"document": doc, "limit": 101}),
    )
    .await
    .err();
    assert_eq!(e["code"], "invalidInput");
    assert!(e["message"].as_str().unwrap().contains("1..=100"), "{e}");
    let e = call(
        &c,
        "werkbaum_create",
        json!({"title": "One too many", "text": PLAN, "allowWarnings": true, "allowProd": true}),
    )
    .await
    .err();
    assert_eq!(e["code"], "tooManyDocuments");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("limit of 1 documents"),
        "{e}"
    );
}
