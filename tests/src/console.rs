//! The operator console from a test: an admin's browser session signed in at `/account`
//! (cookies, forms), and headless Chromium driven by `tests/browser/console.py` over chosen
//! console pages at 1280 and 390 px, its screenshots under `<target dir>/screenshots/`.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use reqwest::Url;
use serde_json::Value;

use crate::{
    Form, Gateway,
    oauth::{Browser, Page},
    target_dir, which,
};

/// The Chromium to drive: `PFORTE_CHROMIUM`, else `chromium` or `chromium-browser` on `PATH`.
pub fn chromium() -> Option<PathBuf> {
    std::env::var_os("PFORTE_CHROMIUM")
        .map(PathBuf::from)
        .or_else(|| which("chromium"))
        .or_else(|| which("chromium-browser"))
}

/// Whether `path` is a PNG of some size (a real screenshot, not an empty page's).
pub fn is_png(path: &Path) -> bool {
    std::fs::read(path).is_ok_and(|b| b.len() > 2_000 && b.starts_with(b"\x89PNG\r\n\x1a\n"))
}

/// A browser signed in as `user` through `/admin` → `/account` → back to `/admin`.
pub async fn console_browser(gw: &Gateway, user: &str, password: &str) -> anyhow::Result<Browser> {
    let b = Browser::for_gateway(gw);
    let admin = Url::parse(&format!("{}/admin", gw.base))?;
    let login = b.get(&admin).await?.see_other()?;
    ensure!(login.path() == "/account", "/admin sent to {login}");
    let mut form = b.get(&login).await?.form()?;
    form.set("username", user)?;
    form.set("password", password)?;
    let done = b.submit(&form, None).await?.see_other()?;
    ensure!(done.path() == "/admin", "the sign-in continued to {done}");
    Ok(b)
}

/// The decision form (Approve / Reject) of approval `id` on its console page.
pub fn approval_form(page: &Page, id: &str) -> anyhow::Result<Form> {
    Form::parse_all(&page.url, &page.body)?
        .into_iter()
        .find(|f| f.field("approval") == Some(id))
        .with_context(|| format!("no decision form for {id}:\n{}", page.body))
}

/// `who` (signed in) decides approval `id` at `/admin/approvals/ID` (`step`: `approve` or
/// `reject`): the page after the 303.
pub async fn decide_approval(
    gw: &Gateway,
    who: &Browser,
    id: &str,
    step: &str,
) -> anyhow::Result<Page> {
    let page = Url::parse(&format!("{}/admin/approvals/{id}", gw.base))?;
    let page = who.get(&page).await?;
    ensure!(page.status == 200, "{} {}", page.status, page.body);
    let done = who.submit(&approval_form(&page, id)?, Some(step)).await?;
    who.get(&done.see_other()?).await
}

/// Runs `console.py` with `args` after `--chromium`, `--base` and `--admin` (the password on
/// its stdin), screenshots into `<target dir>/screenshots/`; its report (JSON), within 90 s.
pub async fn console_in_chromium(
    chromium: &Path,
    gw: &Gateway,
    admin: &str,
    password: &str,
    args: &[&str],
) -> anyhow::Result<Value> {
    browser_script("console.py", chromium, gw, admin, password, args).await
}

/// Runs `tests/browser/SCRIPT` (a Chromium driver) with `--chromium`, `--base`, `--admin`,
/// `args` and `--out-dir <target dir>/screenshots/`, the admin's password on its stdin; the
/// JSON report on its last line of stdout, within 90 s.
pub async fn browser_script(
    script: &str,
    chromium: &Path,
    gw: &Gateway,
    admin: &str,
    password: &str,
    args: &[&str],
) -> anyhow::Result<Value> {
    let shots = target_dir().join("screenshots");
    std::fs::create_dir_all(&shots)?;
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("browser")
        .join(script);
    let stem = script.trim_end_matches(".py");
    let stderr_path = shots.join(format!("{stem}-stderr.log"));
    let mut child = Command::new("python3")
        .arg(&path)
        .arg("--chromium")
        .arg(chromium)
        .args(["--base", &gw.base, "--admin", admin])
        .args(args)
        .arg("--out-dir")
        .arg(&shots)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr_path)?)
        .spawn()?;
    child
        .stdin
        .take()
        .context("stdin")?
        .write_all(format!("{password}\n").as_bytes())?;
    let started = Instant::now();
    while child.try_wait()?.is_none() {
        if started.elapsed() > Duration::from_secs(90) {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "{script} did not finish within 90 s:\n{}",
                std::fs::read_to_string(&stderr_path).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let out = child.wait_with_output()?;
    let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    ensure!(out.status.success(), "{script} failed:\n{stderr}");
    let stdout = String::from_utf8(out.stdout)?;
    serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .with_context(|| format!("{stdout}\n{stderr}"))
}
