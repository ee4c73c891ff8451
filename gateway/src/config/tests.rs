//! The configuration's rules, one test per rule: what parses, what validation refuses and how
//! it names the field, and what the settings derive. No test here touches the filesystem or the
//! environment: validation does not.
#![allow(clippy::unwrap_used)]

use super::routes::RunAsName;
use super::*;

fn cfg(toml_text: &str) -> Result<Settings, ConfigError> {
    let cfg: GatewayConfig = toml::from_str(toml_text).unwrap();
    cfg.validate()
}

#[test]
fn loopback_plain_http_is_fine_and_derives_urls() {
    let s = cfg("listen = \"127.0.0.1:9000\"").unwrap();
    assert_eq!(s.issuer(), "http://127.0.0.1:9000");
    assert_eq!(s.resource(), "http://127.0.0.1:9000/mcp");
    assert_eq!(
        s.resource_metadata_url(),
        "http://127.0.0.1:9000/.well-known/oauth-protected-resource/mcp"
    );
    assert_eq!(s.routes.len(), 1);
    assert_eq!(s.routes[0].name, "mcp");
    assert_eq!(s.routes[0].upstream.primary().authority, "127.0.0.1:8080");
    assert_eq!(s.routes[0].upstream.primary().path, "/mcp");
}

#[test]
fn metrics_listen_needs_its_own_fixed_port() {
    let s = cfg("listen = \"127.0.0.1:9000\"\nmetrics_listen = \"0.0.0.0:9100\"").unwrap();
    assert_eq!(
        s.listen.metrics_listen,
        Some("0.0.0.0:9100".parse().unwrap())
    );
    for bad in ["127.0.0.1:9000", "0.0.0.0:9000", "127.0.0.1:0"] {
        let err = cfg(&format!(
            "listen = \"127.0.0.1:9000\"\nmetrics_listen = \"{bad}\""
        ))
        .unwrap_err();
        assert!(
            err.to_string().starts_with("metrics_listen:"),
            "{bad}: {err}"
        );
    }
    // Another address on the same port is another socket.
    cfg("listen = \"127.0.0.1:9000\"\nmetrics_listen = \"127.0.0.2:9000\"").unwrap();
    let env = GatewayConfig::load(None, |k| {
        (k == "PFORTE_METRICS_LISTEN").then(|| "127.0.0.1:9464".to_owned())
    })
    .unwrap();
    assert_eq!(env.metrics_listen, Some("127.0.0.1:9464".parse().unwrap()));
}

#[test]
fn a_unix_socket_upstream_is_accepted() {
    let s = cfg("[upstream]\nurl = \"unix:/srv/pforte/run/mcp.sock\"").unwrap();
    let upstream = s.routes[0].upstream.primary();
    assert_eq!(
        upstream.socket.as_deref(),
        Some(std::path::Path::new("/srv/pforte/run/mcp.sock"))
    );
    assert_eq!(upstream.authority, "localhost");
    assert_eq!(upstream.http_url(), "http://localhost/mcp");
    let err = cfg("[upstream]\nurl = \"unix:\"").unwrap_err();
    assert!(err.to_string().starts_with("upstream.url"), "{err}");
}

#[test]
fn public_plain_http_needs_tls_or_a_proxy() {
    let err = cfg("listen = \"0.0.0.0:8443\"").unwrap_err();
    assert!(err.to_string().contains("behind_tls_proxy"), "{err}");
    let s = cfg(
        "listen = \"0.0.0.0:8080\"\nbehind_tls_proxy = true\npublic_url = \"https://MCP.example.com:443/\"",
    )
    .unwrap();
    assert_eq!(s.issuer(), "https://mcp.example.com");
}

#[test]
fn bad_values_are_named() {
    for (text, field) in [
        ("public_url = \"https://x.example/base\"", "public_url"),
        ("public_url = \"http://x.example\"", "public_url"),
        ("allowed_origins = [\"not an origin\"]", "allowed_origins"),
        ("[upstream]\nurl = \"ftp://svc/mcp\"", "upstream.url"),
        ("max_body_bytes = 10", "max_body_bytes"),
        ("scopes = [\"a b\"]\nrequired_scopes = []", "scopes"),
        ("audit_keep = 0", "audit_keep"),
        ("audit_max_bytes = 100", "audit_max_bytes"),
        ("keepalive_timeout_secs = 0", "keepalive_timeout_secs"),
        ("keepalive_timeout_secs = 86400", "keepalive_timeout_secs"),
    ] {
        let err = cfg(text).unwrap_err();
        assert!(err.to_string().starts_with(field), "{text}: {err}");
    }
}

