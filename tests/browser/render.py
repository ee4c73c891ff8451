"""Headless Chromium renders Pforte's login and consent pages (stdlib only).

Drives Chromium over the DevTools protocol on a pipe (--remote-debugging-pipe: commands on fd 3,
answers on fd 4, NUL-separated JSON), so nothing listens on a port:

1. opens the authorization URL (the gateway's login page), screenshots it;
2. types the credentials into the form and clicks "Sign in" (a real browser submission: cookie,
   CSRF field, 303 back to /authorize);
3. screenshots the consent page;
4. clicks "Approve" and catches the navigation to the client's redirect URI (the Fetch domain
   pauses it and fails it, so nothing leaves the machine) — the code, state and iss are in it;
5. reports every console message, log entry and exception Chromium saw, as JSON on stdout.

With --idp NAME, step 2 clicks "Sign in with NAME" instead, screenshots the identity
provider's sign-in page (tests/oidc/idp.mjs), types --user into its `login` field and submits;
the provider sends the browser back through the gateway's /oidc/callback to the consent page.
--shot-prefix names the screenshots (default `oauth-`).

Usage: python3 render.py --chromium PATH --url AUTHORIZE_URL --user NAME --out-dir DIR
           --callback-prefix URL [--idp NAME] [--shot-prefix P]   (password on stdin)
"""

from __future__ import annotations

import argparse
import base64
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import queue


class Cdp:
    def __init__(self, proc: subprocess.Popen, write_fd: int, read_fd: int) -> None:
        self.proc = proc
        self.write = os.fdopen(write_fd, "wb", buffering=0)
        self.read = os.fdopen(read_fd, "rb", buffering=0)
        self.next_id = 0
        self.messages: queue.Queue = queue.Queue()
        self.events: list[dict] = []
        threading.Thread(target=self._reader, daemon=True).start()

    def _reader(self) -> None:
        buf = b""
        while True:
            chunk = self.read.read(65536)
            if not chunk:
                self.messages.put(None)
                return
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                self.messages.put(json.loads(raw))

    def send(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float = 20) -> dict:
        self.next_id += 1
        mid = self.next_id
        msg = {"id": mid, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        self.write.write(json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            m = self._next(deadline, f"answer to {method}")
            if m.get("id") == mid:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)

    def _next(self, deadline: float, what: str) -> dict:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no {what}")
        try:
            m = self.messages.get(timeout=left)
        except queue.Empty:
            raise TimeoutError(f"no {what}") from None
        if m is None:
            raise RuntimeError(f"chromium closed the pipe while waiting for {what}")
        return m

    def wait_event(self, pred, what: str, timeout: float = 20) -> dict:
        """The first event (already seen or new) matching pred; consumed from the backlog."""
        for i, e in enumerate(self.events):
            if pred(e):
                del self.events[i]
                return e
        deadline = time.monotonic() + timeout
        while True:
            m = self._next(deadline, what)
            if pred(m):
                return m
            self.events.append(m)


def launch(chromium: str, stderr_path: str, window: str = "1280,800"):
    """Starts headless Chromium with the DevTools protocol on a pipe and its output in
    `stderr_path`; returns the process, its `Cdp` and the temporary profile dir."""
    profile = tempfile.mkdtemp(prefix="pforte-chromium-")
    # fds 3 (we write) and 4 (we read) in the child, as --remote-debugging-pipe expects.
    to_child_r, to_child_w = os.pipe()
    from_child_r, from_child_w = os.pipe()
    # Copies above 4 (close-on-exec), so moving them onto 3 and 4 in the child clobbers nothing.
    child_in = fcntl.fcntl(to_child_r, fcntl.F_DUPFD_CLOEXEC, 10)
    child_out = fcntl.fcntl(from_child_w, fcntl.F_DUPFD_CLOEXEC, 10)

    def setup_fds() -> None:
        # dup2 leaves the new descriptors inheritable; everything else Python opened is
        # close-on-exec (PEP 446), so close_fds=False passes exactly 0-4.
        os.dup2(child_in, 3)
        os.dup2(child_out, 4)

    cmd = [
        chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
        "--no-first-run", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--disable-extensions", "--disable-default-apps", "--mute-audio",
        "--ignore-certificate-errors",  # the test gateway's self-signed certificate
        "--hide-scrollbars", f"--window-size={window}", f"--user-data-dir={profile}",
        "--remote-debugging-pipe", "about:blank",
    ]
    with open(stderr_path, "wb") as err:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                                close_fds=False, preexec_fn=setup_fds)  # noqa: PLW1509
    for fd in (to_child_r, from_child_w, child_in, child_out):
        os.close(fd)
    return proc, Cdp(proc, to_child_w, from_child_r), profile


