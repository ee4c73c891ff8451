// A real OpenID provider for the tests: npm's oidc-provider (pinned in tests/src/tools.rs,
// installed by tests/prepare.sh), on 127.0.0.1 with one confidential test client and the users
// of $IDP_CONFIG. Its own small routes beside the provider's:
//   GET  /interaction/UID        a sign-in form (field `login`: a user's id, no password)
//   POST /interaction/UID/login  signs that user in and grants the requested scopes
//   POST /interaction/UID/abort  the user cancels: the provider answers error=access_denied
//   POST /admin/client?redirect_uri=URL   sets the client's redirect URI (the gateway's port
//                                         is known only after the provider started)
//   POST /admin/rotate           replaces the signing key by a new one with a new kid
//   POST /admin/groups?id=ID&groups=A,B   changes a user's groups (for their next sign-in)
//   POST /admin/tamper?kind=K    the next token answer carries an ID token with a wrong aud,
//                                an expired exp, a wrong nonce, a wrong iss, or a bad
//                                signature (kind aud|exp|nonce|iss|sig), re-signed with the
//                                provider's key (sig: with another key under the same kid)
// Usage: node idp.mjs NODE_MODULES   (prints "pforte-idp listening on ISSUER")
// IDP_CONFIG: {"client_id","client_secret","accounts":{"ID":{"email","email_verified"?,"groups",
//   "preferred_username"?,"upn"?}},"profile"}: where the scopes' claims go — "id_token" (all in
//   the ID token), "user_info" (only in UserInfo: oidc-provider's default conformIdTokenClaims,
//   OIDC Core §5.4), "groups_from_user_info" (groups only in UserInfo)
import http from 'node:http';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const modules = process.argv[2];
const load = (rel) => import(pathToFileURL(path.join(modules, rel)).href);
const { default: Provider } = await load('oidc-provider/lib/index.js');
const jose = await load('jose/dist/webapi/index.js');

const cfg = JSON.parse(process.env.IDP_CONFIG ?? '{}');
const accounts = cfg.accounts ?? {};
const profile = cfg.profile ?? 'id_token';
let redirectUris = ['https://127.0.0.1/oidc/callback'];
let keyNumber = 0;
let key; // { jwk (private, with kid), privateKey }
let tamper = null;
let provider;

async function newKey() {
  keyNumber += 1;
  const { privateKey } = await jose.generateKeyPair('RS256', { extractable: true });
  const jwk = await jose.exportJWK(privateKey);
  Object.assign(jwk, { kid: `test-key-${keyNumber}`, alg: 'RS256', use: 'sig' });
  return { jwk, privateKey };
}

async function tampered(idToken, kind) {
  const header = jose.decodeProtectedHeader(idToken);
  const claims = jose.decodeJwt(idToken);
  const now = Math.floor(Date.now() / 1000);
  let signWith = key.privateKey;
  if (kind === 'aud') claims.aud = 'someone-else';
  else if (kind === 'exp') Object.assign(claims, { iat: now - 7200, exp: now - 3600 });
  else if (kind === 'nonce') claims.nonce = 'not-the-nonce-that-was-sent';
  else if (kind === 'iss') claims.iss = 'http://127.0.0.1:9/elsewhere';
  else if (kind === 'sig') signWith = (await jose.generateKeyPair('RS256')).privateKey;
  return new jose.SignJWT(claims)
    .setProtectedHeader({ alg: header.alg, kid: header.kid })
    .sign(signWith);
}

