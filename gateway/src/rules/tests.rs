//! The engine on its own: each variable, first match wins, typed numbers, string functions,
//! lists, errors at compile time (with positions) and at run time (fail closed for deny).

use super::*;

fn rule(name: &str, when: &str, effect: Effect) -> RuleConfig {
    RuleConfig {
        name: name.to_owned(),
        routes: None,
        when: when.to_owned(),
        effect,
        message: (effect != Effect::Allow).then(|| format!("{name} says no")),
    }
}

fn rules(configs: &[RuleConfig]) -> Rules {
    match Rules::compile(configs, &["mcp", "werkbaum"]) {
        Ok(r) => r,
        Err(e) => panic!("{e}"),
    }
}

fn compile_error(configs: &[RuleConfig]) -> RuleError {
    match Rules::compile(configs, &["mcp", "werkbaum"]) {
        Ok(_) => panic!("compiled"),
        Err(e) => e,
    }
}

const GROUPS: [String; 0] = [];

fn input<'a>(tool: Option<&'a str>, args: Option<&'a serde_json::Value>) -> Input<'a> {
    Input {
        user: User {
            name: "ann",
            email: Some("ann@example.com"),
            groups: &GROUPS,
            roles: &GROUPS,
            kind: "oauth",
        },
        client: Client {
            id: "c1",
            name: Some("Claude"),
        },
        route: "werkbaum",
        tool: tool.map(|name| Tool {
            name,
            annotations: None,
        }),
        args,
        method: if tool.is_some() {
            "tools/call"
        } else {
            "initialize"
        },
        ip: Some(
            "127.0.0.1"
                .parse()
                .unwrap_or(std::net::IpAddr::from([0; 4])),
        ),
        now_ms: 1_800_000_000_000,
    }
}

fn decided(rules: &Rules, input: &Input<'_>) -> Option<(String, Effect)> {
    rules.decide(input).map(|v| (v.rule.to_owned(), v.effect))
}

#[test]
fn deny_by_argument_and_only_then() {
    let r = rules(&[rule(
        "no-secret",
        r#"tool.name == "werkbaum_edit" && args.doc.startsWith("secret/")"#,
        Effect::Deny,
    )]);
    let secret = serde_json::json!({"doc": "secret/plan.wb"});
    let open = serde_json::json!({"doc": "open/plan.wb"});
    let v = r.decide(&input(Some("werkbaum_edit"), Some(&secret)));
    assert_eq!(
        v,
        Some(Verdict {
            rule: "no-secret",
            effect: Effect::Deny,
            message: "no-secret says no"
        })
    );
    assert_eq!(
        decided(&r, &input(Some("werkbaum_edit"), Some(&open))),
        None
    );
    assert_eq!(
        decided(&r, &input(Some("werkbaum_read"), Some(&secret))),
        None
    );
    // No tool (initialize): the rule's `&&` is false before `args.doc` is read.
    assert_eq!(decided(&r, &input(None, None)), None);
}

#[test]
fn numbers_stay_numbers() {
    let r = rules(&[rule("big", "args.amount > 1000", Effect::Approve)]);
    for (amount, held) in [
        (serde_json::json!(1500), true),
        (serde_json::json!(1000), false),
        (serde_json::json!(1000.5), true),
        (serde_json::json!(-3), false),
        (serde_json::json!(u64::MAX), true),
    ] {
        let args = serde_json::json!({ "amount": amount });
        let got = decided(&r, &input(Some("transfer"), Some(&args)));
        assert_eq!(got.is_some(), held, "{amount}");
    }
}

