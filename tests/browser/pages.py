"""Headless Chromium on the pages people see, at 1280 px and at 390 px (stdlib only; DevTools
protocol on a pipe, as render.py): issue 37's tables, connect form and refusal page.

1. opens BASE/account and signs in as --user (password on stdin);
2. for each --page NAME PATH [PHONE_PATH], opens PATH at 1280x900 and writes NAME.png, then
   PHONE_PATH (or PATH again: a single-use link needs two) at 390x844 and writes NAME-phone.png;
3. reports per page and width: its width (no sideways overflow), every table's last cell of each
   row (the action column: inside the window and not clipped by a scrolling box), whether a
   table's rows stack (narrow screens), the form labels, and every console message, exception
   and log entry — JSON on stdout.

Usage: python3 pages.py --chromium PATH --base URL --user NAME --out-dir DIR
           --page NAME PATH [PHONE_PATH] ...   (the password on stdin)
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys

from render import collect_diagnostics, launch, shut_down

DESKTOP = {"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False}
PHONE = {"width": 390, "height": 844, "deviceScaleFactor": 2, "mobile": True}

FACTS = """(() => {
  const vw = window.innerWidth;
  const clippedBy = (c) => {
    const b = c.getBoundingClientRect();
    for (let p = c.parentElement; p; p = p.parentElement) {
      if (getComputedStyle(p).overflowX === 'visible') continue;
      const pb = p.getBoundingClientRect();
      if (b.right > pb.right + 1 || b.left < pb.left - 1) return p.tagName + '.' + p.className;
    }
    return null;
  };
  const tables = [...document.querySelectorAll('table')].map(t => {
    const cells = [...t.querySelectorAll('tbody tr')].map(r => r.lastElementChild);
    const first = t.querySelector('tbody td');
    return {
      rows: cells.length,
      actions: cells.map(c => c.innerText.trim()),
      visible: cells.every(c => {
        const b = c.getBoundingClientRect();
        return b.width > 0 && b.height > 0 && b.left >= -1 && b.right <= vw + 1 && !clippedBy(c);
      }),
      clipped: cells.map(clippedBy).filter(x => x),
      stacked: first ? getComputedStyle(first).display !== 'table-cell' : null,
    };
  });
  const main = document.querySelector('main');
  return {
    url: location.href, title: document.title, text: document.body.innerText,
    width: document.documentElement.scrollWidth, scripts: document.scripts.length,
    tables,
    labels: [...document.querySelectorAll('label')].map(l => l.innerText.trim()),
    card: main ? getComputedStyle(main).backgroundColor : null,
  };
})()"""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chromium", required=True)
    ap.add_argument("--base", required=True)
    ap.add_argument("--user", required=True)
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--page", nargs="+", action="append", default=[], metavar="NAME PATH")
    args = ap.parse_args()
    password = sys.stdin.readline().rstrip("\r\n")
    os.makedirs(args.out_dir, exist_ok=True)

    stderr_path = os.path.join(args.out_dir, "chromium-pages-stderr.log")
    proc, cdp, profile = launch(args.chromium, stderr_path)
    out: dict = {"console": [], "exceptions": [], "log": [], "pages": {}}
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

        def go(url: str, what: str) -> None:
            cdp.send("Page.navigate", {"url": url}, s)
            cdp.wait_event(loaded, what)

        cdp.send("Emulation.setDeviceMetricsOverride", DESKTOP, s)
        go(args.base + "/account", "load of the account sign-in page")
        evaluate(f"""(() => {{
            const form = [...document.forms].find(f => f.querySelector('input[name=password]'));
            form.querySelector('input[name=username]').value = {json.dumps(args.user)};
            form.querySelector('input[name=password]').value = {json.dumps(password)};
            form.querySelector('button[type=submit]').click();
        }})()""")
        cdp.wait_event(loaded, f"load after signing in as {args.user}")

        for page in args.page:
            name, path = page[0], page[1]
            phone_path = page[2] if len(page) > 2 else path
            for size, metrics, p, suffix in (("desktop", DESKTOP, path, ""),
                                             ("phone", PHONE, phone_path, "-phone")):
                cdp.send("Emulation.setDeviceMetricsOverride", metrics, s)
                go(args.base + p, f"load of {p} ({size})")
                facts = evaluate(FACTS)
                facts["screenshot"] = screenshot(f"{name}{suffix}.png")
                out["pages"][f"{name}_{size}"] = facts

        collect_diagnostics(cdp, out)
    finally:
        shut_down(cdp, proc, profile)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
