"""Step-up authorization with the official MCP Python SDK (`mcp`) against Pforte.

The SDK client first authorizes with `mcp:read` only, calls the read tool `whoami`, then the
write tool `werkbaum_create`. The gateway answers that call with 403 and
`WWW-Authenticate: Bearer error="insufficient_scope", scope="mcp:read mcp:write", ...` (MCP
2025-11-25 scope challenge); the SDK handles that by itself (mcp/client/auth/oauth2.py: a 403
whose `error` is `insufficient_scope` re-runs the authorization with the union of the scopes it
asked for before and the challenged ones, then retries the request once), so the script only
plays the user in the browser, twice, and records what each consent page said.

The one thing the script decides for the client is "least privilege first": the gateway's 401
names no scope, so the SDK would ask for every scope the resource metadata lists; the provider
below asks for `mcp:read` on its first authorization instead (what a read-mostly app does).

Prints one JSON object on stdout: the authorization URLs' scopes, the consent pages' text, the
/mcp responses the client saw (status and WWW-Authenticate), the tool results or errors, and the
scopes of every token issued.

Usage: python step_up_client.py MCP_URL USERNAME   (the password on stdin)
"""

from __future__ import annotations

import asyncio
import json
import sys
from html.parser import HTMLParser
from importlib.metadata import version
from urllib.parse import parse_qs, urljoin, urlparse

import httpx2
from mcp import Client
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientMetadata

from oauth_client import FORM, REDIRECT_URI, MemoryStorage, form_body, parse_form

PLAN = "- [ ] Step-up check (S) #stepup\n  - [ ] Write after consent (XS) #write\n"


class TextParser(HTMLParser):
    """A page's visible text, whitespace collapsed."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self.skip = 0

    def handle_starttag(self, tag: str, attrs) -> None:
        if tag in ("script", "style", "title"):
            self.skip += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style", "title") and self.skip:
            self.skip -= 1

    def handle_data(self, data: str) -> None:
        if not self.skip:
            self.parts.append(data)


def page_text(html: str) -> str:
    p = TextParser()
    p.feed(html)
    return " ".join(" ".join(p.parts).split())


class Browser:
    """The SDK's redirect_handler + callback_handler: one user in one browser (its cookies kept
    across authorizations), approving every consent page and recording its text."""

    def __init__(self, username: str, password: str) -> None:
        self.username = username
        self.password = password
        self.http = httpx2.AsyncClient(follow_redirects=False, timeout=30)
        self.result: AuthorizationCodeResult | None = None
        self.authorize_urls: list[str] = []
        self.consent_pages: list[str] = []
        self.logins = 0

    async def redirect_handler(self, authorization_url: str) -> None:
        self.authorize_urls.append(authorization_url)
        page = await self.http.get(authorization_url)
        page_url = authorization_url
        if page.status_code != 200:
            raise RuntimeError(f"authorize: {page.status_code} {page.text[:500]}")
        if 'type="password"' in page.text:
            self.logins += 1
            login = parse_form(page_url, page.text)
            fields = [(n, self.username if n == "username" else self.password if n == "password" else v)
                      for n, v in login["fields"]]
            resp = await self.http.post(login["action"], content=form_body(fields), headers=FORM)
            if resp.status_code != 303:
                raise RuntimeError(f"login: {resp.status_code} {resp.text[:500]}")
            page_url = urljoin(login["action"], resp.headers["location"])
            page = await self.http.get(page_url)
            if page.status_code != 200:
                raise RuntimeError(f"consent: {page.status_code} {page.text[:500]}")
        self.consent_pages.append(page_text(page.text))
        consent = parse_form(page_url, page.text)
        approve = [b for b in consent["buttons"] if b[1] == "approve"]
        if not approve:
            raise RuntimeError(f"no approve button: {consent}")
        resp = await self.http.post(consent["action"], content=form_body(consent["fields"] + approve),
                                    headers=FORM)
        if resp.status_code != 303:
            raise RuntimeError(f"approve: {resp.status_code} {resp.text[:500]}")
        location = resp.headers["location"]
        if not location.startswith(REDIRECT_URI):
            raise RuntimeError(f"redirected to {location}, not the redirect URI")
        q = parse_qs(urlparse(location).query)
        if "code" not in q:
            raise RuntimeError(f"no code in {location}")
        self.result = AuthorizationCodeResult(code=q["code"][0], state=q.get("state", [None])[0],
                                              iss=q.get("iss", [None])[0])

    async def callback_handler(self) -> AuthorizationCodeResult:
        if self.result is None:
            raise RuntimeError("the redirect handler produced no code")
        result, self.result = self.result, None
        return result


class ReadFirstProvider(OAuthClientProvider):
    """The SDK's provider, asking for `mcp:read` on its first authorization; every later
    authorization (the step-up) uses the scope the SDK itself chose."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.rounds = 0
        self.sdk_first_scope: str | None = None

    async def _perform_authorization_code_grant(self) -> tuple[str, str]:
        if self.rounds == 0:
            self.sdk_first_scope = self.context.client_metadata.scope
            self.context.client_metadata.scope = "mcp:read"
        self.rounds += 1
        return await super()._perform_authorization_code_grant()


