//! A planning dialogue as an agent runs it, through the gateway: create a plan, decompose a
//! node, hit a conflict with a colleague's write, resolve it. Prints the transcript (tool calls
//! and the text answers) with `--nocapture`; asserts each step.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::werkbaum_support::{Answer, Client, Werkbaum, try_call};
use serde_json::{Value, json};

async fn step(who: &str, c: &Client, tool: &str, args: Value) -> Answer {
    let shown = {
        let mut a = args.clone();
        if let Some(t) = a.get_mut("text").filter(|t| t.is_string()) {
            *t = json!(format!("<{} bytes>", t.as_str().unwrap().len()));
        }
        a
    };
    println!("\n>>> {who} calls {tool} {shown}");
    let r = try_call(c, tool, args).await.unwrap();
    println!(
        "<<< {}{}",
        if r.is_error { "isError: " } else { "" },
        r.text.trim_end().replace('\n', "\n    ")
    );
    r
}

fn base(v: &Value) -> Value {
    json!({"version": v["version"], "checksum": v["checksum"]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_creates_decomposes_conflicts_and_resolves() {
    let stack = Werkbaum::start(&[]).await;
    let claude = stack.client_as("Claude Code").await;
    let colleague = stack.client_as("Werkbaum editor").await;
    let plan = "- [ ] Password reset (L) #reset\n- [x] Login (M) #login\n";

    let r = step(
        "Claude Code",
        &claude,
        "werkbaum_create",
        json!({"title": "Accounts", "text": plan}),
    )
    .await
    .ok();
    let doc = r["document"].as_str().unwrap().to_owned();
    let mut b = base(&r);
    let r = step(
        "Claude Code",
        &claude,
        "werkbaum_inspect",
        json!({"document": doc, "id": "reset", "include": ["tree"]}),
    )
    .await
    .ok();
    assert_eq!(r["tree"][0]["needsBreakdown"], true);
    for line in [
        "- [ ] Reset token and mail (S) #reset-mail",
        "- [ ] Reset form (S) #reset-form",
    ] {
        let r = step(
            "Claude Code",
            &claude,
            "werkbaum_add_node",
            json!({"document": doc, "base": b, "parent": "reset", "line": line}),
        )
        .await
        .ok();
        b = base(&r);
    }
    // Meanwhile a colleague marks the mail part as started, from the editor.
    let r = step(
        "colleague",
        &colleague,
        "werkbaum_set_status",
        json!({"document": doc, "base": b, "id": "reset-mail", "status": "~"}),
    )
    .await
    .ok();
    assert_eq!(r["version"], 4);
    // The agent's next write still uses its old base: a conflict, nothing written.
    let e = step("Claude Code", &claude, "werkbaum_add_node", json!({"document": doc, "base": b, "parent": "reset", "line": "- [ ] Rate-limit reset requests (XS) #reset-limit"})).await.err();
    assert_eq!(e["code"], "conflict");
    // It takes the current version from the error, checks the plan and redoes its change.
    let fresh = json!({"version": e["current"]["version"], "checksum": e["current"]["checksum"]});
    let r = step("Claude Code", &claude, "werkbaum_add_node", json!({"document": doc, "base": fresh, "parent": "reset", "line": "- [ ] Rate-limit reset requests (XS) #reset-limit"})).await.ok();
    assert_eq!(r["version"], 5);
    let r = step(
        "Claude Code",
        &claude,
        "werkbaum_history",
        json!({"document": doc}),
    )
    .await
    .ok();
    assert_eq!(r["entries"].as_array().unwrap().len(), 5);
    let r = step(
        "Claude Code",
        &claude,
        "werkbaum_read",
        json!({"document": doc}),
    )
    .await
    .ok();
    assert!(
        r["text"]
            .as_str()
            .unwrap()
            .contains("[~] Reset token and mail")
    );
}
