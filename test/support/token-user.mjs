// A service that uses the packed client as an installed dependency (copied into the app that
// installed it, and run there as its own process). Every token it is handed goes to the Open
// API's protected ping, and each use is printed as one JSON line: when, which token (a digest,
// never the token), the answer. Modes:
//   provider  `tokens.provider(connection)()`, the way most services use the client;
//   middy     a middy handler behind `tokenBroker`, which reports a 401 with
//             `context.tokenRejected` and uses the fresh token once;
//   getToken  `tokens.getToken(connection)`, each use marked `stale` or `fresh` (the flag the
//             client sets on a token handed out while the broker cannot be reached).
// Settings: BROKER_URL, PING_URL, CONNECTION, MODE, DURATION_MS, PERIOD_MS, MARGIN_SECONDS;
// PRINT_WARNINGS=1 prints each warning the client gives as a line `{ at, warning }`; STOP_FILE
// ends the run early once that file exists.
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { createTokenClient } from '@open-api-token-broker/client';
import { tokenBroker } from '@open-api-token-broker/client/middy';

const { BROKER_URL, PING_URL, CONNECTION, MODE, MIDDY_CORE } = process.env;
const durationMs = Number(process.env.DURATION_MS);
const periodMs = Number(process.env.PERIOD_MS);
const digest = (token) => createHash('sha256').update(token).digest('base64url').slice(0, 16);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** One use of a token: the ping's status, printed as a line. */
const use = async (token, how) => {
  const response = await fetch(PING_URL, { headers: { 'x-access-token': token } });
  await response.body?.cancel();
  process.stdout.write(
    `${JSON.stringify({ at: Date.now(), token: digest(token), status: response.status, how })}\n`,
  );
  return response.status;
};

// Default client options, as a service would create the client (but the margin, when the test
// runs at scaled timing: MARGIN_SECONDS).
const tokens = createTokenClient({
  transport: { type: 'http', url: BROKER_URL },
  onWarning: (message) => {
    if (process.env.PRINT_WARNINGS === '1') {
      process.stdout.write(`${JSON.stringify({ at: Date.now(), warning: message })}\n`);
    }
  },
  ...(process.env.MARGIN_SECONDS ? { marginSeconds: Number(process.env.MARGIN_SECONDS) } : {}),
});

let step;
if (MODE === 'provider') {
  const provide = tokens.provider(CONNECTION);
  step = async () => use(await provide(), 'provider');
} else if (MODE === 'getToken') {
  step = async () => {
    const token = await tokens.getToken(CONNECTION);
    return use(token.accessToken, token.stale ? 'stale' : 'fresh');
  };
} else if (MODE === 'middy') {
  const { default: middy } = await import(pathToFileURL(MIDDY_CORE).href);
  const handler = middy()
    .use(tokenBroker({ client: tokens, fetchData: { openApiToken: CONNECTION } }))
    .handler(async (_event, context) => {
      if ((await use(context.openApiToken, 'middy')) !== 401) return;
      // Reported as a handler would: the middleware invalidates it and hands a fresh one.
      await use(await context.tokenRejected('openApiToken'), 'middy-retry');
    });
  const context = () => {
    const end = Date.now() + 10_000;
    return { getRemainingTimeInMillis: () => end - Date.now() };
  };
  step = () => handler({}, context());
} else {
  throw new Error(`MODE must be provider, middy or getToken, not ${MODE}`);
}

const end = Date.now() + durationMs;
const stopped = () => process.env.STOP_FILE !== undefined && existsSync(process.env.STOP_FILE);
while (Date.now() < end && !stopped()) {
  try {
    await step();
  } catch (error) {
    process.stdout.write(
      `${JSON.stringify({ at: Date.now(), error: error.code ?? error.name })}\n`,
    );
  }
  await sleep(periodMs);
}
