//! `[[virtual]]`'s rules, one test per rule: the issue's example parses and derives its
//! addresses and prefixes; every refusal names the virtual server and the field.
#![allow(clippy::unwrap_used)]

use crate::config::{ConfigError, GatewayConfig, Settings};

const ROUTES: &str = r#"
[[routes]]
name = "werkbaum"
url = "http://127.0.0.1:2/mcp"
[[routes]]
name = "notes"
command = ["notes-server"]
"#;

fn cfg(virtuals: &str) -> Result<Settings, ConfigError> {
    let cfg: GatewayConfig = toml::from_str(&format!("{ROUTES}{virtuals}")).unwrap();
    cfg.validate()
}

fn refusal(virtuals: &str) -> String {
    cfg(virtuals).unwrap_err().to_string()
}

/// The issue's example, as written there.
const TEAM: &str = r#"
[[virtual]]
name = "team"
title = "Team tools"
members = ["werkbaum", "notes"]
[virtual.prefix]
werkbaum = ""
[virtual.tools.notes_search]
rename = "find_notes"
description = "Search the team's notes by words or tags."
"#;

#[test]
fn the_issues_example_is_a_virtual_server_at_its_own_path() {
    let s = cfg(TEAM).unwrap();
    assert_eq!(s.virtuals.len(), 1);
    let v = &s.virtuals[0];
    assert_eq!(v.path, "/team/mcp");
    assert_eq!(v.resource, "http://127.0.0.1:8787/team/mcp");
    assert_eq!(
        v.metadata_url,
        "http://127.0.0.1:8787/.well-known/oauth-protected-resource/team/mcp"
    );
    assert_eq!(v.server.title.as_deref(), Some("Team tools"));
    let prefixes: Vec<(&str, &str)> = v
        .server
        .members
        .iter()
        .map(|m| (m.route.as_str(), m.prefix.as_str()))
        .collect();
    assert_eq!(prefixes, [("werkbaum", ""), ("notes", "notes_")]);
    assert_eq!(
        v.server.tools["notes_search"].rename.as_deref(),
        Some("find_notes")
    );
    assert!(!v.server.search);
    // Every field of an override and search mode parse.
    let s = cfg(r#"
[[virtual]]
name = "all"
members = ["notes"]
search = true
pinned = ["notes_read"]
[virtual.tools.notes_delete]
hide = true
[virtual.tools.notes_read]
title = "Read a note"
annotations = { readOnlyHint = true, openWorldHint = false }
"#)
    .unwrap();
    let v = &s.virtuals[0].server;
    assert!(v.search && v.tools["notes_delete"].hide);
    let hints = v.tools["notes_read"].annotations.as_ref().unwrap().set();
    assert_eq!(hints, [("readOnlyHint", true), ("openWorldHint", false)]);
}

#[test]
fn members_must_be_routes_each_once() {
    let e = refusal("[[virtual]]\nname = \"team\"\nmembers = [\"werkbaum\", \"wiki\"]\n");
    assert_eq!(
        e,
        "[[virtual]] \"team\": members: \"wiki\" is no route (routes: werkbaum, notes)"
    );
    let e = refusal("[[virtual]]\nname = \"team\"\nmembers = [\"notes\", \"notes\"]\n");
    assert!(e.contains("members: \"notes\" is listed twice"), "{e}");
    let e = refusal("[[virtual]]\nname = \"team\"\n");
    assert!(e.contains("members: name at least one route"), "{e}");
    let e = refusal(
        "[[virtual]]\nname = \"team\"\nmembers = [\"notes\"]\n[virtual.prefix]\nwerkbaum = \"\"\n",
    );
    assert!(e.contains("prefix: \"werkbaum\" is not a member"), "{e}");
    let e = refusal(
        "[[virtual]]\nname = \"team\"\nmembers = [\"notes\"]\n[virtual.prefix]\nnotes = \"n/\"\n",
    );
    assert!(e.contains("prefix: notes = \"n/\""), "{e}");
}

#[test]
fn a_virtual_name_is_its_own() {
    for name in ["notes", "werkbaum"] {
        let e = refusal(&format!(
            "[[virtual]]\nname = \"{name}\"\nmembers = [\"notes\"]\n"
        ));
        assert_eq!(
            e,
            format!(
                "[[virtual]] \"{name}\": name: the route {name} is served at /{name}/mcp; a virtual server needs a name of its own"
            )
        );
    }
    let twice = "[[virtual]]\nname = \"team\"\nmembers = [\"notes\"]\n";
    let e = refusal(&format!("{twice}{twice}"));
    assert!(
        e.contains("a virtual server of this name exists already"),
        "{e}"
    );
    let e = refusal("[[virtual]]\nname = \"Team\"\nmembers = [\"notes\"]\n");
    assert!(
        e.contains("name: a virtual server's name is 1 to 63"),
        "{e}"
    );
}

#[test]
fn overrides_and_pins_are_well_formed() {
    let base = "[[virtual]]\nname = \"team\"\nmembers = [\"notes\"]\n";
    for (extra, says) in [
        (
            "[virtual.tools.\"a b\"]\ntitle = \"x\"\n",
            "[virtual.tools.a b] is no tool name",
        ),
        (
            "[virtual.tools.notes_read]\nrename = \"read notes\"\n",
            "rename \"read notes\" is no tool name",
        ),
        (
            "[virtual.tools.notes_read]\ndescription = \" \"\n",
            "description must not be blank",
        ),
        (
            "[virtual.tools.notes_read]\ntitle = \"a\\nb\"\n",
            "title must not be blank or hold control characters",
        ),
        (
            "[virtual.tools.notes_read]\nhide = true\nrename = \"x\"\n",
            "hide = true shows nothing",
        ),
        ("pinned = [\"notes_read\"]\n", "set search = true"),
        (
            "search = true\npinned = [\"notes_read\", \"notes_read\"]\n",
            "pinned: \"notes_read\": a tool name, each once",
        ),
        ("title = \"\"\n", "title: must be 1 to 100 characters"),
    ] {
        let e = refusal(&format!("{base}{extra}"));
        assert!(e.starts_with("[[virtual]] \"team\": "), "{e}");
        assert!(e.contains(says), "{extra}: {e}");
    }
    // A description may have line breaks.
    cfg(&format!(
        "{base}[virtual.tools.notes_read]\ndescription = \"Read.\\nOne note.\"\n"
    ))
    .unwrap();
    // Unknown keys are refused by the types.
    let text = format!("{ROUTES}{base}[virtual.tools.notes_read]\nscopes = [\"x\"]\n");
    assert!(toml::from_str::<GatewayConfig>(&text).is_err());
}

#[test]
fn members_share_who_may_use_them_and_the_virtual_server_is_a_resource_of_its_own() {
    let e = refusal(
        "[[routes]]\nname = \"hr\"\nurl = \"http://127.0.0.1:4/mcp\"\nroles = [\"hr\"]\n\
         [oauth.roles.hr]\ngroups = [\"hr\"]\n\
         [[virtual]]\nname = \"team\"\nmembers = [\"notes\", \"hr\"]\n",
    );
    assert!(
        e.contains("members: routes notes and hr differ in roles or users"),
        "{e}"
    );
    let s = cfg(TEAM).unwrap();
    let oauth = crate::oauth::oauth_config(&s).unwrap();
    let team = oauth.resources.iter().find(|r| r.name == "team").unwrap();
    assert_eq!(team.url, "http://127.0.0.1:8787/team/mcp");
    assert_eq!(team.title.as_deref(), Some("Team tools"));
    let doc = crate::metadata::virtual_resource(&s, &s.virtuals[0]);
    assert_eq!(doc["resource"], "http://127.0.0.1:8787/team/mcp");
    assert_eq!(doc["resource_name"], "Team tools (Pforte MCP gateway)");
    assert_eq!(
        s.virtual_for_metadata("/.well-known/oauth-protected-resource/team/mcp"),
        Some(0)
    );
}
