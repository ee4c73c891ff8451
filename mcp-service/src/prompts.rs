//! The MCP prompts `werkbaum/review` and `werkbaum/decompose`: their argument lists and the
//! instructions they expand to. Pure functions of their arguments.

use std::collections::BTreeMap;

use rmcp::model::{GetPromptResult, Prompt, PromptArgument, PromptMessage, Role};

pub(crate) const REVIEW: &str = "werkbaum/review";
pub(crate) const DECOMPOSE: &str = "werkbaum/decompose";

/// Why a prompt request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PromptError {
    #[error("no prompt {0} (there are werkbaum/review and werkbaum/decompose)")]
    Unknown(String),
    #[error("prompt {prompt} needs the argument {arg}")]
    Missing {
        prompt: &'static str,
        arg: &'static str,
    },
    #[error("give `document` or `file`, not both")]
    Both,
}

/// The prompts this server offers.
pub(crate) fn list() -> Vec<Prompt> {
    let target = || {
        vec![
            PromptArgument::new("document")
                .with_description("uuid of a document on this server")
                .with_required(false),
            PromptArgument::new("file")
                .with_description("path of a local .werkbaum file (you read it yourself)")
                .with_required(false),
        ]
    };
    let mut decompose_args = vec![
        PromptArgument::new("id")
            .with_description("the node to break down, e.g. #login")
            .with_required(true),
    ];
    decompose_args.extend(target());
    vec![
        Prompt::new(
            REVIEW,
            Some(
                "Review a Werkbaum plan: warnings, sizes, missing breakdown from M up, unclear \
                 owners. Read-only: uses werkbaum_inspect, writes nothing.",
            ),
            Some(target()),
        )
        .with_title("Review a plan"),
        Prompt::new(
            DECOMPOSE,
            Some(
                "Break node #id into sized parts with the edit tools and the guard rails \
                 (conflicts are re-read, never overwritten).",
            ),
            Some(decompose_args),
        )
        .with_title("Decompose a node"),
    ]
}

enum Target {
    Document(String),
    File(String),
    Unspecified,
}

fn target(args: &BTreeMap<String, String>) -> Result<Target, PromptError> {
    let get = |k: &str| args.get(k).map(|s| s.trim()).filter(|s| !s.is_empty());
    match (get("document"), get("file")) {
        (Some(_), Some(_)) => Err(PromptError::Both),
        (Some(d), None) => Ok(Target::Document(d.to_owned())),
        (None, Some(f)) => Ok(Target::File(f.to_owned())),
        (None, None) => Ok(Target::Unspecified),
    }
}

fn how_to_read(t: &Target) -> String {
    match t {
        Target::Document(d) => format!(
            "The plan is document `{d}` on this server: call the tools with \
             `document: \"{d}\"` (resource werkbaum://doc/{d})."
        ),
        Target::File(f) => format!(
            "The plan is the local file `{f}`: read it yourself and pass its content as `text`."
        ),
        Target::Unspecified => "Ask which plan to use if it is not clear: a local .werkbaum \
             file (pass its content as `text`) or a server document (resources/list; pass \
             `document: <uuid>`)."
            .to_owned(),
    }
}

/// Expands a prompt with its arguments.
pub(crate) fn get(
    name: &str,
    args: &BTreeMap<String, String>,
) -> Result<GetPromptResult, PromptError> {
    let text = match name {
        REVIEW => review(&target(args)?),
        DECOMPOSE => {
            let id = args
                .get("id")
                .map(|s| s.trim())
                .filter(|s| !s.is_empty())
                .ok_or(PromptError::Missing {
                    prompt: DECOMPOSE,
                    arg: "id",
                })?;
            decompose(id, &target(args)?)
        }
        other => return Err(PromptError::Unknown(other.to_owned())),
    };
    Ok(
        GetPromptResult::new(vec![PromptMessage::new_text(Role::User, text)]).with_description(
            match name {
                REVIEW => "Review a Werkbaum plan",
                _ => "Decompose a Werkbaum node",
            },
        ),
    )
}