#[test]
fn first_match_wins_in_file_order() {
    let r = rules(&[
        rule("ann-may", r#"user.name == "ann""#, Effect::Allow),
        rule("nobody", "true", Effect::Deny),
    ]);
    assert_eq!(
        decided(&r, &input(Some("t"), None)),
        Some(("ann-may".to_owned(), Effect::Allow))
    );
    let r = rules(&[
        rule("nobody", "true", Effect::Deny),
        rule("ann-may", r#"user.name == "ann""#, Effect::Allow),
    ]);
    assert_eq!(
        decided(&r, &input(Some("t"), None)),
        Some(("nobody".to_owned(), Effect::Deny))
    );
}

#[test]
fn every_variable_is_readable() {
    let groups = ["finance".to_owned(), "eng".to_owned()];
    let roles = ["approver".to_owned()];
    let annotations = serde_json::json!({"destructiveHint": true});
    let args = serde_json::json!({"tags": ["a", "b"], "n": 2});
    let mut i = input(Some("drop"), Some(&args));
    i.user.groups = &groups;
    i.user.roles = &roles;
    i.tool = Some(Tool {
        name: "drop",
        annotations: Some(&annotations),
    });
    for when in [
        r#"user.name == "ann" && user.email.endsWith("@example.com") && user.kind == "oauth""#,
        r#""finance" in user.groups && "approver" in user.roles"#,
        r#"client.id == "c1" && client.name == "Claude""#,
        r#"route.name == "werkbaum""#,
        r#"tool.name == "drop" && tool.annotations.destructiveHint"#,
        r#""b" in args.tags && args.n == 2 && size(args) == 2"#,
        r#"method == "tools/call""#,
        r#"request.ip == "127.0.0.1" && request.time > timestamp("2020-01-01T00:00:00Z")"#,
        r#"request.time.getFullYear() == 2027"#,
        r#"args.tags.exists(t, t == "a")"#,
        r#"user.name.lowerAscii() == "ann""#,
    ] {
        let r = rules(&[rule("r", when, Effect::Deny)]);
        assert!(r.decide(&i).is_some(), "{when}");
    }
    // Absent things are empty, not errors: a static token has no email, nothing has no tool.
    let mut s = input(None, None);
    s.user.email = None;
    s.user.kind = "static";
    s.client.name = None;
    for when in [
        "user.email == null && client.name == null",
        r#"tool.name == "" && size(tool.annotations) == 0 && size(args) == 0"#,
        r#"!("finance" in user.groups)"#,
    ] {
        let r = rules(&[rule("r", when, Effect::Deny)]);
        assert!(r.decide(&s).is_some(), "{when}");
    }
}

#[test]
fn routes_limit_a_rule() {
    let mut on_mcp = rule("mcp-only", "true", Effect::Deny);
    on_mcp.routes = Some(vec!["mcp".to_owned()]);
    let r = rules(&[on_mcp]);
    assert!(r.covers("mcp") && !r.covers("werkbaum"));
    assert_eq!(decided(&r, &input(Some("t"), None)), None);
}

#[test]
fn a_failing_deny_fails_closed_on_a_call_and_an_allow_never_grants() {
    let r = rules(&[rule("amount", "args.amount > 1000", Effect::Deny)]);
    // Missing key, a string where a number was expected: refused.
    for args in [serde_json::json!({}), serde_json::json!({"amount": "5000"})] {
        assert_eq!(
            decided(&r, &input(Some("transfer"), Some(&args))),
            Some(("amount".to_owned(), Effect::Deny)),
            "{args}"
        );
    }
    // No tool: no arguments to be wrong about.
    assert_eq!(decided(&r, &input(None, None)), None);
    let r = rules(&[
        rule("broken-allow", "args.missing == 1", Effect::Allow),
        rule("deny-rest", r#"tool.name == "transfer""#, Effect::Deny),
    ]);
    assert_eq!(
        decided(&r, &input(Some("transfer"), None)),
        Some(("deny-rest".to_owned(), Effect::Deny))
    );
    // A value that is not a bool is an error too.
    let r = rules(&[rule("not-bool", "args", Effect::Deny)]);
    assert!(r.decide(&input(Some("t"), None)).is_some());
}

#[test]
fn static_rules_hide_tools_from_lists() {
    let r = rules(&[
        rule(
            "finance-only",
            r#"tool.name == "transfer" && !("finance" in user.groups)"#,
            Effect::Deny,
        ),
        rule("secret", r#"args.doc.startsWith("secret/")"#, Effect::Deny),
    ]);
    assert!(!r.reads_args("x") || r.reads_args("werkbaum"));
    assert!(r.filters_lists("werkbaum"));
    assert!(r.hides(&input(Some("transfer"), None)));
    assert!(!r.hides(&input(Some("werkbaum_edit"), None)));
    let finance = ["finance".to_owned()];
    let mut member = input(Some("transfer"), None);
    member.user.groups = &finance;
    assert!(!member.user.groups.is_empty() && !r.hides(&member));
    // An allow that reads args before the static deny: the tool may be allowed, so listed.
    let r = rules(&[
        rule("small", "args.amount < 10", Effect::Allow),
        rule("transfer", r#"tool.name == "transfer""#, Effect::Deny),
    ]);
    assert!(!r.hides(&input(Some("transfer"), None)));
    // Approval is not a refusal: listed.
    let r = rules(&[rule("ask", r#"tool.name == "transfer""#, Effect::Approve)]);
    assert!(!r.hides(&input(Some("transfer"), None)));
    assert!(!r.reads_args("werkbaum") && r.filters_lists("werkbaum"));
}

#[test]
fn check_names_the_rule_and_position() {
    let e = compile_error(&[rule(
        "typo",
        r#"tool.name == "x" && arg.doc.startsWith("s")"#,
        Effect::Deny,
    )]);
    let text = e.to_string();
    assert!(text.contains(r#""typo""#), "{text}");
    assert!(text.contains("when:1:21: unknown variable `arg`"), "{text}");
    assert!(
        text.ends_with(&format!("  | {}^", " ".repeat(20))),
        "{text}"
    );

    let e = compile_error(&[rule("broken", "true )", Effect::Deny)]);
    let text = e.to_string();
    assert!(
        text.contains(r#"[[policy]] "broken": when:1:6: Syntax error"#),
        "{text}"
    );
    assert!(text.ends_with("  | true )\n  |      ^"), "{text}");

    // A second line: its own line number and column.
    let e = compile_error(&[rule("two", "true &&\n  nope", Effect::Deny)]);
    assert!(
        e.to_string().contains("when:2:3: unknown variable `nope`"),
        "{e}"
    );

    // Comprehension variables are bound, not unknown; type names are known.
    rules(&[rule(
        "ok",
        "args.items.all(i, i.size > 0) && type(args.n) == int",
        Effect::Deny,
    )]);

    let e = compile_error(&[
        rule("same", "true", Effect::Deny),
        rule("same", "false", Effect::Deny),
    ]);
    assert_eq!(
        e,
        RuleError::Duplicate {
            rule: "same".to_owned()
        }
    );

    let mut elsewhere = rule("elsewhere", "true", Effect::Deny);
    elsewhere.routes = Some(vec!["nowhere".to_owned()]);
    assert_eq!(
        compile_error(&[elsewhere]),
        RuleError::UnknownRoute {
            rule: "elsewhere".to_owned(),
            route: "nowhere".to_owned()
        }
    );
    assert_eq!(
        compile_error(&[rule("", "true", Effect::Deny)]),
        RuleError::Unnamed { index: 1 }
    );
}

#[test]
fn line_columns_count_characters() {
    use super::compile::line_column;
    assert_eq!(line_column("abc", 0), (1, 1));
    assert_eq!(line_column("ä.b", 3), (1, 3));
    assert_eq!(line_column("a\nbc", 3), (2, 2));
}

#[test]
fn arguments_are_read_from_the_body() {
    let body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"n":1}}}"#;
    assert_eq!(input::arguments(body), Some(serde_json::json!({"n": 1})));
    assert_eq!(input::arguments(b"{}"), None);
}

/// The guards never change a rule's answer: wherever they rule a rule out, the program says
/// `false` too (a guard is only a leading `&&` term), over the benchmark's rules and others, for
/// OAuth and static callers, with and without arguments and annotations.
#[test]
fn guards_rule_out_only_what_the_program_rules_out() {
    let text = include_str!("../../../bench/policy-20.toml");
    #[derive(serde::Deserialize)]
    struct File {
        policy: Vec<RuleConfig>,
    }
    let mut configs = match toml::from_str::<File>(text) {
        Ok(f) => f.policy,
        Err(e) => panic!("{e}"),
    };
    for (i, when) in [
        r#"tool.name == "werkbaum_read" && args.document.startsWith("secret-")"#,
        r#""werkbaum_read" == tool.name && has(args.document) && args.document == "x""#,
        r#"user.email != null && user.email.endsWith("@example.com")"#,
        r#"client.name == "Claude" && method == "tools/call" && "ops" in user.roles"#,
        r#"has(tool.annotations.destructiveHint) && tool.annotations.destructiveHint"#,
        r#"args.n > 5 && tool.name == "never""#,
    ]
    .iter()
    .enumerate()
    {
        configs.push(rule(&format!("extra-{i}"), when, Effect::Deny));
    }
    let all = rules(&configs);
    let Some(env) = all.env.as_ref() else {
        panic!("no env")
    };
    let groups = ["interns".to_owned(), "ops".to_owned()];
    let annotated = serde_json::json!({"destructiveHint": true});
    let argument_sets = [
        serde_json::json!({"document": "secret-plan", "amount": 5000, "tags": ["restricted"]}),
        serde_json::json!({"document": "x", "n": 7, "path": "/etc/passwd"}),
        serde_json::json!({"n": "seven"}),
        serde_json::json!([1, 2]),
    ];
    let mut checked = 0;
    for kind in ["oauth", "static"] {
        for tool in [None, Some("werkbaum_read"), Some("transfer"), Some("never")] {
            for args in argument_sets.iter().map(Some).chain([None]) {
                for annotations in [None, Some(&annotated)] {
                    let mut i = input(tool, args);
                    i.user.kind = kind;
                    i.user.groups = &groups;
                    i.user.roles = &groups;
                    if kind == "static" {
                        i.user.email = None;
                        i.client.name = None;
                    }
                    i.tool = tool.map(|name| Tool { name, annotations });
                    let scope = i.scope(env);
                    for r in all.rules.iter() {
                        if guard::rules_out(&r.guards, &i) {
                            assert_eq!(
                                r.matches(&scope),
                                Ok(false),
                                "{} on {tool:?} {args:?}",
                                r.name
                            );
                            checked += 1;
                        }
                    }
                }
            }
        }
    }
    assert!(checked > 500, "only {checked} guarded decisions");
    let guarded = all.rules.iter().filter(|r| !r.guards.is_empty()).count();
    assert!(
        guarded >= 20,
        "{guarded} of {} rules have guards",
        all.rules.len()
    );
}