#[test]
fn edge_bounds_have_defaults_and_an_off_switch() {
    let s = cfg("").unwrap();
    assert_eq!(s.listen.keepalive_timeout_secs, 60);
    assert_eq!(s.listen.max_connections_per_ip, 256);
    assert_eq!(s.audit.rotation.max_bytes, 100 * 1024 * 1024);
    assert_eq!(s.audit.rotation.keep, 5);
    // No rotation: any keep; no cap: 0.
    let s = cfg("audit_max_bytes = 0\naudit_keep = 0\nmax_connections_per_ip = 0").unwrap();
    assert_eq!(s.audit.rotation.max_bytes, 0);
    assert_eq!(s.listen.max_connections_per_ip, 0);
}

#[test]
fn own_origins_include_loopback_twins() {
    let s = cfg("listen = \"127.0.0.1:9000\"").unwrap();
    assert!(s.origin_allowed("http://127.0.0.1:9000"));
    assert!(s.origin_allowed("http://localhost:9000"));
    assert!(!s.origin_allowed("http://localhost:9001"));
    assert!(!s.origin_allowed("http://evil.example:9000"));
    let s = cfg("listen = \"0.0.0.0:8080\"\nbehind_tls_proxy = true\npublic_url = \"https://mcp.example.com\"").unwrap();
    assert_eq!(s.own_origins, vec!["https://mcp.example.com".to_owned()]);
}

#[test]
fn tool_rules_name_known_scopes() {
    let s = cfg("[tools.werkbaum_history]\nusers = [\"alice\"]\n[tools.x]\ndeny = true").unwrap();
    assert_eq!(s.policy().rules.len(), 2);
    let err = cfg("[tools.x]\nscopes = [\"mcp:admin\"]").unwrap_err();
    assert!(err.to_string().starts_with("tools"), "{err}");
}

#[test]
fn routes_are_served_at_their_names() {
    let s = cfg("listen = \"127.0.0.1:9000\"\n[[routes]]\nname = \"werkbaum\"\nurl = \"http://127.0.0.1:8080/mcp\"\n[[routes]]\nname = \"plans\"\nurl = \"https://plans.internal/svc/mcp\"\nread_timeout_ms = 5\n[routes.tools.x]\ndeny = true\n[tools.y]\ndeny = true").unwrap();
    // With [[routes]] and no [upstream] there is no /mcp route.
    assert_eq!(s.routes.len(), 2);
    assert_eq!(s.route_for_path("/mcp"), None);
    let w = &s.routes[s.route_for_path("/werkbaum/mcp").unwrap()];
    assert_eq!(w.name, "werkbaum");
    assert_eq!(w.resource, "http://127.0.0.1:9000/werkbaum/mcp");
    assert_eq!(
        w.metadata_url,
        "http://127.0.0.1:9000/.well-known/oauth-protected-resource/werkbaum/mcp"
    );
    assert_eq!(
        s.route_for_metadata("/.well-known/oauth-protected-resource/werkbaum/mcp"),
        Some(0)
    );
    // Two routes and none called mcp: the bare well-known path names none of them.
    assert_eq!(
        s.route_for_metadata("/.well-known/oauth-protected-resource"),
        None
    );
    let p = &s.routes[1];
    let UpstreamKind::Https { upstream, ca: None } = &p.upstream else {
        panic!("{:?}", p.upstream)
    };
    assert_eq!(upstream.authority, "plans.internal:443");
    assert_eq!(upstream.path, "/svc/mcp");
    assert_eq!(p.read_timeout_ms, 5);
    assert_eq!(p.connect_timeout_ms, 2_000);
    assert!(p.tools["x"].deny && p.tools["y"].deny);
    assert!(!w.tools.contains_key("x"));
    // [upstream] stays the route mcp at /mcp beside them.
    let file: GatewayConfig = toml::from_str("[upstream]\nurl = \"http://127.0.0.1:1/mcp\"\n[[routes]]\nname = \"a\"\nurl = \"unix:/tmp/a.sock\"").unwrap();
    assert_eq!(file.route_names(), vec!["mcp", "a"]);
    let s = file.validate().unwrap();
    assert_eq!(s.route_for_path("/mcp"), Some(0));
    assert_eq!(s.route_for_path("/a/mcp"), Some(1));
    assert_eq!(
        s.route_for_metadata("/.well-known/oauth-protected-resource"),
        Some(0)
    );
}

