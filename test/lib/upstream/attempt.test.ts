/**
 * An upstream that cannot be reached is named by its cause (the code and the system call
 * undici's `fetch` hides in `error.cause`, or the time limit that ran out), never by a bare
 * `TypeError`, and never with the request's URL, query or headers, which carry the client ID
 * and, on the token request, the secret's signature. Against real sockets: a closed port on
 * 127.0.0.1, a `.invalid` host (RFC 6761: never resolves, no network needed), a server that
 * accepts and never answers.
 */
import { createServer, type Server, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Deadline, systemClock } from '../../../lib/clock.js';
import { networkReason } from '../../../lib/upstream/attempt.js';
import { sealCode } from '../../../lib/upstream/authorization-code.js';
import { OpenApiClient } from '../../../lib/upstream/open-api.js';
import { DEFAULT_RESILIENCE, UpstreamResilience } from '../../../lib/upstream/resilience.js';
import { caught, unexpected } from '../../support/errors.js';
import { connection } from '../../support/fakes.js';

const credentials = { clientId: 'client-id-7d1e', clientSecret: 'secret-0b9c4f2a6e' };
const limits = { maxLifetimeSeconds: 86_400 };

/** One attempt per request: each case is about the error, not the retries. */
const client = (options: { timeoutMs?: number; fetch?: typeof fetch } = {}) =>
  new OpenApiClient({
    timeoutMs: options.timeoutMs ?? 5_000,
    limits,
    resilience: new UpstreamResilience({ ...DEFAULT_RESILIENCE, maxAttempts: 1 }),
    ...(options.fetch ? { fetch: options.fetch } : {}),
  });
const bounds = () => ({ deadline: Deadline.in(systemClock, 10_000), signal: undefined });

const authorizeAt = (baseUrl: string, openApi = client()) =>
  openApi.authorize(connection({ baseUrl }), credentials, bounds()).then(unexpected, caught);

/** Nothing of the request's credentials in what a log line would show. */
const expectNoCredential = (error: Error) => {
  for (const value of [credentials.clientId, credentials.clientSecret, 'clientId=']) {
    expect(error.message).not.toContain(value);
  }
};

describe('Function: attempt, when the upstream cannot be reached', () => {
  let port: number;
  let silent: Server;
  const held: Socket[] = [];
  beforeAll(async () => {
    // A port nothing listens on: bound, then closed.
    const probe = createServer();
    await new Promise<void>((done) => probe.listen(0, '127.0.0.1', done));
    port = (probe.address() as { port: number }).port;
    await new Promise((done) => probe.close(done));
    // Accepts connections and never answers.
    silent = createServer((socket) => held.push(socket));
    await new Promise<void>((done) => silent.listen(0, '127.0.0.1', done));
  });
  afterAll(async () => {
    for (const socket of held) socket.destroy();
    await new Promise((done) => silent.close(done));
  });

  it('names a refused connection by its code and system call', async () => {
    const error = await authorizeAt(`http://127.0.0.1:${port}`);
    expect(error).toMatchObject({ name: 'UpstreamUnavailableError', outcomeUnknown: false });
    expect(error.message).toBe('Open API authorize request failed: ECONNREFUSED (connect)');
    expectNoCredential(error);
  });

  it('names a host that does not resolve by its code and system call', async () => {
    const error = await authorizeAt('https://open-api.token-broker.invalid');
    // EAI_AGAIN where no resolver answers at all; ENOTFOUND where one says no.
    expect(error.message).toMatch(
      /^Open API authorize request failed: (ENOTFOUND|EAI_AGAIN) \(getaddrinfo\)$/,
    );
    expectNoCredential(error);
  });

  it('says how long it waited for a server that never answers, on either step', async () => {
    const baseUrl = `http://127.0.0.1:${(silent.address() as { port: number }).port}`;
    const error = await authorizeAt(baseUrl, client({ timeoutMs: 300 }));
    expect(error.message).toBe('Open API authorize request timed out after 300 ms');
    const token = await client({ timeoutMs: 300 })
      .requestToken(connection({ baseUrl }), credentials, sealCode('code-5e6f'), bounds())
      .then(unexpected, caught);
    expect(token).toMatchObject({ outcomeUnknown: true });
    expect(token.message).toBe('Open API access-token request timed out after 300 ms');
    expectNoCredential(token);
  });

  it('says a port that fetch refuses to use ("bad port"), not TypeError', async () => {
    // 6000 (X11) is on the Fetch standard's list of blocked ports: nothing is sent.
    const error = await authorizeAt('http://127.0.0.1:6000');
    expect(error.message).toBe('Open API authorize request failed: bad port');
  });
});

describe('Function: networkReason', () => {
  const fetchFailed = (cause?: unknown) =>
    new TypeError('fetch failed', cause === undefined ? undefined : { cause });
  const coded = (message: string, code: string, syscall?: string) =>
    Object.assign(new Error(message), { code, ...(syscall ? { syscall } : {}) });

  it('finds the code in the causes, an aggregate of attempts (IPv6 and IPv4) included', () => {
    expect(
      networkReason(
        fetchFailed(coded('connect ECONNREFUSED 127.0.0.1:1', 'ECONNREFUSED', 'connect')),
      ),
    ).toBe('ECONNREFUSED (connect)');
    const both = new AggregateError([
      coded('connect ECONNREFUSED ::1:443', 'ECONNREFUSED', 'connect'),
      coded('connect ECONNREFUSED 127.0.0.1:443', 'ECONNREFUSED', 'connect'),
    ]);
    expect(networkReason(fetchFailed(both))).toBe('ECONNREFUSED (connect)');
    // undici's own errors carry a code and no system call.
    expect(networkReason(fetchFailed(coded('other side closed', 'UND_ERR_SOCKET')))).toBe(
      'UND_ERR_SOCKET',
    );
  });

  it('quotes no message that could hold a URL, a query or a header', () => {
    const leaky = fetchFailed(
      new Error(
        `request to https://api.example.com/authorize?clientId=${credentials.clientId} failed`,
      ),
    );
    expect(networkReason(leaky)).toBe('fetch failed (TypeError, no cause code)');
    expect(networkReason(new TypeError(`x-signature: ${credentials.clientSecret}`))).toBe(
      'TypeError, no cause code',
    );
    expect(networkReason('a string')).toBe('unknown error');
  });
});
