//! Every example of the README and `docs/*.md`, checked: the curl and Python SDK examples run as
//! written against a real gateway (only the URL and the token are replaced); every TOML block is a
//! configuration the gateway's types accept and `pforte check` passes; the keys
//! `docs/configuration.md` lists per table are exactly the configuration's fields, its
//! environment variables the ones the code reads; every `pforte …` / `mcp-service …` command names
//! subcommands and flags the binaries have; every relative link reaches a file and heading.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use pforte_tests::Stack;

/// The workspace root (this crate lives in `tests/`).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The documents whose examples are checked: the README and every page under `docs/`, as
/// (path from the root, text).
fn docs() -> Vec<(String, String)> {
    let root = root();
    let mut names = vec!["README.md".to_owned()];
    let mut pages: Vec<String> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    pages.sort();
    names.extend(pages);
    names
        .into_iter()
        .map(|n| {
            let text = std::fs::read_to_string(root.join(&n)).unwrap();
            (n, text)
        })
        .collect()
}

fn read(doc: &str) -> String {
    std::fs::read_to_string(root().join(doc)).unwrap_or_else(|e| panic!("{doc}: {e}"))
}

/// The first fenced block of `lang` after the heading `heading` in `doc`.
fn doc_block(doc: &str, heading: &str, lang: &str) -> String {
    let text = format!("\n{}", read(doc));
    let (_, section) = text
        .split_once(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("{doc} has no {heading:?}"));
    let (_, block) = section
        .split_once(&format!("```{lang}\n"))
        .unwrap_or_else(|| panic!("no ```{lang} block under {heading:?} in {doc}"));
    block.split_once("```").unwrap().0.to_owned()
}

/// Every fenced block of `lang` in `text`, with the line it starts on.
fn blocks(text: &str, lang: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let mut open: Option<(usize, String, String)> = None;
    for (i, line) in text.lines().enumerate() {
        match &mut open {
            None => {
                if let Some(tag) = line.trim_start().strip_prefix("```") {
                    open = Some((i + 1, tag.trim().to_owned(), String::new()));
                }
            }
            Some((start, tag, body)) => {
                if line.trim_start().starts_with("```") {
                    if tag == lang {
                        found.push((*start, std::mem::take(body)));
                    }
                    open = None;
                } else {
                    body.push_str(line);
                    body.push('\n');
                }
            }
        }
    }
    found
}