function build(issuer) {
  const p = new Provider(issuer, {
    clients: [{
      client_id: cfg.client_id,
      client_secret: cfg.client_secret,
      redirect_uris: redirectUris,
      grant_types: ['authorization_code'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic',
    }],
    async findAccount(_ctx, id) {
      const account = accounts[id];
      if (!account) return undefined;
      return {
        accountId: id,
        async claims(use) {
          const claims = { sub: id, ...account };
          if (use === 'id_token' && profile === 'groups_from_user_info') delete claims.groups;
          return claims;
        },
      };
    },
    claims: {
      openid: ['sub'],
      email: ['email', 'email_verified'],
      profile: ['name', 'preferred_username', 'upn'],
      groups: ['groups'],
    },
    scopes: ['openid', 'email', 'profile', 'groups'],
    conformIdTokenClaims: profile === 'user_info',
    jwks: { keys: [key.jwk] },
    pkce: { required: () => true },
    features: { devInteractions: { enabled: false } },
    interactions: { url: (_ctx, interaction) => `/interaction/${interaction.uid}` },
    cookies: { keys: ['pforte-test-idp-cookie-key'] },
  });
  p.use(async (ctx, next) => {
    await next();
    if (ctx.path === '/token' && tamper && ctx.body && typeof ctx.body === 'object'
        && ctx.body.id_token) {
      const kind = tamper;
      tamper = null;
      ctx.body = { ...ctx.body, id_token: await tampered(ctx.body.id_token, kind) };
    }
  });
  return p;
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    let body = '';
    req.on('data', (c) => { body += c; });
    req.on('end', () => resolve(body));
    req.on('error', reject);
  });
}

function send(res, status, type, body) {
  res.writeHead(status, { 'content-type': type, 'cache-control': 'no-store' });
  res.end(body);
}

const escape = (s) => String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

function loginForm(uid, error) {
  return `<!doctype html><html><head><title>Test IdP sign-in</title></head><body>
<h1>Test IdP</h1>${error ? `<p class="error">${escape(error)}</p>` : ''}
<form method="post" action="/interaction/${escape(uid)}/login">
<label>User <input type="text" name="login" value=""></label>
<button type="submit">Sign in</button></form></body></html>`;
}

async function interaction(req, res, uid, action) {
  const details = await provider.interactionDetails(req, res);
  if (details.uid !== uid) return send(res, 400, 'text/plain', 'interaction mismatch');
  if (!action) return send(res, 200, 'text/html', loginForm(uid));
  if (action === 'abort') {
    return provider.interactionFinished(req, res, {
      error: 'access_denied',
      error_description: 'the user cancelled the sign-in',
    }, { mergeWithLastSubmission: false });
  }
  const form = new URLSearchParams(await readBody(req));
  const login = form.get('login') ?? '';
  if (!accounts[login]) return send(res, 200, 'text/html', loginForm(uid, 'unknown user'));
  const grant = new provider.Grant({ accountId: login, clientId: details.params.client_id });
  grant.addOIDCScope(String(details.params.scope ?? 'openid'));
  const grantId = await grant.save();
  await provider.interactionFinished(req, res, {
    login: { accountId: login },
    consent: { grantId },
  }, { mergeWithLastSubmission: false });
}

async function admin(req, res, url, issuer) {
  if (req.method !== 'POST') return send(res, 405, 'text/plain', 'POST');
  const action = url.pathname.slice('/admin/'.length);
  if (action === 'client') {
    redirectUris = [url.searchParams.get('redirect_uri')];
    provider = build(issuer);
  } else if (action === 'rotate') {
    key = await newKey();
    provider = build(issuer);
  } else if (action === 'groups') {
    const account = accounts[url.searchParams.get('id')];
    if (!account) return send(res, 404, 'text/plain', 'no such user');
    account.groups = (url.searchParams.get('groups') ?? '').split(',').filter(Boolean);
  } else if (action === 'tamper') {
    tamper = url.searchParams.get('kind');
  } else {
    return send(res, 404, 'text/plain', 'unknown admin action');
  }
  return send(res, 200, 'application/json', JSON.stringify({ kid: key.jwk.kid, tamper }));
}

key = await newKey();
let issuer;
const server = http.createServer((req, res) => {
  const url = new URL(req.url, issuer);
  const m = url.pathname.match(/^\/interaction\/([A-Za-z0-9_-]+)(?:\/(login|abort))?$/);
  const work = url.pathname.startsWith('/admin/') ? admin(req, res, url, issuer)
    : m ? interaction(req, res, m[1], req.method === 'POST' ? m[2] : undefined)
      : Promise.resolve(provider.callback()(req, res));
  work.catch((e) => {
    if (!res.headersSent) send(res, 500, 'text/plain', `test idp: ${e.message}`);
  });
});
server.listen(0, '127.0.0.1', () => {
  issuer = `http://127.0.0.1:${server.address().port}`;
  provider = build(issuer);
  console.log(`pforte-idp listening on ${issuer}`);
});
