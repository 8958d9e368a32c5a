// A real OpenID provider for the sign-in tests: panva's oidc-provider (a certified
// implementation) on a loopback port, with one confidential client, its development
// interactions (any login and password are accepted; the login becomes the subject), PKCE
// required, and a `groups` claim read at every sign-in from a JSON file the test writes
// ({"ana": ["triage-admins"], ...}), so a test can change someone's groups between sign-ins.
//
// Usage: node provider.mjs (settings from the environment)
//   OIDC_PROVIDER_DIR   where `npm install oidc-provider` put node_modules
//   OIDC_PORT           the loopback port to listen on (0: any; the chosen one is printed)
//   OIDC_CLIENT_ID, OIDC_CLIENT_SECRET, OIDC_REDIRECT_URI   the one client (and a second,
//                       `${OIDC_CLIENT_ID}-other`, with the same secret and redirect URI, for
//                       tests of a code issued to another client)
//   OIDC_GROUPS_FILE    the JSON map of login -> groups
//   OIDC_QUIRKS_FILE    (optional) a JSON map of login -> how the provider misbehaves when it
//                       issues that login's next ID token, for the tests of what the portal
//                       refuses: "expired_id_token" (issued already expired, an hour ago) or
//                       "other_audience" (issued to the second client, as in a token
//                       substitution). Both are real tokens, signed with the provider's keys by
//                       its own IdToken model; only their expiry or audience is wrong.
//   OIDC_CLAIMS_FILE    (optional) a JSON map of login -> claims that replace the defaults at
//                       that login's next sign-in ({"ana": {"name": "A\u0000", "groups": null}}):
//                       a claim set to null is left out, as a provider without it would.
//   OIDC_CONFORM_ID_TOKEN_CLAIMS  (optional) "1": oidc-provider's default, the scopes' claims
//                       (email, name, groups) only in the userinfo answer, the ID token holding
//                       `sub` alone; otherwise they are in the ID token too.
// Prints `listening http://127.0.0.1:PORT` on stdout once it accepts connections.
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { pathToFileURL } from 'node:url';
import { join } from 'node:path';

const env = (name) => {
  const value = process.env[name];
  if (value === undefined) {
    console.error(`provider.mjs: ${name} is not set`);
    process.exit(2);
  }
  return value;
};

const dir = env('OIDC_PROVIDER_DIR');
const { default: Provider } = await import(
  pathToFileURL(join(dir, 'node_modules', 'oidc-provider', 'lib', 'index.js')).href
);

const groupsFile = env('OIDC_GROUPS_FILE');
const groupsOf = (login) => {
  const map = JSON.parse(readFileSync(groupsFile, 'utf8'));
  return Array.isArray(map[login]) ? map[login] : [];
};

const claimsFile = process.env.OIDC_CLAIMS_FILE;
const overridesOf = (login) => {
  if (!claimsFile) return {};
  const map = JSON.parse(readFileSync(claimsFile, 'utf8'));
  return map[login] && typeof map[login] === 'object' ? map[login] : {};
};
const claimsOf = (id) => {
  const claims = {
    sub: id,
    email: `${id}@example.test`,
    email_verified: true,
    name: id.charAt(0).toUpperCase() + id.slice(1),
    groups: groupsOf(id),
  };
  for (const [claim, value] of Object.entries(overridesOf(id))) {
    if (value === null) delete claims[claim];
    else claims[claim] = value;
  }
  return claims;
};

const server = createServer();
await new Promise((resolve) => server.listen(Number(process.env.OIDC_PORT || 0), '127.0.0.1', resolve));
const issuer = `http://127.0.0.1:${server.address().port}`;

const clientId = env('OIDC_CLIENT_ID');
const client = (id) => ({
  client_id: id,
  client_secret: env('OIDC_CLIENT_SECRET'),
  redirect_uris: [env('OIDC_REDIRECT_URI')],
  grant_types: ['authorization_code'],
  response_types: ['code'],
  token_endpoint_auth_method: 'client_secret_basic',
});

const provider = new Provider(issuer, {
  clients: [client(clientId), client(`${clientId}-other`)],
  findAccount: async (_ctx, id) => ({
    accountId: id,
    claims: async () => claimsOf(id),
  }),
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['name'],
    groups: ['groups'],
  },
  scopes: ['openid', 'email', 'profile', 'groups'],
  features: { devInteractions: { enabled: true } },
  pkce: { required: () => true },
  // Claims in the ID token itself, so the relying party need not call userinfo (unless the
  // test asks for oidc-provider's default).
  conformIdTokenClaims: process.env.OIDC_CONFORM_ID_TOKEN_CLAIMS === '1',
  cookies: { keys: ['gpu-triage-test-provider-cookie-key'] },
  ttl: { AuthorizationCode: 60, IdToken: 300, Interaction: 600, Session: 600, Grant: 600 },
});
// Quiet: the tests read only the `listening` line.
provider.on('server_error', (_ctx, err) => console.error('provider server_error', err));

// The quirks: the provider's own ID token model, issuing with another expiry (its `expiresAt`
// option) or for another client, for the logins the test names.
const quirksFile = process.env.OIDC_QUIRKS_FILE;
const quirkOf = (login) => {
  if (!quirksFile) return undefined;
  const map = JSON.parse(readFileSync(quirksFile, 'utf8'));
  return typeof map[login] === 'string' ? map[login] : undefined;
};
const { IdToken } = provider;
const issue = IdToken.prototype.issue;
IdToken.prototype.issue = async function issueWithQuirks(options = {}) {
  const quirk = options.use === 'idtoken' ? quirkOf(this.available.sub) : undefined;
  if (quirk === 'expired_id_token') {
    return issue.call(this, { ...options, expiresAt: Math.floor(Date.now() / 1000) - 3600 });
  }
  if (quirk === 'other_audience') {
    this.client = await provider.Client.find(`${clientId}-other`);
  } else if (quirk !== undefined) {
    throw new Error(`provider.mjs: unknown quirk ${quirk}`);
  }
  return issue.call(this, options);
};

server.on('request', provider.callback());
console.log(`listening ${issuer}`);