/// `text` without its fenced blocks (prose and tables only).
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            inside = !inside;
        } else if !inside {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_curl_example_calls_whoami() {
    let gw = Stack::builder().plain_http().start().await;
    let token = gw.create_token("curl-example").await.unwrap();
    let script = doc_block("docs/routes.md", "## Call a tool with curl", "sh");
    assert!(
        script.contains("URL=http://127.0.0.1:8787/mcp TOKEN=pft_…"),
        "{script}"
    );
    let script = script.replace(
        "URL=http://127.0.0.1:8787/mcp TOKEN=pft_…",
        &format!("URL={} TOKEN={token}", gw.mcp_url()),
    );
    let out = tokio::task::spawn_blocking(move || {
        Command::new("bash")
            .args(["-euo", "pipefail", "-c", &script])
            .output()
    })
    .await
    .unwrap()
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains(r#""id":2,"result""#), "{stdout}");
    assert!(stdout.contains(r#""subject":"operator""#), "{stdout}");
    assert!(stdout.contains(r#""client":"curl-example""#), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_example_calls_whoami() {
    let Some(python) = pforte_tests::python_sdk_or_skip() else {
        return;
    };
    let gw = Stack::builder().plain_http().start().await;
    let token = gw.create_token("sdk-example").await.unwrap();
    let code = doc_block(
        "docs/routes.md",
        "## Call a tool with the Python SDK",
        "python",
    )
    .replace("http://127.0.0.1:8787/mcp", &gw.mcp_url())
    .replace("pft_…", &token);
    let out =
        tokio::task::spawn_blocking(move || Command::new(python).args(["-c", &code]).output())
            .await
            .unwrap()
            .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("'subject': 'operator'"), "{stdout}");
    assert!(stdout.contains("'client': 'sdk-example'"), "{stdout}");
}

/// docs/upstream-credentials.md's configuration passes `pforte check` as written
/// (only its paths replaced), and its vault key commands work: `keygen --file` makes an
/// owner-only ring, a second `keygen` puts a new key first, `rekey` re-seals under it, and a key
/// file others can read is refused with what to do.
#[test]
fn the_upstream_auth_example_checks_and_its_vault_key_rotates() {
    use std::os::unix::fs::PermissionsExt as _;
    use std::path::Path;
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("vault.key");
    let secret = dir.path().join("wiki.token");
    // Owner-only, as the gateway requires of every secret file.
    pforte_tests::write_secret(&secret, "wiki-secret").unwrap();
    let pforte = |args: &[&str]| {
        let out = Command::new(pforte_tests::bin("pforte"))
            .args(args)
            .env_remove("PFORTE_VAULT_KEY")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let path = |p: &Path| p.display().to_string();
    let (code, out, err) = pforte(&["vault", "keygen", "--file", &path(&key), "--id", "k1"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let service = pforte_tests::bin("mcp-service");
    let block = doc_block(
        "docs/upstream-credentials.md",
        "# Upstream credentials: the per-user vault, the connect flow, the broker",
        "toml",
    )
    .replace("/etc/pforte/vault.key", &path(&key))
    .replace("/etc/pforte/wiki.token", &path(&secret))
    .replace(
        r#"command = ["github-mcp-server", "stdio"]"#,
        &format!("command = [{:?}, \"stdio\"]", path(&service)),
    );
    assert!(block.contains("kind = \"oauth\"") && block.contains("kind = \"env\""));
    let config = dir.path().join("pforte.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:0\"\ndata_dir = {:?}\n{block}",
            path(&dir.path().join("data"))
        ),
    )
    .unwrap();
    let (code, out, err) = pforte(&["check", "--config", &path(&config)]);
    assert_eq!(code, Some(0), "{out}{err}");
    let (code, out, err) = pforte(&["vault", "keygen", "--file", &path(&key), "--id", "k2"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let ring = std::fs::read_to_string(&key).unwrap();
    let ids: Vec<&str> = ring.lines().filter_map(|l| l.split(':').next()).collect();
    assert_eq!(ids, ["k2", "k1"]);
    let (code, out, err) = pforte(&["vault", "rekey", "--config", &path(&config)]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("under key \"k2\""), "{out}");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (code, _, err) = pforte(&["check", "--config", &path(&config)]);
    assert_ne!(code, Some(0));
    assert!(err.contains("chmod 600"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one clear line: {err}");
}

/// A TOML example made checkable on this machine: the data dir a temporary one, the listener
/// `127.0.0.1:0`, every absolute path in a string an owner-only file there (a vault key file a
/// real key ring), a `command` route's program `mcp-service stdio`, and a route's run-as `user` /
/// `group` dropped (only root may use them).
fn checkable(block: &str, dir: &Path) -> String {
    let mut out = format!(
        "data_dir = {:?}\nlisten = \"127.0.0.1:0\"\n",
        dir.join("data").display().to_string()
    );
    let service = pforte_tests::bin("mcp-service").display().to_string();
    for line in block.lines() {
        let key = line.split('=').next().unwrap_or("").trim();
        if matches!(key, "listen" | "data_dir" | "user" | "group") {
            continue;
        }
        if key == "command" {
            out.push_str(&format!("command = [{service:?}, \"stdio\"]\n"));
            continue;
        }
        let mut line = line.to_owned();
        for quoted in line.clone().split('"').skip(1).step_by(2) {
            if quoted.starts_with('/') && !quoted.contains(' ') {
                let name = Path::new(quoted).file_name().unwrap().to_string_lossy();
                let file = dir.join(&*name);
                if !file.exists() {
                    if name.ends_with(".key") {
                        let out = Command::new(pforte_tests::bin("pforte"))
                            .args(["vault", "keygen", "--file"])
                            .arg(&file)
                            .output()
                            .unwrap();
                        assert!(out.status.success(), "{out:?}");
                    } else {
                        pforte_tests::write_secret(&file, "example-secret").unwrap();
                    }
                }
                line = line.replace(quoted, &file.display().to_string());
            }
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// Every ```toml block of the README and docs/*.md is a configuration: the gateway's types
/// accept it as written (unknown keys are refused), and `pforte check` passes it once its
/// machine-specific parts are replaced (`checkable`).
#[test]
fn every_toml_example_is_a_configuration_pforte_check_passes() {
    let mut checked = 0;
    let mut bad = Vec::new();
    for (doc, text) in docs() {
        for (line, block) in blocks(&text, "toml") {
            let at = format!("{doc}:{line}");
            if let Err(e) = toml::from_str::<pforte::for_tests::GatewayConfig>(&block) {
                bad.push(format!("{at}: {e}"));
                continue;
            }
            let dir = tempfile::tempdir().unwrap();
            let config = dir.path().join("pforte.toml");
            std::fs::write(&config, checkable(&block, dir.path())).unwrap();
            let out = Command::new(pforte_tests::bin("pforte"))
                .args(["check", "--config"])
                .arg(&config)
                .env_remove("PFORTE_VAULT_KEY")
                .output()
                .unwrap();
            if !out.status.success() {
                bad.push(format!(
                    "{at}: pforte check: {}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            checked += 1;
        }
    }
    assert!(bad.is_empty(), "{bad:#?}");
    assert!(checked >= 8, "only {checked} TOML examples found");
}

/// The fields of the configuration table `table` (`""`: the top level; `[tls.acme]`,
/// `[[routes]]`, `[tools.NAME]`), from the gateway's own types: a key they do not know is
/// refused with the list of those they do.
fn fields_of(table: &str) -> BTreeSet<String> {
    let header = table.replace("NAME", "x").replace("\"URI\"", "x");
    let prefix = if header.starts_with("[routes.") {
        "[[routes]]\n"
    } else if header.starts_with("[virtual.") {
        "[[virtual]]\n"
    } else {
        ""
    };
    let probe = format!("{prefix}{header}\nnot_a_key = 1\n");
    let err = toml::from_str::<pforte::for_tests::GatewayConfig>(&probe)
        .err()
        .unwrap_or_else(|| panic!("{table}: not_a_key accepted"))
        .to_string();
    let (_, expected) = err
        .split_once("expected")
        .unwrap_or_else(|| panic!("{table}: {err}"));
    expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// docs/configuration.md's sections that document one table: (the table as its heading writes
/// it, the keys its rows name). A row's key `[T.F…]` inside the section of `T` names `F`.
fn documented_tables() -> Vec<(String, BTreeSet<String>)> {
    let text = read("docs/configuration.md");
    let mut sections: Vec<(String, BTreeSet<String>)> = Vec::new();
    let mut current: Option<String> = None;
    for line in prose(&text).lines() {
        if let Some(heading) = line.strip_prefix("## ") {
            current = if heading == "Top level" {
                Some(String::new())
            } else if heading.starts_with("`[") && heading.ends_with("]`") {
                Some(heading.trim_matches('`').to_owned())
            } else {
                None
            };
            if let Some(t) = &current {
                sections.push((t.clone(), BTreeSet::new()));
            }
            continue;
        }
        let (Some(table), Some(row)) = (&current, line.strip_prefix("| ")) else {
            continue;
        };
        let first = row.split(" | ").next().unwrap_or("");
        if first == "key" || first.starts_with("---") {
            continue;
        }
        let path = table.trim_matches(|c| c == '[' || c == ']');
        let keys = &mut sections.last_mut().unwrap().1;
        for key in first.split('`').skip(1).step_by(2) {
            let key = key.trim_matches(|c| c == '[' || c == ']');
            let key = key
                .strip_prefix(&format!("{path}."))
                .filter(|_| !path.is_empty())
                .unwrap_or(key);
            keys.insert(key.split('.').next().unwrap().to_owned());
        }
    }
    sections
}

/// docs/configuration.md lists, for each table it has a section for, exactly the keys the
/// gateway's configuration types accept there: a new key, a renamed or a removed one fails here.
#[test]
fn configuration_reference_lists_exactly_the_keys_of_each_table() {
    let sections = documented_tables();
    let names: Vec<&str> = sections.iter().map(|(t, _)| t.as_str()).collect();
    for needed in [
        "",
        "[upstream]",
        "[[routes]]",
        "[tls.acme]",
        "[oauth]",
        "[limits]",
    ] {
        assert!(
            names.contains(&needed),
            "no section for {needed:?}: {names:?}"
        );
    }
    let mut bad = Vec::new();
    for (table, documented) in &sections {
        let fields = fields_of(table);
        let missing: Vec<_> = fields.difference(documented).collect();
        let unknown: Vec<_> = documented.difference(&fields).collect();
        if !missing.is_empty() || !unknown.is_empty() {
            bad.push(format!(
                "{table:?}: not documented {missing:?}, not a key {unknown:?}"
            ));
        }
    }
    assert!(bad.is_empty(), "{bad:#?}");
}

/// The environment variables docs/configuration.md gives for keys are exactly the overrides
/// the configuration loader reads.
#[test]
fn configuration_reference_names_exactly_the_environment_overrides() {
    let names = |text: &str, prefix: &str| -> BTreeSet<String> {
        text.split(prefix)
            .skip(1)
            .map(|rest| {
                let end = rest
                    .find(|c: char| !(c.is_ascii_uppercase() || c == '_'))
                    .unwrap_or(rest.len());
                format!("PFORTE_{}", &rest[..end])
            })
            .collect()
    };
    let code = names(&read("gateway/src/config/file.rs"), "env(\"PFORTE_");
    let env_column: String = prose(&read("docs/configuration.md"))
        .lines()
        .filter_map(|l| l.strip_prefix("| "))
        .filter_map(|row| row.split(" | ").nth(1).map(|c| format!("{c} ")))
        .collect();
    let documented = names(&env_column, "PFORTE_");
    assert!(code.len() >= 15, "{code:?}");
    assert_eq!(
        documented, code,
        "docs/configuration.md's env column vs the loader"
    );
}

/// What `binary SUBCOMMAND… --help` lists: (subcommands, flags).
type Help = (BTreeSet<String>, BTreeSet<String>);

/// The subcommands and flags `binary SUBCOMMAND… --help` lists.
fn help(binary: &str, path: &[String]) -> Help {
    let out = Command::new(pforte_tests::bin(binary))
        .args(path)
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success(), "{binary} {path:?} --help: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut commands = BTreeSet::new();
    let mut flags = BTreeSet::new();
    let mut in_commands = false;
    for line in text.lines() {
        if !line.starts_with(' ') {
            in_commands = line.starts_with("Commands:");
            continue;
        }
        let word = line.split_whitespace().next().unwrap_or("");
        // A command's own line is indented two spaces; its description's next lines more.
        if in_commands && !line.starts_with("   ") {
            commands.insert(word.to_owned());
        }
        for w in line.split(|c: char| c.is_whitespace() || c == ',' || c == '[' || c == ']') {
            if let Some(flag) = w.strip_prefix("--") {
                let flag = flag.split(['=', '<']).next().unwrap();
                if !flag.is_empty() {
                    flags.insert(flag.to_owned());
                }
            }
        }
    }
    (commands, flags)
}

/// The command lines of a document: every line of its ```sh blocks (continuations joined) and
/// every inline code span.
fn command_lines(text: &str) -> Vec<String> {
    let mut lines = Vec::new();
    for (_, block) in blocks(text, "sh") {
        lines.extend(
            block
                .replace("\\\n", " ")
                .lines()
                .map(|l| l.split(" #").next().unwrap().to_owned()),
        );
    }
    lines.extend(prose(text).split('`').skip(1).step_by(2).map(str::to_owned));
    lines
}

/// Every `pforte …` and `mcp-service …` command the README and docs/*.md show names
/// subcommands the binary has and flags that subcommand takes (`--help` is the reference).
#[test]
fn every_documented_command_names_real_subcommands_and_flags() {
    let mut helps: BTreeMap<(String, Vec<String>), Help> = BTreeMap::new();
    let mut checked = 0;
    let mut bad = Vec::new();
    for (doc, text) in docs() {
        for line in command_lines(&text) {
            let words: Vec<&str> = line.split_whitespace().collect();
            for (i, word) in words.iter().enumerate() {
                let binary = match *word {
                    w if w == "pforte" || w.ends_with("/pforte") => "pforte",
                    w if w == "mcp-service" || w.ends_with("/mcp-service") => "mcp-service",
                    _ => continue,
                };
                // A command, not a name: first on the line, after a shell operator, or run in a
                // container (`exec gateway pforte …`, `-- pforte …`).
                let before = if i == 0 { "" } else { words[i - 1] };
                if !matches!(
                    before,
                    "" | "&&" | ";" | "|" | "$" | "sudo" | "--" | "gateway" | "mcp-service"
                ) {
                    continue;
                }
                let mut path: Vec<String> = Vec::new();
                let mut flags = Vec::new();
                for w in &words[i + 1..] {
                    if matches!(*w, "&&" | "||" | ";" | "|") || w.starts_with('#') {
                        break;
                    }
                    if let Some(flag) = w.trim_start_matches('[').strip_prefix("--") {
                        let flag = flag
                            .split(['=', ']', ')', '`', ','])
                            .next()
                            .unwrap()
                            .to_owned();
                        if !flag.is_empty() {
                            flags.push(flag);
                        }
                        continue;
                    }
                    if flags.is_empty() {
                        let key = (binary.to_owned(), path.clone());
                        let (commands, _) = helps
                            .entry(key.clone())
                            .or_insert_with(|| help(binary, &path));
                        if commands.contains(*w) {
                            path.push((*w).to_owned());
                        }
                    }
                }
                let key = (binary.to_owned(), path.clone());
                let (_, known) = helps
                    .entry(key)
                    .or_insert_with(|| help(binary, &path))
                    .clone();
                for flag in flags {
                    if !known.contains(&flag) {
                        bad.push(format!(
                            "{doc}: `{binary} {}` has no --{flag}",
                            path.join(" ")
                        ));
                    }
                }
                checked += 1;
            }
        }
    }
    assert!(bad.is_empty(), "{bad:#?}");
    assert!(checked >= 40, "only {checked} commands found");
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a markdown file's headings (a repeated heading gets `-1`, `-2`, …).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for line in prose(text).lines() {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if (1..=6).contains(&hashes) && line[hashes..].starts_with(' ') {
            let a = anchor(&line[hashes..]);
            let n = seen.entry(a.clone()).or_default();
            out.insert(if *n == 0 {
                a.clone()
            } else {
                format!("{a}-{n}")
            });
            *n += 1;
        }
    }
    out
}

/// Every relative link of the README, docs/*.md and the other top-level documents reaches an
/// existing file, and, with a `#fragment` into a markdown file, one of its headings.
#[test]
fn every_relative_link_resolves() {
    let root = root();
    let mut documents = docs();
    for extra in ["SECURITY.md", "ARCHITECTURE.md", "CHANGELOG.md"] {
        documents.push((extra.to_owned(), read(extra)));
    }
    let mut checked = 0;
    let mut bad = Vec::new();
    for (doc, text) in &documents {
        let base = Path::new(doc).parent().unwrap();
        for link in prose(text).split("](").skip(1) {
            let Some(target) = link.split([')', ' ']).next() else {
                continue;
            };
            if target.contains(':') || target.is_empty() {
                continue; // https:, mailto:
            }
            let (path, fragment) = target.split_once('#').unwrap_or((target, ""));
            let file = if path.is_empty() {
                root.join(doc)
            } else {
                root.join(base).join(path)
            };
            checked += 1;
            if !file.exists() {
                bad.push(format!("{doc}: {target}: no such file"));
                continue;
            }
            if !fragment.is_empty() && file.extension().is_some_and(|e| e == "md") {
                let text = std::fs::read_to_string(&file).unwrap();
                if !anchors(&text).contains(fragment) {
                    bad.push(format!("{doc}: {target}: no such heading"));
                }
            }
        }
    }
    assert!(bad.is_empty(), "{bad:#?}");
    assert!(checked >= 50, "only {checked} links found");
}

/// docs/development.md names exactly the fuzz targets `fuzz/fuzz_targets/` has.
#[test]
fn the_fuzz_targets_named_are_the_ones_there_are() {
    let text = read("docs/development.md");
    let (_, rest) = text
        .split_once("\nTargets: ")
        .expect("docs/development.md lists the fuzz targets");
    let (list, _) = rest.split_once(" (").unwrap();
    let named: BTreeSet<String> = list
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect();
    let there: BTreeSet<String> = std::fs::read_dir(root().join("fuzz/fuzz_targets"))
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            name.strip_suffix(".rs").map(str::to_owned)
        })
        .collect();
    assert_eq!(named, there);
}

/// The README stays a start page (issue 41): the reference lives under docs/.
#[test]
fn the_readme_is_a_start_page() {
    let lines = read("README.md").lines().count();
    assert!(
        lines <= 250,
        "README.md has {lines} lines; move reference text to docs/"
    );
}
