/**
 * A broker outage, as a service on the packed client lives it (issue 26): the client installed
 * from `npm pack -w client` in an empty project, two service processes (`provider()`, and
 * `getToken()` to see the `stale` flag) against `npm start`, which is stopped for 20 s and
 * started again where the services expect it. Every token they are handed goes to the Open
 * API's protected ping.
 *
 * The Open API simulator, DynamoDB and KMS run in this test process, outside `npm start`
 * (BROKER_CONNECTIONS, its client's secret in BROKER_LOCAL_SECRETS_FILE, as docs/guide.md's
 * "Against a real Open API with local credentials"): the Open API stays up while the broker is
 * down, and the broker comes back to the table it left, as a deployed one would.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Stack, startStack } from '../local/stack.js';
import {
  installPackedClient,
  type LocalBroker,
  runService,
  startLocalBroker,
  type Use,
} from './support/packed-client.js';

let dir: string;
let app: string;
let stack: Stack;
const brokers: LocalBroker[] = [];

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'client-outage-'));
  // Tokens of 10 minutes: the broker lets one be used stale up to its expiry less a minute.
  [{ app }, stack] = await Promise.all([
    installPackedClient(dir),
    startStack({ expiresIn: 600 }, ['sandbox'], { encrypt: true, probe: true }),
  ]);
}, 120_000);

afterAll(async () => {
  for (const broker of brokers) await broker.stop();
  await stack?.close();
  rmSync(dir, { recursive: true, force: true });
});

/** `npm start` against this test's simulator, table and key; on `port` when given. */
const startBroker = async (port = 0) => {
  const secretsFile = join(dir, 'secrets.json');
  writeFileSync(secretsFile, JSON.stringify({ 'open-api/v3': stack.v3Client }), { mode: 0o600 });
  // The stack's own Secrets Manager is left out: npm start serves the file's secrets.
  const { AWS_ENDPOINT_URL_SECRETS_MANAGER: _own, ...env } = stack.env;
  const broker = await startLocalBroker({
    ...env,
    BROKER_LOCAL_SECRETS_FILE: secretsFile,
    PORT: String(port),
  });
  brokers.push(broker);
  return broker;
};

const isStaleWarning = (u: Use & { warning?: string }) =>
  u.warning?.includes('cannot be reached') === true;

describe('End to end: a service on the packed client rides out a broker outage (issue 26)', () => {
  it('keeps handing out its token, flagged stale, while npm start is stopped for 20 s; the Open API accepts it; fresh answers once it is back', async () => {
    const first = await startBroker();
    const port = new URL(first.broker).port;
    const stopFile = join(dir, 'stop');
    const common = {
      BROKER_URL: first.broker,
      PING_URL: `${stack.simulator.url}/open-api/v3/ping`,
      CONNECTION: 'sandbox',
      DURATION_MS: '90000',
      PERIOD_MS: '250',
      STOP_FILE: stopFile,
    };
    const services = Promise.all([
      runService(app, { ...common, MODE: 'provider' }),
      runService(app, { ...common, MODE: 'getToken', PRINT_WARNINGS: '1' }),
    ]);
    const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

    // 1. The broker answers.
    await sleep(3_000);
    // 2. It is stopped, for 20 s.
    await first.stop();
    const stoppedAt = Date.now();
    await sleep(20_000);
    // 3. It starts again where the services expect it (the time it takes to build and start
    // counts as outage too), and answers for a few seconds.
    const restartAt = Date.now();
    await startBroker(Number(port));
    const backAt = Date.now();
    await sleep(4_000);
    writeFileSync(stopFile, '');
    const [viaProvider, viaGetToken] = (await services) as [Use[], (Use & { warning?: string })[]];

    for (const [name, uses] of [
      ['provider()', viaProvider],
      ['getToken()', viaGetToken],
    ] as const) {
      const pinged = uses.filter((u) => u.status !== undefined);
      const before = pinged.filter((u) => u.at < stoppedAt);
      const outage = pinged.filter((u) => u.at >= stoppedAt && u.at < restartAt);
      const after = pinged.filter((u) => u.at >= backAt);
      console.log(
        `${name}: ${before.length} uses before the stop, ${outage.length} in the ${Math.round((restartAt - stoppedAt) / 1000)} s it was stopped (${outage.filter((u) => u.how === 'stale').length} flagged stale), ${after.length} once back (${Math.round((backAt - restartAt) / 1000)} s to start); errors: ${uses.filter((u) => u.error).length}`,
      );
      // Not one call failed, and the Open API accepted every token it was handed.
      expect(uses.filter((u) => u.error)).toEqual([]);
      expect(pinged.filter((u) => u.status !== 200)).toEqual([]);
      expect(before.length).toBeGreaterThan(0);
      // Through the outage, the token the broker gave before it: every 250 ms, for 20 s.
      const held = new Set(before.map((u) => u.token));
      expect(outage.every((u) => held.has(u.token))).toBe(true);
      expect(outage.length).toBeGreaterThan(40);
      expect(outage[0]?.at).toBeLessThan(stoppedAt + 1_000);
      expect(outage.at(-1)?.at).toBeGreaterThan(restartAt - 1_000);
      expect(after.length).toBeGreaterThan(5);
    }

    // Stale once the broker's reuse time (a few seconds) ran out, and only then; one warning
    // for the whole outage; fresh again once the broker is back.
    const outage = viaGetToken.filter((u) => u.at >= stoppedAt && u.at < restartAt);
    expect(outage.filter((u) => u.at >= stoppedAt + 5_500 && u.how !== 'stale')).toEqual([]);
    expect(outage.filter((u) => u.how === 'stale').length).toBeGreaterThan(40);
    expect(viaGetToken.filter((u) => u.at < stoppedAt && u.how === 'stale')).toEqual([]);
    expect(viaGetToken.filter(isStaleWarning)).toHaveLength(1);
    const recovered = viaGetToken.filter((u) => u.at >= backAt + 500 && u.status !== undefined);
    expect(recovered.length).toBeGreaterThan(5);
    expect(recovered.filter((u) => u.how !== 'fresh')).toEqual([]);
    // The broker came back to its table: the same token, issued once in all.
    expect(stack.simulator.stats().issuances).toBe(1);
  }, 120_000);
});