def collect_diagnostics(cdp: Cdp, out: dict) -> None:
    """Lets late messages arrive, then appends every console message, exception and log entry
    seen to out["console"], out["exceptions"] and out["log"]."""
    try:
        cdp.wait_event(lambda e: False, "nothing", timeout=0.5)
    except TimeoutError:
        pass
    for e in cdp.events:
        m, p = e.get("method"), e.get("params", {})
        if m == "Runtime.consoleAPICalled":
            out["console"].append({"type": p.get("type"),
                                   "args": [a.get("value", a.get("description")) for a in p.get("args", [])]})
        elif m == "Runtime.exceptionThrown":
            out["exceptions"].append(p.get("exceptionDetails", {}).get("text"))
        elif m == "Log.entryAdded":
            entry = p.get("entry", {})
            out["log"].append({k: entry.get(k) for k in ("source", "level", "text", "url")})


def shut_down(cdp: Cdp, proc: subprocess.Popen, profile: str) -> None:
    """Closes the browser (best effort), waits for it (killing it after 5 s) and removes its
    profile."""
    try:
        cdp.send("Browser.close", timeout=5)
    except Exception:  # noqa: BLE001 - closing is best effort
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    shutil.rmtree(profile, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chromium", required=True)
    ap.add_argument("--url", required=True)
    ap.add_argument("--user", required=True)
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--callback-prefix", required=True)
    ap.add_argument("--idp")
    ap.add_argument("--shot-prefix", default="oauth-")
    args = ap.parse_args()
    password = sys.stdin.readline().rstrip("\r\n")
    os.makedirs(args.out_dir, exist_ok=True)

    stderr_path = os.path.join(args.out_dir, "chromium-stderr.log")
    proc, cdp, profile = launch(args.chromium, stderr_path, window="900,760")
    out: dict = {"console": [], "exceptions": [], "log": []}
    try:
        out["browser"] = cdp.send("Browser.getVersion")["product"]
        target = cdp.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        s = cdp.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            cdp.send(f"{domain}.enable", {}, s)
        cdp.send("Emulation.setDeviceMetricsOverride",
                 {"width": 900, "height": 760, "deviceScaleFactor": 1, "mobile": False}, s)
        # Pause any request to the client's redirect URI: its URL is the result.
        cdp.send("Fetch.enable", {"patterns": [{"urlPattern": args.callback_prefix + "*"}]}, s)

        def loaded(e: dict) -> bool:
            return e.get("method") == "Page.loadEventFired" and e.get("sessionId") == s

        def evaluate(expr: str):
            r = cdp.send("Runtime.evaluate", {"expression": expr, "returnByValue": True}, s)
            if "exceptionDetails" in r:
                raise RuntimeError(f"evaluate {expr!r}: {r['exceptionDetails']}")
            return r["result"].get("value")

        def screenshot(name: str) -> str:
            data = cdp.send("Page.captureScreenshot", {"format": "png"}, s)["data"]
            path = os.path.join(args.out_dir, name)
            with open(path, "wb") as f:
                f.write(base64.b64decode(data))
            return path

        def page_facts() -> dict:
            return evaluate("""({
                url: location.href, title: document.title,
                text: document.body.innerText,
                forms: document.forms.length,
                styled: getComputedStyle(document.body).fontFamily,
                width: document.documentElement.scrollWidth,
            })""")

        cdp.send("Page.navigate", {"url": args.url}, s)
        cdp.wait_event(loaded, "load of the login page")
        out["login"] = page_facts()
        out["login"]["screenshot"] = screenshot(args.shot_prefix + "login.png")

        if args.idp:
            evaluate(f"""document.querySelector(
                'button[name=provider][value=' + JSON.stringify({json.dumps(args.idp)}) + ']'
            ).click()""")
            cdp.wait_event(loaded, "load of the identity provider's sign-in page")
            out["idp"] = page_facts()
            out["idp"]["screenshot"] = screenshot(args.shot_prefix + "idp.png")
            evaluate(f"""(() => {{
                document.querySelector('input[name=login]').value = {json.dumps(args.user)};
                document.querySelector('form button[type=submit]').click();
            }})()""")
        else:
            evaluate(f"""(() => {{
                document.querySelector('input[name=username]').value = {json.dumps(args.user)};
                document.querySelector('input[name=password]').value = {json.dumps(password)};
                document.querySelector('form button[type=submit]').click();
            }})()""")
        cdp.wait_event(loaded, "load of the consent page")
        out["consent"] = page_facts()
        out["consent"]["screenshot"] = screenshot(args.shot_prefix + "consent.png")

        evaluate("document.querySelector('button[value=approve]').click()")
        paused = cdp.wait_event(lambda e: e.get("method") == "Fetch.requestPaused",
                                "navigation to the redirect URI")
        out["callback"] = paused["params"]["request"]["url"]
        cdp.send("Fetch.failRequest",
                 {"requestId": paused["params"]["requestId"], "errorReason": "Aborted"}, s)
        collect_diagnostics(cdp, out)
    finally:
        shut_down(cdp, proc, profile)
    out["stderr_log"] = stderr_path
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