#[test]
fn bad_routes_name_the_route_and_the_field() {
    for (text, start) in [
        (
            "[[routes]]\nname = \"Bad_Name\"\nurl = \"http://a/mcp\"",
            "[[routes]] \"Bad_Name\": name:",
        ),
        (
            "[[routes]]\nname = \"a\"\nurl = \"http://a/mcp\"\n[[routes]]\nname = \"a\"\nurl = \"http://b/mcp\"",
            "[[routes]] \"a\": name:",
        ),
        (
            "[upstream]\nurl = \"http://a/mcp\"\n[[routes]]\nname = \"mcp\"\nurl = \"http://b/mcp\"",
            "[[routes]] \"mcp\": name:",
        ),
        (
            "[[routes]]\nname = \"a\"\nurl = \"http://a/mcp\"\ncommand = [\"sh\"]",
            "[[routes]] \"a\": url:",
        ),
        ("[[routes]]\nname = \"a\"", "[[routes]] \"a\": url:"),
        (
            "[[routes]]\nname = \"a\"\nurl = \"ftp://a/mcp\"",
            "[[routes]] \"a\": url:",
        ),
        (
            "[[routes]]\nname = \"a\"\nurls = []",
            "[[routes]] \"a\": urls:",
        ),
        (
            "[[routes]]\nname = \"a\"\nurls = [\"unix:/x\"]",
            "[[routes]] \"a\": urls:",
        ),
        (
            "[[routes]]\nname = \"a\"\nurls = [\"http://127.0.0.1:1/mcp\", \"http://127.0.0.1:1/mcp\"]",
            "[[routes]] \"a\": urls: \"http://127.0.0.1:1/mcp\" is listed twice",
        ),
        (
            "[[routes]]\nname = \"a\"\ncommand = []",
            "[[routes]] \"a\": command:",
        ),
        (
            "[[routes]]\nname = \"a\"\nurl = \"http://a/mcp\"\nca_file = \"/etc/hostname\"",
            "[[routes]] \"a\": ca_file:",
        ),
        (
            "[[routes]]\nname = \"a\"\nurl = \"http://a/mcp\"\nenv = { A = \"b\" }",
            "[[routes]] \"a\": env:",
        ),
        (
            "[[routes]]\nname = \"a\"\ncommand = [\"sh\"]\ngroup = \"root\"",
            "[[routes]] \"a\": group:",
        ),
        (
            "[[routes]]\nname = \"a\"\nurl = \"http://a/mcp\"\nuser = \"root\"",
            "[[routes]] \"a\": env:",
        ),
        (
            "[[routes]]\nname = \"a\"\ncommand = [\"sh\"]\n[routes.stdio]\nmax_line_bytes = 100",
            "[[routes]] \"a\": stdio: max_line_bytes",
        ),
        (
            "[[routes]]\nname = \"a\"\nurl = \"http://a/mcp\"\nallowed_origins = [\"x\"]",
            "[[routes]] \"a\": allowed_origins:",
        ),
        (
            "[[routes]]\nname = \"a\"\nurl = \"http://a/mcp\"\n[routes.tools.t]\nscopes = [\"nope\"]",
            "[[routes]] \"a\": tools:",
        ),
    ] {
        let err = cfg(text).unwrap_err().to_string();
        assert!(err.starts_with(start), "{text}: {err}");
    }
    let err = cfg("[[routes]]\nname = \"a\"\nurl = \"ftp://a/mcp\"").unwrap_err();
    assert!(
        err.to_string()
            .contains("http://HOST:PORT/PATH, https://HOST:PORT/PATH or unix:PATH"),
        "{err}"
    );
}

