"""Headless Chromium on Pforte's operator console (/admin), at desktop and phone width (stdlib
only; DevTools protocol on a pipe, as render.py).

1. opens BASE/admin signed out (sent to the /account sign-in form), signs in as --admin;
2. opens the overview, the audit log with --audit-query, and the route --route, each at
   1280 px and at 390 px, writing admin-overview.png / admin-overview-phone.png,
   admin-audit-filter.png / -phone.png, admin-route.png / -phone.png and admin-tokens.png /
   -phone.png;
3. reports what each page said, its width and scripts, and every console message, exception
   and log entry, as JSON on stdout.

Usage: python3 console.py --chromium PATH --base URL --admin NAME --route NAME
           --audit-query QUERY --out-dir DIR   (the admin's password on stdin)
With --page KEY PATH SHOT (repeatable) it opens those pages instead of the four above, each
reported as KEY_desktop / KEY_phone with screenshots SHOT.png / SHOT-phone.png.
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
    ap.add_argument("--route")
    ap.add_argument("--audit-query")
    ap.add_argument("--page", nargs=3, action="append", metavar=("KEY", "PATH", "SHOT"))
    ap.add_argument("--out-dir", required=True)
    args = ap.parse_args()
    password = sys.stdin.readline().rstrip("\r\n")
    os.makedirs(args.out_dir, exist_ok=True)

    stderr_path = os.path.join(args.out_dir, "chromium-console-stderr.log")
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
                charts: document.querySelectorAll('svg.chart').length,
            })""")

        def go(url: str, what: str) -> None:
            cdp.send("Page.navigate", {"url": url}, s)
            cdp.wait_event(loaded, what)

        def sized(metrics: dict) -> None:
            cdp.send("Emulation.setDeviceMetricsOverride", metrics, s)

        sized(DESKTOP)
        go(args.base + "/admin", "load of /admin signed out")
        out["signed_out"] = facts()
        evaluate(f"""(() => {{
            document.querySelector('input[name=username]').value = {json.dumps(args.admin)};
            document.querySelector('input[name=password]').value = {json.dumps(password)};
            document.querySelector('form button[type=submit]').click();
        }})()""")
        cdp.wait_event(loaded, "load after signing in")
        out["after_sign_in"] = evaluate("location.href")

        pages = [tuple(p) for p in args.page] if args.page else [
            ("overview", "/admin", "admin-overview"),
            ("audit", "/admin/audit?" + args.audit_query, "admin-audit-filter"),
            ("route", "/admin/routes/" + args.route, "admin-route"),
            ("tokens", "/admin/tokens", "admin-tokens"),
        ]
        for key, path, shot in pages:
            for size, metrics, suffix in (("desktop", DESKTOP, ""), ("phone", PHONE, "-phone")):
                sized(metrics)
                go(args.base + path, f"load of {path} ({size})")
                f = facts()
                f["screenshot"] = screenshot(f"{shot}{suffix}.png")
                out[f"{key}_{size}"] = f

        collect_diagnostics(cdp, out)
    finally:
        shut_down(cdp, proc, profile)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
