//! Issue 42, what `pforte check` asks a virtual server's members itself: their prompts and
//! resources. Two routes in front of one mcp-service (`mcp` and `notes`), both without a
//! prefix: `check` refuses the prompts both list under one shown name, naming both; with the
//! default prefixes it passes, counts the prompts and resources, says how resource URIs stay
//! unique and names the URI both list (served from the first member).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use pforte_tests::{McpService, Route, Stack};

use super::virtual_check::check_with;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_refuses_two_members_prompts_under_one_name_and_names_shared_uris() {
    let svc = McpService::start(&[]).unwrap();
    let gw = Stack::builder()
        .upstream(&svc.url())
        .route(Route::url("notes", &svc.url()))
        .start()
        .await;
    let dir = tempfile::tempdir().unwrap();

    let (ok, stdout, stderr) = check_with(
        &gw,
        dir.path(),
        "[[virtual]]\nname = \"team\"\nmembers = [\"mcp\", \"notes\"]\n\
         [virtual.prefix]\nmcp = \"\"\nnotes = \"\"\n",
    );
    assert!(!ok, "{stdout}{stderr}");
    for says in [
        "prompt name \"werkbaum/review\" is shown for mcp's \"werkbaum/review\" and notes's \
         \"werkbaum/review\": give one of the two members another prefix ([virtual.prefix])",
        "prompt name \"werkbaum/decompose\" is shown for mcp's",
    ] {
        assert!(stderr.contains(says), "{says}: {stderr}");
    }

    let (ok, stdout, stderr) = check_with(
        &gw,
        dir.path(),
        "[[virtual]]\nname = \"team\"\nmembers = [\"mcp\", \"notes\"]\n",
    );
    assert!(ok, "{stdout}{stderr}");
    assert!(
        stdout.contains(
            "4 prompts shown as <prefix><name>; 1 resources, their URIs unchanged (each member's \
             own, so unique per member): a URI two members list is served from the first"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("note: resource \"werkbaum://guide\" is listed by mcp and notes: served from mcp (the first member)"),
        "{stdout}"
    );
    assert!(!stdout.contains("not checked:"), "{stdout}");
}