#[test]
fn command_routes_run_their_program_behind_a_bridge_socket() {
    let s = cfg("data_dir = \"/srv/pf\"\n[[routes]]\nname = \"plans\"\ncommand = [\"sh\", \"-c\", \"cat\"]\nenv = { RUST_LOG = \"warn\" }\n[routes.stdio]\nmax_children = 3").unwrap();
    let UpstreamKind::Stdio {
        upstream,
        command,
        env,
        limits,
        ..
    } = &s.routes[0].upstream
    else {
        panic!("{:?}", s.routes[0].upstream)
    };
    assert_eq!(
        upstream.socket.as_deref(),
        Some(std::path::Path::new("/srv/pf/run/stdio/plans.sock"))
    );
    assert_eq!(command[0], "sh");
    assert_eq!(env["RUST_LOG"], "warn");
    assert_eq!((limits.max_children, limits.pool), (3, 2));
    assert_eq!(limits.max_line_bytes, DEFAULT_MAX_LINE_BYTES);
    let s = cfg("[[routes]]\nname = \"p\"\ncommand = [\"sh\"]\nuser = \"root\"\n[routes.stdio]\nmax_line_bytes = 65536").unwrap();
    let UpstreamKind::Stdio { limits, run_as, .. } = &s.routes[0].upstream else {
        panic!("{:?}", s.routes[0].upstream)
    };
    assert_eq!(limits.max_line_bytes, 65536);
    assert_eq!(
        run_as.as_ref(),
        Some(&RunAsName {
            user: "root".to_owned(),
            group: None
        })
    );
}

#[test]
fn https_upstreams_take_a_ca_file() {
    // The file is preflight's to read: validation takes the path as written.
    let s =
        cfg("[upstream]\nurl = \"https://localhost:8443/mcp\"\nca_file = \"/etc/pforte/ca.pem\"")
            .unwrap();
    assert_eq!(
        s.routes[0].upstream.ca_file(),
        Some(std::path::Path::new("/etc/pforte/ca.pem"))
    );
    assert!(s.routes[0].upstream.primary().tls);
    let err = cfg("[upstream]\nurl = \"http://localhost:8080/mcp\"\nca_file = \"/x.pem\"")
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "upstream.ca_file: a CA file is only for https:// upstreams"
    );
}

#[test]
fn validation_looks_at_nothing_on_this_machine() {
    // Files, programs, directories and users that do not exist pass validation: preflight
    // checks them.
    let s = cfg("listen = \"0.0.0.0:8443\"\n[tls]\ncert = \"/nonexistent/c.pem\"\nkey = \"/nonexistent/k.pem\"\n[upstream]\nurl = \"https://a:1/mcp\"\nca_file = \"/nonexistent/ca.pem\"\n[[routes]]\nname = \"p\"\ncommand = [\"no-such-program-pforte\"]\ncwd = \"/nonexistent\"\nuser = \"no-such-user-pforte\"\ngroup = \"no-such-group-pforte\"").unwrap();
    assert_eq!(s.base_url, "https://0.0.0.0:8443");
    assert_eq!(s.routes.len(), 2);
}

#[test]
fn tool_budgets_are_checked() {
    let ok = "[limits.tools.werkbaum_write]\nrate = 1\nperiod_secs = 60\nburst = 1";
    let s = cfg(ok).unwrap();
    assert_eq!(s.limits.tools.len(), 1);
    let err = cfg("[limits.tools.\"bad name\"]\nrate = 1\nperiod_secs = 60\nburst = 1")
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("limits.tools.bad name: a tool name"),
        "{err}"
    );
    let err = cfg("[limits.tools.x]\nrate = 0\nperiod_secs = 60\nburst = 1")
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "limits.tools.x: rate, period_secs and burst must all be above 0"
    );
}

#[test]
fn unknown_keys_are_refused() {
    assert!(toml::from_str::<GatewayConfig>("lisen = \"x\"").is_err());
}

#[test]
fn origins_normalise() {
    assert_eq!(
        normalise_origin("HTTPS://Claude.AI:443").as_deref(),
        Some("https://claude.ai")
    );
    assert_eq!(
        normalise_origin("http://localhost:3000").as_deref(),
        Some("http://localhost:3000")
    );
    assert_eq!(normalise_origin("null"), None);
}

