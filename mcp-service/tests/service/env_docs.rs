//! The service's environment variables are one list: the names the code reads
//! (`src/config.rs`) are exactly the names docs/configuration.md and docs/deploy.md give.

use std::collections::BTreeSet;

/// `MCP_SERVICE_*` names in `text`; `MCP_SERVICE_LOG` is compose's own variable (it sets
/// `RUST_LOG`), not one the service reads.
fn names(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("MCP_SERVICE_") {
        // `PFORTE_MCP_SERVICE_BIN` is the gateway's, not the service's.
        let part_of_longer = rest[..i]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        let name = tail[..end].trim_end_matches('_');
        if !part_of_longer && name.len() > "MCP_SERVICE_".len() && name != "MCP_SERVICE_LOG" {
            out.insert(name.to_owned());
        }
        rest = &tail[end.max(1)..];
    }
    out
}

fn read(rel: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn reference_deploy_guide_and_code_name_the_same_variables() {
    let code: BTreeSet<String> = names(&read("src/config.rs"))
        .into_iter()
        .filter(|n| read("src/config.rs").contains(&format!("env(\"{n}\")")))
        .collect();
    assert!(code.len() >= 8, "{code:?}");
    for doc in ["../docs/configuration.md", "../docs/deploy.md"] {
        assert_eq!(names(&read(doc)), code, "{doc} vs src/config.rs");
    }
}
