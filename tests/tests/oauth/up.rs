//! End to end, `pforte up`: one command starts gateway + mcp-service, prints a working token and
//! the Claude Code line, stops cleanly on Ctrl-C, and a second run keeps the token; with redis,
//! what it provisions is in redis, where every gateway sees it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{path::Path, process::Command, time::Duration};

use nix::sys::signal::Signal;
use pforte_tests::{
    PforteUp, RedisServer, Stack, bin, http_client,
    oauth::{access_token, mcp_status},
    rmcp_client, whoami,
};
use serde_json::json;

/// Children of `pid` (any thread).
fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for task in tasks.flatten() {
            if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
                out.extend(
                    text.split_whitespace()
                        .filter_map(|p| p.parse::<u32>().ok()),
                );
            }
        }
    }
    out
}

async fn whoami_client(url: &str, token: &str) -> serde_json::Value {
    // scheme://host:port/readyz, whatever the route's path.
    let health = format!(
        "{}/readyz",
        url.splitn(4, '/').take(3).collect::<Vec<_>>().join("/")
    );
    let ready = pforte_tests::eventually(Duration::from_secs(20), || {
        let req = http_client(None).get(&health).send();
        async move { req.await.is_ok_and(|r| r.status() == 200) }
    })
    .await;
    assert!(ready, "pforte up never became ready");
    let client = rmcp_client(url, http_client(None), token, &[])
        .await
        .unwrap();
    let me = whoami(&client).await;
    client.cancel().await.unwrap();
    me
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_prints_a_working_token_and_a_restart_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("pforte-data");

    let mut first = PforteUp::options().data_dir(&data).start().await.unwrap();
    let banner = first.banner.clone();
    let url = first.mcp_url.clone();
    let token = first.field("Token:").unwrap().to_owned();
    assert!(
        url.starts_with("http://127.0.0.1:") && url.ends_with("/mcp"),
        "{url}"
    );
    assert!(token.starts_with("pft_"), "{token}");
    let claude = format!(
        "claude mcp add --transport http pforte {url} --header \"Authorization: Bearer {token}\""
    );
    assert!(banner.iter().any(|l| l.trim() == claude), "{banner:#?}");

    let me = whoami_client(&url, &token).await;
    assert_eq!(me["subject"], "operator");
    assert_eq!(me["client"], "pforte-up");

    // Ctrl-C stops both processes.
    let kids = children(first.proc.child.id());
    assert!(
        !kids.is_empty(),
        "mcp-service should be a child of pforte up"
    );
    let status = first
        .proc
        .signal_and_wait(Signal::SIGINT, Duration::from_secs(15))
        .unwrap();
    assert!(status.success(), "{status}");
    for kid in kids {
        assert!(
            !Path::new(&format!("/proc/{kid}")).exists()
                || std::fs::read_to_string(format!("/proc/{kid}/stat"))
                    .is_ok_and(|s| s.contains(") Z ")),
            "mcp-service {kid} outlived pforte up"
        );
    }

    // A second run reuses the data dir: the first token still works.
    let second = PforteUp::options().data_dir(&data).start().await.unwrap();
    assert!(
        second.banner.iter().any(|l| l.contains("still works")),
        "{:#?}",
        second.banner
    );
    let url = second.mcp_url.clone();
    let me = whoami_client(&url, &token).await;
    assert_eq!(me["client"], "pforte-up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_serves_stdio_and_url_routes_beside_the_built_in_service() {
    let dir = tempfile::tempdir().unwrap();
    let wiki = pforte_tests::McpService::start(&[]).unwrap();
    let stdio_data = dir.path().join("plans-data");
    pforte_tests::open_to_children(&stdio_data);
    let stdio = format!(
        "plans={} stdio --data-dir '{}'",
        bin("mcp-service").display(),
        stdio_data.display()
    );
    let mut up = PforteUp::options()
        .data_dir(&dir.path().join("pforte-data"))
        .args(&[
            "--stdio",
            &stdio,
            "--route",
            &format!("wiki={}", wiki.url()),
        ])
        .start()
        .await
        .unwrap();
    let banner = &up.banner;
    let url = up.mcp_url.clone();
    let token = up.field("Token:").unwrap().to_owned();
    let base = url.trim_end_matches("/mcp").to_owned();
    // One connector URL and one `claude mcp add` line per route.
    for (name, path) in [("plans", "/plans/mcp"), ("wiki", "/wiki/mcp")] {
        let line = format!(
            "claude mcp add --transport http {name} {base}{path} --header \"Authorization: Bearer {token}\""
        );
        assert!(
            banner.iter().any(|l| l.trim() == line),
            "{line}\n{banner:#?}"
        );
        assert!(
            banner
                .iter()
                .any(|l| l.split_whitespace().eq([name, &format!("{base}{path}")])),
            "{banner:#?}"
        );
    }
    // The built-in service and both added routes answer with the one token, and each names the
    // caller: the stdio server learns it from the bridge (`_meta` and `PFORTE_*`).
    for (path, client, kind) in [
        ("/mcp", json!("pforte-up"), "static"),
        ("/plans/mcp", json!("pforte-up"), "static"),
        ("/wiki/mcp", json!("pforte-up"), "static"),
    ] {
        let me = whoami_client(&format!("{base}{path}"), &token).await;
        assert_eq!(
            (&me["client"], me["authKind"].as_str()),
            (&client, Some(kind)),
            "{path}: {me}"
        );
    }
    up.proc
        .signal_and_wait(Signal::SIGINT, Duration::from_secs(15))
        .unwrap();
}

#[test]
fn up_refuses_a_route_flag_without_a_name() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(bin("pforte"))
        .args(["up", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .args(["--stdio", "npx -y some-server"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("expected NAME='COMMAND ARGS…'"), "{err}");
}

/// Inodes of the sockets among `pid`'s open file descriptors.
fn socket_inodes(pid: u32) -> Vec<u64> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter_map(|target| {
            let t = target.to_string_lossy().into_owned();
            t.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
        })
        .collect()
}

/// Inodes of every TCP socket (any state) in `pid`'s network namespace.
fn tcp_inodes(pid: u32) -> Vec<u64> {
    ["tcp", "tcp6"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(format!("/proc/{pid}/net/{f}")).ok())
        .flat_map(|text| {
            text.lines()
                .skip(1)
                .filter_map(|l| l.split_whitespace().nth(9)?.parse().ok())
                .collect::<Vec<u64>>()
        })
        .collect()
}

fn gone_or_zombie(pid: u32) -> bool {
    !Path::new(&format!("/proc/{pid}")).exists()
        || std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z "))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_child_listens_only_on_an_owner_only_unix_socket() {
    use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("pforte-data");
    let mut up = PforteUp::options().data_dir(&data).start().await.unwrap();
    let token = up.field("Token:").unwrap().to_owned();
    // A tools/call through the gateway works over the socket.
    let me = whoami_client(&up.mcp_url, &token).await;
    assert_eq!(me["subject"], "operator");

    let kids = children(up.proc.child.id());
    assert_eq!(kids.len(), 1, "{kids:?}");
    let kid = kids[0];
    let cmdline = std::fs::read_to_string(format!("/proc/{kid}/cmdline")).unwrap();
    assert!(cmdline.contains("unix:"), "{cmdline:?}");
    // No TCP socket at all (listening or connected) belongs to the child.
    let tcp = tcp_inodes(kid);
    let own = socket_inodes(kid);
    assert!(!own.is_empty(), "the child holds its listening socket");
    let shared: Vec<_> = own.iter().filter(|i| tcp.contains(i)).collect();
    assert!(shared.is_empty(), "TCP sockets of mcp-service: {shared:?}");

    let run = data.join("run");
    let socket = run.join("mcp.sock");
    let meta = std::fs::symlink_metadata(&socket).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let dir_mode = std::fs::metadata(&run).unwrap().permissions().mode() & 0o777;
    assert_eq!(dir_mode, 0o700);
    up.proc
        .signal_and_wait(Signal::SIGINT, Duration::from_secs(15))
        .unwrap();
    assert!(gone_or_zombie(kid));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigint_right_after_the_banner_does_not_orphan_the_child() {
    for round in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        // Before /readyz answers: the gateway may not have its signal handlers yet.
        let mut up = PforteUp::options()
            .data_dir(&dir.path().join("pforte-data"))
            .at_banner()
            .start()
            .await
            .unwrap();
        let kids = children(up.proc.child.id());
        assert!(!kids.is_empty(), "round {round}: no child");
        up.proc
            .signal_and_wait(Signal::SIGINT, Duration::from_secs(15))
            .unwrap();
        let all_gone = pforte_tests::eventually(Duration::from_secs(10), || {
            let done = kids.iter().all(|&k| gone_or_zombie(k));
            async move { done }
        })
        .await;
        assert!(
            all_gone,
            "round {round}: mcp-service {kids:?} outlived pforte up"
        );
    }
}

/// `pforte up` with `redis_url` provisions its first user in redis (the store every gateway on
/// that redis reads), not in a SQLite file in its data dir: the login its banner prints works
/// on a second gateway, `pforte serve`, on the same redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_with_redis_prints_a_login_that_a_second_gateway_on_that_redis_accepts() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let redis_url = redis.url();
    let up = PforteUp::options()
        .env("PFORTE_REDIS_URL", &redis_url)
        .start()
        .await
        .unwrap();
    let (user, password) = up.login().unwrap();
    assert!(
        !up.data_dir().join("oauth.db").exists(),
        "up opened a SQLite OAuth store beside redis"
    );

    let second = Stack::builder().redis_url(&redis_url).start().await;
    let token = access_token(&second, &user, &password, "mcp:read")
        .await
        .unwrap_or_else(|e| panic!("{user}'s login on the second gateway: {e:#}"));
    assert_eq!(
        mcp_status(&second.http(), &second.mcp_url(), &token).await,
        200
    );
}

/// Issue 37: `up --config FILE` listens where the file says, keeps its store in the file's
/// `data_dir` (so admin commands with the same `--config` find it) and uses its `public_url`;
/// the banner says where it listens. Flags win over the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_with_a_config_file_listens_and_stores_where_the_file_says() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("from-file");
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let config = dir.path().join("pforte.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:{port}\"\ndata_dir = {:?}\npublic_url = \"http://localhost:{port}\"\n",
            data.display().to_string()
        ),
    )
    .unwrap();
    let up = PforteUp::options()
        .config_only(&config)
        .data_dir(&data)
        .start()
        .await
        .unwrap();
    assert_eq!(
        up.field("Listening:").unwrap(),
        format!("http://127.0.0.1:{port}"),
        "{:#?}",
        up.banner
    );
    assert_eq!(up.mcp_url, format!("http://localhost:{port}/mcp"));
    assert!(
        data.join("oauth.db").is_file(),
        "no store in the file's data_dir {}",
        data.display()
    );
    assert!(!dir.path().join(".pforte").exists());
    // Admin commands with the same --config find that store (up made a user and a token).
    let users = pforte_tests::pforte_cmd(
        &["user", "list"],
        &["--config", config.to_str().unwrap()],
        "",
    )
    .unwrap();
    assert!(users.contains("admin"), "{users}");
    let token = up.field("Token:").unwrap().to_owned();
    let me = whoami_client(&format!("http://127.0.0.1:{port}/mcp"), &token).await;
    assert!(me.get("subject").is_some(), "{me}");
    drop(up);

    // A flag wins over the file: --listen elsewhere, the file's data dir still used.
    let again = PforteUp::options()
        .config_only(&config)
        .data_dir(&data)
        .args(&["--listen", "127.0.0.1:0"])
        // The file's public_url still names the file's port: no readiness wait through it.
        .at_banner()
        .start()
        .await
        .unwrap();
    let listening = again.field("Listening:").unwrap().to_owned();
    assert_ne!(
        listening,
        format!("http://127.0.0.1:{port}"),
        "{:#?}",
        again.banner
    );
    assert!(
        again
            .field("Token:")
            .unwrap()
            .contains("created on the first run"),
        "{:#?}",
        again.banner
    );
}