#[test]
fn env_overrides() {
    let c = GatewayConfig::load(None, |k| match k {
        "PFORTE_LISTEN" => Some("127.0.0.1:1234".into()),
        "PFORTE_ALLOWED_ORIGINS" => Some("https://a.example, https://b.example".into()),
        _ => None,
    })
    .unwrap();
    assert_eq!(c.listen.port(), 1234);
    assert_eq!(c.allowed_origins.len(), 2);
    let err = GatewayConfig::load(None, |k| {
        (k == "PFORTE_TLS_CERT").then(|| "c.pem".to_owned())
    })
    .unwrap_err();
    assert!(err.to_string().contains("both"));
}

#[test]
fn the_upstream_route_takes_replicas_from_the_file_or_the_env() {
    let s =
        cfg("[upstream]\nurls = [\"http://svc-1:8080/mcp\", \"http://svc-2:8080/mcp\"]").unwrap();
    let UpstreamKind::Replicas { instances, .. } = &s.routes[0].upstream else {
        panic!("{:?}", s.routes[0].upstream)
    };
    assert_eq!((s.routes[0].path.as_str(), instances.len()), ("/mcp", 2));
    assert_eq!(instances[1].authority, "svc-2:8080");
    let err = cfg("[upstream]\nurl = \"http://a:1/mcp\"\nurls = [\"http://b:1/mcp\"]").unwrap_err();
    assert_eq!(err.to_string(), "upstream.url: give url or urls, not both");
    let err = cfg("[upstream]\nurls = [\"http://b:1/mcp\", \"http://b:1/mcp\"]").unwrap_err();
    assert!(err.to_string().starts_with("upstream.urls: "), "{err}");

    // The env replaces the file's choice; both variables at once are refused.
    let file = GatewayConfig::parse("[upstream]\nurl = \"http://a:1/mcp\"", "t").unwrap();
    let mut c = file.clone();
    c.apply_env(|k| {
        (k == "PFORTE_UPSTREAM_URLS").then(|| "http://r-1:80/mcp, http://r-2:80/mcp".to_owned())
    })
    .unwrap();
    let upstream = c.upstream.as_ref().unwrap();
    assert_eq!(
        (
            upstream.url.as_deref(),
            upstream.urls.as_ref().map(Vec::len)
        ),
        (None, Some(2))
    );
    let mut c = file;
    let err = c
        .apply_env(|k| {
            k.starts_with("PFORTE_UPSTREAM_URL")
                .then(|| "http://x:1/mcp".to_owned())
        })
        .unwrap_err();
    assert!(err.to_string().contains("set one"), "{err}");
}

#[test]
fn routes_and_the_upstream_take_a_title() {
    let s = cfg(
        "[upstream]\nurl = \"http://a/mcp\"\ntitle = \"Main notes\"\n\
         [[routes]]\nname = \"b\"\nurl = \"http://b/mcp\"\ntitle = \"Team B\"",
    )
    .unwrap();
    let titles: Vec<_> = s.routes.iter().map(|r| r.title.as_deref()).collect();
    assert_eq!(titles, [Some("Main notes"), Some("Team B")]);
    let e = cfg("[upstream]\nurl = \"http://a/mcp\"\ntitle = \" \"")
        .unwrap_err()
        .to_string();
    assert!(e.contains("upstream.title"), "{e}");
    let e = cfg("[[routes]]\nname = \"b\"\nurl = \"http://b/mcp\"\ntitle = \"a\\u0007\"")
        .unwrap_err()
        .to_string();
    assert!(e.contains("title"), "{e}");
}

#[test]
fn routes_are_required_unless_they_say_otherwise() {
    let s = cfg("[upstream]\nrequired = false\n[[routes]]\nname = \"a\"\nurl = \"http://127.0.0.1:1/mcp\"\n[[routes]]\nname = \"b\"\nurl = \"http://127.0.0.1:2/mcp\"\nrequired = false").unwrap();
    let required: Vec<(&str, bool)> = s
        .routes
        .iter()
        .map(|r| (r.name.as_str(), r.required))
        .collect();
    assert_eq!(required, [("mcp", false), ("a", true), ("b", false)]);
    assert!(
        cfg("[[routes]]\nname = \"a\"\nurl = \"http://127.0.0.1:1/mcp\"")
            .unwrap()
            .routes[0]
            .required
    );
}

