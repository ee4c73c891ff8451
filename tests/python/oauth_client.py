"""An independent OAuth client against Pforte: the official MCP Python SDK (`mcp`).

The SDK does discovery (401 -> RFC 9728 -> RFC 8414), registration, PKCE, the token request,
the RFC 9207 `iss` check and refreshing on its own. This script only plays the user's browser in
the SDK's redirect handler: GET the authorization URL, parse the login form, POST the
credentials, follow the 303, parse the consent form, POST "approve", and capture the code, state
and iss from the Location of the final 303 (the redirect URI is never contacted).

Then it calls the `whoami` tool, forces the SDK's expiry clock into the past so that it
refreshes, calls `whoami` again, and prints one JSON object on stdout.

Usage: python oauth_client.py MCP_URL USERNAME   (the password on stdin)
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from html.parser import HTMLParser
from importlib.metadata import version
from urllib.parse import parse_qs, urlencode, urljoin, urlparse

import httpx2
from mcp import Client
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider, TokenStorage
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

REDIRECT_URI = "http://127.0.0.1:33418/callback"


class MemoryStorage(TokenStorage):
    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None
        self.token_history: list[str] = []

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens
        self.token_history.append(tokens.access_token)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


class FormParser(HTMLParser):
    """Collects the one form of a page the way a browser would submit it."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[dict] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: (v or "") for k, v in attrs}
        if tag == "form":
            self.forms.append({"action": a.get("action", ""), "method": a.get("method", "get").lower(),
                               "fields": [], "buttons": []})
        elif tag == "input" and self.forms and "name" in a:
            self.forms[-1]["fields"].append((a["name"], a.get("value", "")))
        elif tag == "button" and self.forms and "name" in a and a.get("type", "submit") == "submit":
            self.forms[-1]["buttons"].append((a["name"], a.get("value", "")))


def parse_form(page_url: str, html: str) -> dict:
    p = FormParser()
    p.feed(html)
    if len(p.forms) != 1:
        raise RuntimeError(f"expected one form on {page_url}, found {len(p.forms)}")
    form = p.forms[0]
    form["action"] = urljoin(page_url, form["action"])
    if form["method"] != "post":
        raise RuntimeError(f"form method {form['method']}")
    return form


FORM = {"content-type": "application/x-www-form-urlencoded"}


def form_body(fields: list[tuple[str, str]]) -> bytes:
    """The body a browser sends for these fields, in document order (repeats allowed)."""
    return urlencode(fields).encode()


class BrowserStep:
    """The SDK's redirect_handler + callback_handler: a scripted user in a browser."""

    def __init__(self, username: str, password: str, verify) -> None:
        self.username = username
        self.password = password
        self.verify = verify
        self.result: AuthorizationCodeResult | None = None
        self.authorize_urls: list[str] = []

    async def redirect_handler(self, authorization_url: str) -> None:
        self.authorize_urls.append(authorization_url)
        async with httpx2.AsyncClient(follow_redirects=False, verify=self.verify, timeout=30) as browser:
            page = await browser.get(authorization_url)
            page_url = authorization_url
            if page.status_code != 200:
                raise RuntimeError(f"authorize: {page.status_code} {page.text[:500]}")
            if 'type="password"' in page.text:
                login = parse_form(page_url, page.text)
                fields = [(n, self.username if n == "username" else self.password if n == "password" else v)
                          for n, v in login["fields"]]
                resp = await browser.post(login["action"], content=form_body(fields), headers=FORM)
                if resp.status_code != 303:
                    raise RuntimeError(f"login: {resp.status_code} {resp.text[:500]}")
                page_url = urljoin(login["action"], resp.headers["location"])
                page = await browser.get(page_url)
                if page.status_code != 200:
                    raise RuntimeError(f"consent: {page.status_code} {page.text[:500]}")
            consent = parse_form(page_url, page.text)
            approve = [b for b in consent["buttons"] if b[1] == "approve"]
            if not approve:
                raise RuntimeError(f"no approve button: {consent}")
            resp = await browser.post(consent["action"], content=form_body(consent["fields"] + approve),
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


def structured(result) -> dict:
    if result.is_error:
        raise RuntimeError(f"whoami failed: {result}")
    return result.structured_content


async def main() -> int:
    mcp_url, username = sys.argv[1], sys.argv[2]
    password = sys.stdin.readline().rstrip("\r\n")
    # SSL_CERT_FILE (when set) names the CA that signed the gateway's certificate.
    import os
    import ssl

    ca = os.environ.get("SSL_CERT_FILE")
    verify = ssl.create_default_context(cafile=ca) if ca else True

    storage = MemoryStorage()
    step = BrowserStep(username, password, verify)
    provider = OAuthClientProvider(
        server_url=mcp_url,
        client_metadata=OAuthClientMetadata(
            client_name="pforte-python-sdk-check",
            redirect_uris=[REDIRECT_URI],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
        ),
        storage=storage,
        redirect_handler=step.redirect_handler,
        callback_handler=step.callback_handler,
    )
    out: dict = {"sdk": f"mcp {version('mcp')}", "httpx2": version("httpx2")}
    async with httpx2.AsyncClient(auth=provider, verify=verify, timeout=30) as http:
        async with Client(streamable_http_client(mcp_url, http_client=http)) as client:
            out["whoami"] = structured(await client.call_tool("whoami", {}))
            first_access = storage.tokens.access_token if storage.tokens else None
            # The SDK refreshes when its own clock says the token expired: make it so.
            provider.context.token_expiry_time = time.time() - 1
            out["whoami_after_refresh"] = structured(await client.call_tool("whoami", {}))
            out["refreshed"] = bool(storage.tokens and storage.tokens.access_token != first_access)
    out["client_id"] = storage.client_info.client_id if storage.client_info else None
    out["token_endpoint_auth_method"] = (storage.client_info.token_endpoint_auth_method
                                         if storage.client_info else None)
    out["authorize_url_params"] = sorted(parse_qs(urlparse(step.authorize_urls[0]).query))
    out["authorizations"] = len(step.authorize_urls)
    out["tokens_issued"] = len(storage.token_history)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
