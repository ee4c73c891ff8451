"""Headless Chromium on the console's approvals (/admin/approvals), at desktop and phone width
(stdlib only; DevTools protocol on a pipe, as render.py and console.py).

1. opens BASE/admin/approvals signed out (sent to the /account sign-in form), signs in as
   --admin (the sign-in continues to the approvals);
2. opens the list and the call --approval at 1280 px and at 390 px, writing
   admin-approvals.png / admin-approvals-phone.png and admin-approval.png /
   admin-approval-phone.png;
3. clicks Approve on the call's page (a real click on the form's button);
4. reports what each page said, its width and scripts, the page after the click, and every
   console message, exception and log entry, as JSON on stdout.

Usage: python3 approvals.py --chromium PATH --base URL --admin NAME --approval ID
           --out-dir DIR   (the admin's password on stdin)
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys

from render import collect_diagnostics, launch, shut_down

DESKTOP = {"width": 1280, "height": 800, "deviceScaleFactor": 1, "mobile": False}
PHONE = {"width": 390, "height": 844, "deviceScaleFactor": 2, "mobile": True}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chromium", required=True)
    ap.add_argument("--base", required=True)
    ap.add_argument("--admin", required=True)
    ap.add_argument("--approval", required=True)
    ap.add_argument("--out-dir", required=True)
    args = ap.parse_args()
    password = sys.stdin.readline().rstrip("\r\n")
    os.makedirs(args.out_dir, exist_ok=True)

    stderr_path = os.path.join(args.out_dir, "chromium-approvals-stderr.log")
    proc, cdp, profile = launch(args.chromium, stderr_path)
    out: dict = {"console": [], "exceptions": [], "log": []}
    try:
        target = cdp.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        s = cdp.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            cdp.send(f"{domain}.enable", {}, s)

        def loaded(e: dict) -> bool:
            return e.get("method") == "Page.loadEventFired" and e.get("sessionId") == s

        def evaluate(expr: str):
            r = cdp.send("Runtime.evaluate", {"expression": expr, "returnByValue": True}, s)
            if "exceptionDetails" in r:
                raise RuntimeError(f"evaluate {expr!r}: {r['exceptionDetails']}")
            return r["result"].get("value")

        def screenshot(name: str) -> str:
            data = cdp.send("Page.captureScreenshot",
                            {"format": "png", "captureBeyondViewport": True}, s)["data"]
            path = os.path.join(args.out_dir, name)
            with open(path, "wb") as f:
                f.write(base64.b64decode(data))
            return path

        def facts() -> dict:
            return evaluate("""({
                url: location.href, text: document.body.innerText,
                forms: document.forms.length,
                width: document.documentElement.scrollWidth,
                scripts: document.scripts.length,
            })""")

        def go(url: str, what: str) -> None:
            cdp.send("Page.navigate", {"url": url}, s)
            cdp.wait_event(loaded, what)

        def sized(metrics: dict) -> None:
            cdp.send("Emulation.setDeviceMetricsOverride", metrics, s)

        sized(DESKTOP)
        go(args.base + "/admin/approvals", "load of /admin/approvals signed out")
        out["signed_out"] = facts()
        evaluate(f"""(() => {{
            document.querySelector('input[name=username]').value = {json.dumps(args.admin)};
            document.querySelector('input[name=password]').value = {json.dumps(password)};
            document.querySelector('form button[type=submit]').click();
        }})()""")
        cdp.wait_event(loaded, "load after signing in")
        out["after_sign_in"] = evaluate("location.href")

        pages = [
            ("list", "/admin/approvals", "admin-approvals"),
            ("approval", "/admin/approvals/" + args.approval, "admin-approval"),
        ]
        for key, path, shot in pages:
            for size, metrics, suffix in (("desktop", DESKTOP, ""), ("phone", PHONE, "-phone")):
                sized(metrics)
                go(args.base + path, f"load of {path} ({size})")
                f = facts()
                f["screenshot"] = screenshot(f"{shot}{suffix}.png")
                out[f"{key}_{size}"] = f

        sized(DESKTOP)
        go(args.base + "/admin/approvals/" + args.approval, "load of the call to approve")
        evaluate("document.querySelector('button[value=approve]').click()")
        cdp.wait_event(loaded, "load after clicking Approve")
        out["after_click"] = facts()

        collect_diagnostics(cdp, out)
    finally:
        shut_down(cdp, proc, profile)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