#[test]
fn otlp_endpoint_comes_from_the_file_or_the_environment_and_empty_is_off() {
    let from_file = GatewayConfig::parse(
        "[telemetry]\notlp_endpoint = \"http://127.0.0.1:4318\"\nservice_name = \"gw\"",
        "f",
    )
    .unwrap()
    .validate()
    .unwrap();
    assert_eq!(
        from_file.telemetry.map(|t| (t.traces_url, t.service_name)),
        Some((
            "http://127.0.0.1:4318/v1/traces".to_owned(),
            "gw".to_owned()
        ))
    );
    let env = |value: &'static str| {
        move |k: &str| (k == "PFORTE_OTLP_ENDPOINT").then(|| value.to_owned())
    };
    let on = GatewayConfig::load(None, env("http://collector:4318")).unwrap();
    assert_eq!(
        on.validate().unwrap().telemetry.map(|t| t.traces_url),
        Some("http://collector:4318/v1/traces".to_owned())
    );
    let off = GatewayConfig::load(None, env("")).unwrap();
    assert_eq!(off.validate().unwrap().telemetry, None);
    assert!(cfg("[telemetry]\notlp_endpoint = \"ftp://x\"").is_err());
}

#[test]
fn third_party_servers_learn_neither_identity_nor_client_ip_by_default() {
    let text = |extra_search: &str, extra_plain: &str| {
        format!(
            "listen = \"127.0.0.1:9000\"\n[vault]\nkey_file = \"/k\"\n\
             [[routes]]\nname = \"search\"\nurl = \"https://search.example/mcp\"\n{extra_search}\n\
             [routes.upstream_auth]\nkind = \"header\"\nheader = \"X-Api-Key\"\n\
             [[routes]]\nname = \"notes\"\nurl = \"http://127.0.0.1:8080/mcp\"\n{extra_plain}\n"
        )
    };
    let s = cfg(&text("", "")).unwrap();
    let (search, notes) = (&s.routes[0], &s.routes[1]);
    assert!(!search.identity_headers && !search.forward_client_ip);
    assert!(notes.identity_headers && notes.forward_client_ip);
    // Each way round when written.
    let s = cfg(&text(
        "identity_headers = true\nforward_client_ip = false",
        "identity_headers = false\nforward_client_ip = false",
    ))
    .unwrap();
    let (search, notes) = (&s.routes[0], &s.routes[1]);
    assert!(search.identity_headers && !search.forward_client_ip);
    assert!(!notes.identity_headers && !notes.forward_client_ip);
    // [upstream] takes them too.
    let s = cfg("listen = \"127.0.0.1:9000\"\n[upstream]\nidentity_headers = false").unwrap();
    assert!(!s.routes[0].identity_headers && s.routes[0].forward_client_ip);
    // A command route's bridge is the gateway's own: the keys are refused there.
    let err = cfg(
        "listen = \"127.0.0.1:9000\"\n[[routes]]\nname = \"files\"\ncommand = [\"srv\"]\n\
         identity_headers = false",
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("identity_headers") && err.to_string().contains("command"),
        "{err}"
    );
}

#[test]
fn command_routes_default_to_nobody_with_homes_beside_the_data_dir() {
    let s = cfg("data_dir = \"/var/lib/pforte\"").unwrap();
    assert_eq!(
        s.stdio_account,
        StdioAccount {
            user: "nobody".to_owned(),
            home: "/var/lib/pforte-stdio".into()
        }
    );
    let s = cfg("stdio_user = \"mcp\"\nstdio_home = \"/srv/mcp-homes\"").unwrap();
    assert_eq!(
        (
            s.stdio_account.user.as_str(),
            s.stdio_account.home.as_path()
        ),
        ("mcp", std::path::Path::new("/srv/mcp-homes"))
    );
    assert_eq!(
        cfg("").unwrap().stdio_account.home,
        std::path::Path::new(".pforte-stdio")
    );
    let e = cfg("stdio_user = \"\"").unwrap_err().to_string();
    assert_eq!(e, "stdio_user: must name an account");
}