fn review(t: &Target) -> String {
    format!(
        "Review this Werkbaum plan. Do not change it: this review writes nothing.\n\n\
         {}\n\n\
         1. Call `werkbaum_inspect` (include tree, warnings, path). Do not interpret the notation \
         yourself; rely on what the tool returns (read werkbaum://guide if a term is unclear).\n\
         2. Report, with line numbers and ids:\n\
         - every warning and what it means for the plan;\n\
         - sizes: nodes without a size (only an assumed one), and size conflicts (children that \
         add up to more than their parent);\n\
         - missing breakdown: leaves sized M or larger (`needsBreakdown`) — name the first ones \
         on the cheapest path;\n\
         - unclear owners: needed nodes and stations without an `@person`, and an overloaded \
         assignee;\n\
         - the cheapest path: the stations to work on next.\n\
         3. End with at most five concrete suggestions, each naming the tool call that would \
         make it (e.g. `werkbaum_set_size` on #id), without calling any write tool.",
        how_to_read(t)
    )
}

fn decompose(id: &str, t: &Target) -> String {
    let node = if id.starts_with('#') {
        id.to_owned()
    } else {
        format!("#{id}")
    };
    let mut text = format!(
        "Break node {node} of this Werkbaum plan into sized parts.\n\n\
         {}\n\n\
         1. Call `werkbaum_inspect` with `id: \"{}\"` to see the node, its children, sizes and \
         warnings. Note the `revision` it returns.\n\
         2. Propose 2–6 parts, each small enough (XS, S or M; break anything larger down further), \
         each one node line like `- [ ] Write the parser tests (S) @owner #parser-tests`. Keep the \
         gate of existing children (do not mix `-`/`+` with `|` or `=` in one group).\n\
         3. Add them with `werkbaum_add_node` (parent {node}), one call per part; adjust sizes \
         with `werkbaum_set_size` and statuses with `werkbaum_set_status`. Never set `[^]` \
         (production): only a person does that.\n\
         4. Guard rails: if a call answers `blocked`, fix the cause instead of passing \
         `allowWarnings`; content warnings (e.g. sizeConflict) are written and reported — \
         resolve them or tell the user.\n",
        how_to_read(t),
        id.trim_start_matches('#')
    );
    match t {
        Target::Document(d) => text.push_str(&format!(
            "5. Every write needs `base: {{version, checksum}}` from your last answer. On a \
             `conflict` error someone else wrote meanwhile: take the current text from the \
             error, check whether your change still makes sense, redo it on that version with \
             the new base. Never overwrite with `werkbaum_write` to \"win\" a conflict.\n\
             6. Finish with `werkbaum_history` (document `{d}`) and a short summary. Then tell \
             the user how to mirror the result into the repository:\n\
             `PFORTE_TOKEN=… mcp-service pull-doc <MCP URL> {d} plans/<name>.werkbaum --git-commit`\n"
        )),
        _ => text.push_str(
            "5. With `text`, each tool returns the new text: write it back to the file yourself \
             (only when `blocking` is false) and use it as the `text` of your next call.\n\
             6. Finish with `werkbaum_inspect` on the result and a short summary.\n",
        ),
    }
    text
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn args(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn text_of(r: &GetPromptResult) -> String {
        serde_json::to_value(&r.messages[0]).unwrap()["content"]["text"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    #[test]
    fn decompose_for_a_document_ends_with_the_pull_doc_hint() {
        let r = get(DECOMPOSE, &args(&[("id", "login"), ("document", "u-1")])).unwrap();
        let t = text_of(&r);
        assert!(t.contains("#login") && t.contains("pull-doc") && t.contains("u-1"));
        let r = get(
            DECOMPOSE,
            &args(&[("id", "#login"), ("file", "plan.werkbaum")]),
        )
        .unwrap();
        assert!(!text_of(&r).contains("pull-doc"));
    }

    #[test]
    fn review_writes_nothing_and_bad_arguments_are_precise() {
        let t = text_of(&get(REVIEW, &args(&[])).unwrap());
        assert!(t.contains("werkbaum_inspect") && t.contains("writes nothing"));
        assert_eq!(
            get(DECOMPOSE, &args(&[])).unwrap_err(),
            PromptError::Missing {
                prompt: DECOMPOSE,
                arg: "id"
            }
        );
        assert_eq!(
            get(REVIEW, &args(&[("document", "a"), ("file", "b")])).unwrap_err(),
            PromptError::Both
        );
        assert!(matches!(get("x", &args(&[])), Err(PromptError::Unknown(_))));
    }
}
