//! End to end, file modes: `pforte up` on a data dir that already exists world-readable
//! leaves it 0700 with every file Pforte created in it 0600 (the SQLite databases with their
//! `-wal`/`-shm`, the document store, generated files), so no other local user can read the
//! server key, the password hashes or the token hashes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::Signal;
use pforte_tests::PforteUp;

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        out.push(path.clone());
        if entry.file_type().unwrap().is_dir() {
            walk(&path, out);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_keeps_the_data_dir_owner_only() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("pforte-data");
    std::fs::create_dir(&data).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    // Ready: both processes have opened their stores (and a SIGINT now stops both).
    let mut up = PforteUp::options().data_dir(&data).start().await.unwrap();
    let mut entries = Vec::new();
    walk(&data, &mut entries);
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&data), 0o700, "the data dir");
    let mut files = 0;
    for p in &entries {
        let meta = std::fs::symlink_metadata(p).unwrap();
        if meta.is_dir() {
            assert_eq!(mode(p), 0o700, "{}", p.display());
        } else {
            files += 1;
            assert_eq!(mode(p) & 0o077, 0, "{} is {:o}", p.display(), mode(p));
        }
    }
    for name in ["oauth.db", "oauth.db-wal", "pforte.db", "pforte.db-wal"] {
        assert!(
            entries
                .iter()
                .any(|p| p.file_name().is_some_and(|n| n == name)),
            "{name} in {entries:#?}"
        );
    }
    assert!(files >= 4, "{entries:#?}");
    up.proc
        .signal_and_wait(Signal::SIGINT, Duration::from_secs(10))
        .unwrap();
}
