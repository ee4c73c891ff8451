//! Tests of the audit log: the record and its time, cut names, sinks, rotation, the bounded
//! queue and open errors.

use super::*;

fn record(name: Option<&str>) -> AuditRecord<'_> {
    AuditRecord {
        time_ms: 1_764_623_321_123,
        request_id: "r1",
        route: "mcp",
        virtual_server: None,
        member: None,
        principal: Some(AuditPrincipal {
            kind: "oauth",
            subject: "alice",
            client: "c1",
        }),
        method: "tools/call",
        name,
        decision: AuditDecision::Allowed,
        reason: None,
        rule: None,
        upstream_status: Some(200),
        duration_ms: 3,
    }
}

#[test]
fn time_is_rfc3339_utc_with_milliseconds() {
    assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
    assert_eq!(rfc3339_ms(951_782_400_000), "2000-02-29T00:00:00.000Z");
    assert_eq!(rfc3339_ms(1_764_623_321_123), "2025-12-01T21:08:41.123Z");
    assert_eq!(rfc3339_ms(4_102_444_799_999), "2099-12-31T23:59:59.999Z");
}

#[test]
fn record_serialises_every_key() {
    let line = serde_json::to_value(record(Some("whoami"))).unwrap();
    assert_eq!(
        line,
        serde_json::json!({
            "time": "2025-12-01T21:08:41.123Z", "request_id": "r1", "route": "mcp",
            "virtual": null, "member": null,
            "principal": {"kind": "oauth", "subject": "alice", "client": "c1"},
            "method": "tools/call", "name": "whoami", "decision": "allowed",
            "reason": null, "rule": null, "upstream_status": 200, "duration_ms": 3,
        })
    );
    let mut denied = record(None);
    denied.principal = None;
    denied.decision = AuditDecision::Denied;
    denied.reason = Some(reason::UNAUTHENTICATED);
    denied.upstream_status = None;
    let v = serde_json::to_value(denied).unwrap();
    assert_eq!(v["principal"], serde_json::Value::Null);
    assert_eq!(v["decision"], "denied");
    assert_eq!(v["reason"], "unauthenticated");
    assert_eq!(v.as_object().unwrap().len(), 13);
    // Through a virtual server: its name and the member route.
    let mut through = record(Some("mcp_whoami"));
    through.route = "team";
    (through.virtual_server, through.member) = (Some("team"), Some("mcp"));
    let v = serde_json::to_value(through).unwrap();
    assert_eq!(
        (&v["virtual"], &v["member"]),
        (&"team".into(), &"mcp".into())
    );
}

#[test]
fn names_and_methods_are_cut_and_escaped() {
    let huge = "x".repeat(4 << 20);
    let mut rec = record(Some(&huge));
    let method = format!("tools/call\n{}", "y".repeat(1 << 20));
    rec.method = &method;
    let line = serde_json::to_string(&rec).unwrap();
    assert!(line.len() < 1024, "{}", line.len());
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    let name = v["name"].as_str().unwrap();
    assert!(
        name.ends_with(&format!("…(+{} bytes)", (4 << 20) - 256)),
        "{name}"
    );
    assert!(v["method"].as_str().unwrap().starts_with("tools/call\\ny"));
    let bidi = record(Some("who\u{202e}ami"));
    let v = serde_json::to_value(bidi).unwrap();
    assert_eq!(v["name"], "who\\u{202e}ami");
}

#[test]
fn rotation_decisions() {
    let r = Rotation {
        max_bytes: 100,
        keep: 3,
    };
    assert!(!r.due(0, 500), "an empty file takes any line");
    assert!(!r.due(60, 40));
    assert!(r.due(61, 40));
    assert!(
        !Rotation {
            max_bytes: 0,
            keep: 3
        }
        .due(u64::MAX - 1, 10),
        "0: never"
    );
    let p = Path::new("/var/log/audit.jsonl");
    let plan: Vec<(String, String)> = r
        .renames(p)
        .into_iter()
        .map(|(a, b)| (a.display().to_string(), b.display().to_string()))
        .collect();
    assert_eq!(
        plan,
        [
            ("/var/log/audit.jsonl.2", "/var/log/audit.jsonl.3"),
            ("/var/log/audit.jsonl.1", "/var/log/audit.jsonl.2"),
            ("/var/log/audit.jsonl", "/var/log/audit.jsonl.1"),
        ]
        .map(|(a, b)| (a.to_owned(), b.to_owned()))
    );
}

#[test]
fn the_file_rotates_by_size_and_keeps_n() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let rotation = Rotation {
        max_bytes: 1000,
        keep: 2,
    };
    let log = AuditLog::open_with(&AuditSink::File(path.clone()), 64, rotation).unwrap();
    let one = serde_json::to_vec(&record(Some("whoami"))).unwrap().len() as u64 + 1;
    for _ in 0..40 {
        log.record(&record(Some("whoami")));
        log.flush();
    }
    let len = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    let numbered = |n: u32| PathBuf::from(format!("{}.{n}", path.display()));
    assert!(len(&path) <= 1000);
    assert!(len(&numbered(1)) <= 1000 && len(&numbered(1)) > 1000 - one);
    assert!(len(&numbered(2)) > 0);
    assert!(!numbered(3).exists(), "keep = 2");
    // SIGHUP's reopen after another program moved the file starts a new count.
    std::fs::rename(&path, dir.path().join("moved")).unwrap();
    log.reopen();
    log.record(&record(Some("whoami")));
    log.flush();
    assert_eq!(len(&path), one);
}

#[test]
fn sinks_parse() {
    assert_eq!("off".parse::<AuditSink>().unwrap(), AuditSink::Off);
    assert_eq!("stdout".parse::<AuditSink>().unwrap(), AuditSink::Stdout);
    assert_eq!(
        "/var/log/a.jsonl".parse::<AuditSink>().unwrap(),
        AuditSink::File("/var/log/a.jsonl".into())
    );
    assert!("".parse::<AuditSink>().is_err());
}

#[test]
fn a_full_queue_drops_and_counts_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let log = AuditLog::open_with(&AuditSink::File(path.clone()), 4, Rotation::default()).unwrap();
    // Hold the writer so nothing drains.
    let (entered_tx, entered) = mpsc::channel();
    let (release, release_rx) = mpsc::channel();
    let inner = log.inner.as_ref().unwrap();
    inner.tx.send(Msg::Hold(entered_tx, release_rx)).unwrap();
    entered.recv().unwrap();
    let started = std::time::Instant::now();
    for _ in 0..100 {
        log.record(&record(Some("whoami")));
    }
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(log.dropped(), 96);
    release.send(()).unwrap();
    log.flush();
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.lines().count(), 4);
}

#[test]
fn off_records_nothing() {
    let log = AuditLog::open(&AuditSink::Off).unwrap();
    assert!(!log.is_enabled());
    log.record(&record(None));
    log.reopen();
    log.flush();
    assert_eq!(log.dropped(), 0);
}

#[test]
fn an_unopenable_path_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    // A missing directory is created; a file where the directory should be is not.
    std::fs::write(dir.path().join("not-a-dir"), "").unwrap();
    let path = dir.path().join("not-a-dir").join("audit.jsonl");
    let err = AuditLog::open(&AuditSink::File(path.clone())).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("cannot open the audit log"), "{text}");
    assert!(text.contains(&path.display().to_string()), "{text}");
}