class ScopeStorage(MemoryStorage):
    """Keeps the scope of every token the SDK stores."""

    def __init__(self) -> None:
        super().__init__()
        self.scope_history: list[str | None] = []

    async def set_tokens(self, tokens) -> None:
        await super().set_tokens(tokens)
        self.scope_history.append(tokens.scope)


def tool_result(result) -> dict:
    return {"is_error": bool(result.is_error), "structured": result.structured_content,
            "text": [c.text for c in result.content if getattr(c, "type", None) == "text"]}


async def main() -> int:
    mcp_url, username = sys.argv[1], sys.argv[2]
    password = sys.stdin.readline().rstrip("\r\n")
    mcp_path = urlparse(mcp_url).path

    storage = ScopeStorage()
    browser = Browser(username, password)
    provider = ReadFirstProvider(
        server_url=mcp_url,
        client_metadata=OAuthClientMetadata(
            client_name="pforte-step-up-check",
            redirect_uris=[REDIRECT_URI],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
        ),
        storage=storage,
        redirect_handler=browser.redirect_handler,
        callback_handler=browser.callback_handler,
    )
    seen: list[dict] = []

    async def record(response: httpx2.Response) -> None:
        if urlparse(str(response.request.url)).path == mcp_path:
            seen.append({"method": response.request.method, "status": response.status_code,
                         "www_authenticate": response.headers.get("www-authenticate")})

    out: dict = {"sdk": f"mcp {version('mcp')}"}
    try:
        async with httpx2.AsyncClient(auth=provider, timeout=30, event_hooks={"response": [record]}) as http:
            async with Client(streamable_http_client(mcp_url, http_client=http)) as client:
                out["whoami"] = tool_result(await client.call_tool("whoami", {}))
                out["scopes_before_write"] = storage.tokens.scope if storage.tokens else None
                try:
                    out["create"] = tool_result(
                        await client.call_tool("werkbaum_create", {"title": "step-up", "text": PLAN}))
                except Exception as e:  # the SDK gave up: recorded for the test to show
                    out["create_error"] = f"{type(e).__name__}: {e}"
                out["whoami_after"] = tool_result(await client.call_tool("whoami", {}))
    except Exception as e:
        out["error"] = f"{type(e).__name__}: {e}"
    finally:
        await browser.http.aclose()
    out["sdk_first_scope"] = provider.sdk_first_scope
    out["authorize_scopes"] = [parse_qs(urlparse(u).query).get("scope", [None])[0]
                               for u in browser.authorize_urls]
    out["consent_pages"] = browser.consent_pages
    out["logins"] = browser.logins
    out["mcp_responses"] = seen
    out["token_scopes"] = storage.scope_history
    out["client_id"] = storage.client_info.client_id if storage.client_info else None
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
