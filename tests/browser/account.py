"""Headless Chromium on Pforte's /account page at phone width (stdlib only; DevTools protocol
on a pipe, as render.py).

1. opens BASE/account (the sign-in form), signs in as --user, screenshots the account page;
2. clicks "Revoke access" on the card that names --revoke-client, reports the page after it;
3. signs out, signs in as --admin, opens BASE/account?all=1 and screenshots the admin view;
4. reports what each page said, its width (no horizontal overflow at 390 px) and every console
   message, exception and log entry, as JSON on stdout.

Usage: python3 account.py --chromium PATH --base URL --user NAME --admin NAME
           --revoke-client NAME --out-dir DIR   (the user's, then the admin's password on stdin)
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys

from render import collect_diagnostics, launch, shut_down


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chromium", required=True)
    ap.add_argument("--base", required=True)
    ap.add_argument("--user", required=True)
    ap.add_argument("--admin", required=True)
    ap.add_argument("--revoke-client", required=True)
    ap.add_argument("--out-dir", required=True)
    args = ap.parse_args()
    user_password = sys.stdin.readline().rstrip("\r\n")
    admin_password = sys.stdin.readline().rstrip("\r\n")
    os.makedirs(args.out_dir, exist_ok=True)

    stderr_path = os.path.join(args.out_dir, "chromium-account-stderr.log")
    proc, cdp, profile = launch(args.chromium, stderr_path, window="390,844")
    out: dict = {"console": [], "exceptions": [], "log": []}
    try:
        target = cdp.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        s = cdp.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            cdp.send(f"{domain}.enable", {}, s)
        # A phone: 390 CSS pixels wide, scaled 2x.
        cdp.send("Emulation.setDeviceMetricsOverride",
                 {"width": 390, "height": 844, "deviceScaleFactor": 2, "mobile": True}, s)

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

        def sign_in(name: str, password: str) -> None:
            evaluate(f"""(() => {{
                document.querySelector('input[name=username]').value = {json.dumps(name)};
                document.querySelector('input[name=password]').value = {json.dumps(password)};
                document.querySelector('form button[type=submit]').click();
            }})()""")
            cdp.wait_event(loaded, f"load after signing in as {name}")

        def click_in_form(step: str, card_text: str | None = None) -> None:
            # The submit button of the form whose hidden step is `step` (in the card that
            # contains `card_text`, when given).
            evaluate(f"""(() => {{
                const forms = [...document.querySelectorAll('form')].filter(f =>
                    f.querySelector('input[name=step][value={step}]') &&
                    ({json.dumps(card_text)} === null ||
                     (f.closest('li') && f.closest('li').innerText.includes({json.dumps(card_text)}))));
                if (forms.length === 0) throw new Error('no {step} form');
                forms[0].querySelector('button[type=submit]').click();
            }})()""")
            cdp.wait_event(loaded, f"load after {step}")

        go(args.base + "/account", "load of the account sign-in page")
        out["sign_in"] = facts()
        sign_in(args.user, user_password)
        out["account"] = facts()
        out["account"]["screenshot"] = screenshot("account.png")

        click_in_form("revoke", args.revoke_client)
        out["after_revoke"] = facts()
        out["after_revoke"]["screenshot"] = screenshot("account-after-revoke.png")

        click_in_form("logout")
        out["signed_out"] = facts()
        sign_in(args.admin, admin_password)
        go(args.base + "/account?all=1", "load of the admin view")
        out["admin"] = facts()
        out["admin"]["screenshot"] = screenshot("account-admin.png")

        collect_diagnostics(cdp, out)
    finally:
        shut_down(cdp, proc, profile)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
