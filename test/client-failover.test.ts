/**
 * Failover across brokers (issue 26), against scripted transports on fake timers: which errors
 * fail over, the circuit breaker per broker, the call's time shared among the attempts, and the
 * last token used stale only once no broker could answer. The same against real HTTP (a port
 * that refuses, then the local broker) is in client.test.ts.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { LambdaClient } from '@aws-sdk/client-lambda';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Breaker, cannotAnswer, DEFAULT_FAILOVER } from '../client/src/failover.js';
import {
  type AccessToken,
  BadRequestError,
  CallerNotAllowedError,
  ClientConfigError,
  createTokenClient,
  type Operation,
  ReplacementTooSoonError,
  StoreUnavailableError,
  type Transport,
  TransportError,
  UnknownConnectionError,
} from '../client/src/index.js';
import { tokenBroker } from '../client/src/middy.js';
import { createTransport } from '../client/src/transports.js';
import { caught } from './support/errors.js';
import { scripted } from './support/scripted-transport.js';

const T0 = new Date('2026-11-25T12:00:00Z').getTime();

let tokens = 0;
/** A broker answer: valid an hour, reusable 5 s, usable stale 120 s after that. */
const answer = () => {
  tokens += 1;
  return {
    connection: 'sandbox',
    accessToken: `at_${tokens}`,
    expiresAt: new Date(Date.now() + 3_600_000).toISOString(),
    expiresIn: 3_600,
    maxAgeMs: 5_000,
    staleIfErrorSeconds: 120,
  };
};

const down = () =>
  new TransportError('Could not reach https://a.example: fetch failed', 'TRANSPORT_FAILED');

const flush = () => vi.advanceTimersByTimeAsync(0);

/** A client over `count` scripted brokers, and what it was told. */
const fleet = (count: number, options: { timeoutMs?: number; openMs?: number } = {}) => {
  const brokers = Array.from({ length: count }, scripted);
  const warnings: string[] = [];
  const client = createTokenClient({
    brokers: brokers.map((b) => b.transport),
    onWarning: (message) => warnings.push(message),
    ...(options.timeoutMs === undefined ? {} : { timeoutMs: options.timeoutMs }),
    ...(options.openMs === undefined ? {} : { failover: { openMs: options.openMs } }),
  });
  /** The requests each broker got so far. */
  const counts = () => brokers.map((b) => b.sent.length);
  return { brokers, client, warnings, counts };
};

describe('Client failover: asks the next broker when one cannot answer (issue 26)', () => {
  beforeEach(() => {
    vi.useFakeTimers().setSystemTime(T0);
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('is answered by the second broker when the first is down, and says so once', async () => {
    const { brokers, client, warnings, counts } = fleet(2);
    const call = client.getToken('sandbox');
    await flush();
    brokers[0]?.sent[0]?.fail(down());
    await flush();
    expect(counts()).toEqual([1, 1]);
    brokers[1]?.sent[0]?.answer(answer());
    const token = await call;
    expect(token.stale).toBeUndefined();
    expect(token.accessToken).toBe(`at_${tokens}`);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain('#1 cannot answer');
    expect(warnings[0]).toContain('fetch failed');
  });

  it('names a broker in its warning by its label, its URL or its ARN, never with a token', async () => {
    const labelled = scripted();
    const warnings: string[] = [];
    const client = createTokenClient({
      brokers: [{ ...labelled.transport, label: 'eu-west-1' }, scripted().transport],
      onWarning: (message) => warnings.push(message),
    });
    const call = client.getToken('sandbox').then(() => undefined, caught);
    await flush();
    labelled.sent[0]?.fail(down());
    await flush();
    expect(warnings[0]).toMatch(/^The token broker eu-west-1 cannot answer/);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(await call).toMatchObject({ code: 'TIMEOUT' });
  });

  it('fails over on the broker’s 5xx, AWS’s 5xx, 429, IAM denial or missing function, a timeout and a failing transport', async () => {
    const failures: unknown[] = [
      new StoreUnavailableError('isolated region', 'STORE_UNAVAILABLE', { status: 503 }),
      new TransportError('HTTP 502', 'TRANSPORT_FAILED', { status: 502 }),
      new TransportError('HTTP 429', 'TRANSPORT_FAILED', { status: 429 }),
      new TransportError('HTTP 403 without the broker’s error', 'TRANSPORT_FAILED', {
        status: 403,
      }),
      new TransportError('Function not found', 'TRANSPORT_FAILED', { status: 404 }),
      new TransportError('no answer in time', 'TIMEOUT'),
      new Error('a custom transport threw'),
    ];
    for (const failure of failures) {
      const { brokers, client } = fleet(2);
      const call = client.getToken('sandbox');
      await flush();
      brokers[0]?.sent[0]?.fail(failure);
      await flush();
      expect(brokers[1]?.sent, String(failure)).toHaveLength(1);
      brokers[1]?.sent[0]?.answer(answer());
      expect((await call).accessToken).toMatch(/^at_/);
    }
  });

  it('does not fail over on an answer: every region reads one configuration and one table', async () => {
    const answers = [
      new UnknownConnectionError('No connection', 'UNKNOWN_CONNECTION', { status: 404 }),
      new BadRequestError('bad', 'BAD_REQUEST', { status: 400 }),
      new CallerNotAllowedError('not in callers', 'CALLER_NOT_ALLOWED', { status: 403 }),
      new ReplacementTooSoonError('too soon', 'REPLACEMENT_TOO_SOON', { status: 429 }),
      new TransportError('redirect', 'TRANSPORT_FAILED', { status: 302 }),
    ];
    for (const error of answers) {
      const { brokers, client, warnings } = fleet(2);
      const call = client.getToken('sandbox').then(() => undefined, caught);
      await flush();
      brokers[0]?.sent[0]?.fail(error);
      expect(await call, error.message).toBe(error);
      expect(brokers[1]?.sent).toHaveLength(0);
      expect(warnings).toEqual([]);
      // The broker answered: its breaker stays closed, the next call asks it first.
      const next = client.getToken('sandbox');
      await flush();
      expect(brokers[0]?.sent).toHaveLength(2);
      brokers[0]?.sent[1]?.answer(answer());
      await next;
    }
  });

  it('an open breaker skips the first broker without a call; after openMs one call tries it again and its answer closes it', async () => {
    const { brokers, client, counts } = fleet(2);
    const first = client.getToken('sandbox', { forceRefresh: true });
    await flush();
    brokers[0]?.sent[0]?.fail(down());
    await flush();
    brokers[1]?.sent[0]?.answer(answer());
    await first;
    // Open for 5 s: straight to the second broker.
    await vi.advanceTimersByTimeAsync(4_999);
    const skipped = client.getToken('sandbox', { forceRefresh: true });
    await flush();
    expect(counts()).toEqual([1, 2]);
    brokers[1]?.sent[1]?.answer(answer());
    await skipped;
    // Half-open: one call tries the first again, a concurrent one goes to the second.
    await vi.advanceTimersByTimeAsync(1);
    const trial = client.getToken('sandbox', { forceRefresh: true });
    const beside = client.getToken('sandbox', { forceRefresh: true, minValidity: 5 });
    await flush();
    expect(counts()).toEqual([2, 3]);
    brokers[1]?.sent[2]?.answer(answer());
    await beside;
    brokers[0]?.sent[1]?.answer(answer());
    await trial;
    // Closed again: the first broker is asked first.
    const after = client.getToken('sandbox', { forceRefresh: true });
    await flush();
    expect(counts()).toEqual([3, 3]);
    brokers[0]?.sent[2]?.answer(answer());
    await after;
  });

  it('a failed retry opens the breaker again for twice as long, and fails over within the same call', async () => {
    const { brokers, client, counts } = fleet(2);
    const ask = async (failFirst: boolean) => {
      const call = client.getToken('sandbox', { forceRefresh: true });
      await flush();
      const before = counts();
      if (failFirst) {
        brokers[0]?.sent.at(-1)?.fail(down());
        await flush();
      }
      brokers[1]?.sent.at(-1)?.answer(answer());
      await call;
      return before;
    };
    await ask(true);
    await vi.advanceTimersByTimeAsync(5_000);
    // The retry fails: the second broker answers the same call.
    await ask(true);
    expect(counts()).toEqual([2, 2]);
    await vi.advanceTimersByTimeAsync(9_999);
    await ask(false);
    expect(counts()).toEqual([2, 3]);
    await vi.advanceTimersByTimeAsync(1);
    await ask(true);
    expect(counts()).toEqual([3, 4]);
  });

  it('with every breaker open, asks every broker in order rather than fail without asking', async () => {
    const { brokers, client, counts, warnings } = fleet(2);
    const first = client.getToken('sandbox').then(() => undefined, caught);
    await flush();
    brokers[0]?.sent[0]?.fail(down());
    await flush();
    brokers[1]?.sent[0]?.fail(down());
    expect(await first).toBeInstanceOf(TransportError);
    expect(warnings).toHaveLength(2);
    const second = client.getToken('sandbox');
    await flush();
    expect(counts()).toEqual([2, 1]);
    brokers[0]?.sent[1]?.fail(down());
    await flush();
    expect(counts()).toEqual([2, 2]);
    brokers[1]?.sent[1]?.answer(answer());
    await second;
    // No new warning for brokers already open.
    expect(warnings).toHaveLength(2);
  });

  it('hands out the last token, stale, only once every broker failed', async () => {
    // Open 20 s: the first stays skipped through this test.
    const { brokers, client, warnings, counts } = fleet(3, { openMs: 20_000 });
    const got = client.getToken('sandbox');
    await flush();
    brokers[0]?.sent[0]?.answer(answer());
    const token = await got;
    await vi.advanceTimersByTimeAsync(6_000);
    // The first fails, the second answers: fresh, not stale.
    const fresh = client.getToken('sandbox');
    await flush();
    brokers[0]?.sent[1]?.fail(down());
    await flush();
    brokers[1]?.sent[0]?.answer(answer());
    expect((await fresh).stale).toBeUndefined();
    await vi.advanceTimersByTimeAsync(6_000);
    // Now the second and the third fail (the first is skipped, open): stale.
    const stale = client.getToken('sandbox');
    await flush();
    brokers[1]?.sent[1]?.fail(down());
    await flush();
    brokers[2]?.sent[0]?.fail(new TransportError('HTTP 503', 'TRANSPORT_FAILED', { status: 503 }));
    const handed = (await stale) as AccessToken;
    expect(handed.stale).toBe(true);
    expect(handed.accessToken).not.toBe(token.accessToken);
    expect(counts()).toEqual([2, 2, 1]);
    expect(warnings.filter((w) => w.includes('cannot be reached'))).toHaveLength(1);
  });

  it('hands out no stale token when a broker refused in front of it (an IAM denial): fails with that refusal', async () => {
    const { brokers, client } = fleet(2);
    const got = client.getToken('sandbox');
    await flush();
    brokers[0]?.sent[0]?.answer(answer());
    await got;
    await vi.advanceTimersByTimeAsync(6_000);
    const denied = new TransportError('HTTP 403 without the broker’s error', 'TRANSPORT_FAILED', {
      status: 403,
    });
    const call = client.getToken('sandbox').then(() => undefined, caught);
    await flush();
    brokers[0]?.sent[1]?.fail(denied);
    await flush();
    brokers[1]?.sent[0]?.fail(down());
    expect(await call).toBe(denied);
  });

  it('shares the call’s time among the attempts: a broker that hangs gets its share, not the whole timeout', async () => {
    const { brokers, client } = fleet(3, { timeoutMs: 9_000 });
    const started = performance.now();
    const call = client.getToken('sandbox');
    await flush();
    // Three brokers to try, 9 s: 3 s for the first.
    await vi.advanceTimersByTimeAsync(2_999);
    expect(brokers[0]?.sent[0]?.signal.aborted).toBe(false);
    expect(brokers[1]?.sent).toHaveLength(0);
    await vi.advanceTimersByTimeAsync(1);
    expect(brokers[0]?.sent[0]?.signal.aborted).toBe(true);
    expect(brokers[1]?.sent).toHaveLength(1);
    // 6 s left for two: 3 s for the second, which hangs too.
    await vi.advanceTimersByTimeAsync(3_000);
    expect(brokers[1]?.sent[0]?.signal.aborted).toBe(true);
    expect(brokers[2]?.sent).toHaveLength(1);
    brokers[2]?.sent[0]?.answer(answer());
    await call;
    expect(performance.now() - started).toBeLessThanOrEqual(9_000);
  });

  it('never waits past the caller’s timeout, also when a broker fails fast and the next hangs', async () => {
    const { brokers, client } = fleet(2, { timeoutMs: 4_000 });
    const call = client.getToken('sandbox').then(() => undefined, caught);
    await flush();
    await vi.advanceTimersByTimeAsync(500);
    brokers[0]?.sent[0]?.fail(down());
    await flush();
    // The second gets all that is left: 3.5 s.
    await vi.advanceTimersByTimeAsync(3_499);
    expect(brokers[1]?.sent[0]?.signal.aborted).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    const error = await call;
    expect(error).toBeInstanceOf(TransportError);
    expect(error).toMatchObject({ code: 'TIMEOUT' });
  });

  it('cuts an attempt at a transport that ignores its signal', async () => {
    const sent: Operation[] = [];
    const deaf: Transport = {
      send: (operation) => {
        sent.push(operation);
        return new Promise(() => undefined);
      },
    };
    const { brokers } = fleet(1);
    const client = createTokenClient({
      brokers: [deaf, brokers[0]?.transport as Transport],
      timeoutMs: 2_000,
      onWarning: () => undefined,
    });
    const call = client.getToken('sandbox');
    await vi.advanceTimersByTimeAsync(1_000);
    expect(brokers[0]?.sent).toHaveLength(1);
    brokers[0]?.sent[0]?.answer(answer());
    expect((await call).accessToken).toMatch(/^at_/);
  });

  it('gives a shared request’s attempts the time of the caller that waits longest', async () => {
    const { brokers, client } = fleet(2, { timeoutMs: 2_000 });
    const short = client.getToken('sandbox').then(() => undefined, caught);
    const long = client.getToken('sandbox', { timeoutMs: 10_000 });
    await flush();
    expect(brokers[0]?.sent).toHaveLength(1);
    // The first caller's 2 s would give the first broker 1 s; the second caller's 10 s give 5.
    await vi.advanceTimersByTimeAsync(2_000);
    expect(await short).toMatchObject({ code: 'TIMEOUT' });
    expect(brokers[0]?.sent[0]?.signal.aborted).toBe(false);
    await vi.advanceTimersByTimeAsync(3_000);
    expect(brokers[0]?.sent[0]?.signal.aborted).toBe(true);
    brokers[1]?.sent[0]?.answer(answer());
    expect((await long).accessToken).toMatch(/^at_/);
  });

  it('sends a report, status, warm-up and readiness to the first broker that answers', async () => {
    const { brokers, client } = fleet(2);
    const report = client.invalidate('sandbox', 'at_old');
    await flush();
    brokers[0]?.sent[0]?.fail(down());
    await flush();
    expect(brokers[1]?.sent[0]?.operation).toEqual({
      action: 'invalidate',
      connection: 'sandbox',
      accessToken: 'at_old',
    });
    brokers[1]?.sent[0]?.answer({ invalidated: true });
    expect(await report).toEqual({ invalidated: true });
    const status = client.status();
    await flush();
    // The first is open: skipped.
    expect(brokers[1]?.sent[1]?.operation).toEqual({ action: 'status' });
    brokers[1]?.sent[1]?.answer({ connections: [] });
    expect(await status).toEqual([]);
  });

  it('stops at the caller’s abort: the next broker is not asked, and the breaker is not tripped', async () => {
    const { brokers, client, warnings } = fleet(2);
    const controller = new AbortController();
    const call = client.getToken('sandbox', { signal: controller.signal }).then(() => 0, caught);
    await flush();
    controller.abort();
    expect(await call).toMatchObject({ code: 'ABORTED' });
    await flush();
    expect(brokers[1]?.sent).toHaveLength(0);
    expect(warnings).toEqual([]);
    const next = client.getToken('sandbox');
    await flush();
    expect(brokers[0]?.sent).toHaveLength(2);
    brokers[0]?.sent[1]?.answer(answer());
    await next;
  });

  it('the middleware takes the list too', async () => {
    const { brokers } = fleet(2);
    const middleware = tokenBroker({
      brokers: brokers.map((b) => b.transport),
      failover: { openMs: 1_000 },
      fetchData: { openApiToken: 'sandbox' },
    });
    const request = {
      context: { getRemainingTimeInMillis: () => 5_000 },
      internal: {} as Record<string, unknown>,
    };
    const before = middleware.before(request);
    await flush();
    brokers[0]?.sent[0]?.fail(down());
    await flush();
    brokers[1]?.sent[0]?.answer(answer());
    await before;
    expect(request.internal.openApiToken).toMatch(/^at_/);
    expect(() =>
      tokenBroker({
        brokers: ['https://a.example'],
        transport: { type: 'http', url: 'https://a.example' },
        fetchData: { t: 'sandbox' },
      }),
    ).toThrow(ClientConfigError);
  });
});

describe('Client failover: the brokers option', () => {
  it('refuses both transport and brokers, neither, an empty list, a bare name, unknown failover keys, and failover with one transport', () => {
    const transport = { type: 'http', url: 'https://a.example' } as const;
    const refused = [
      { transport, brokers: [transport] },
      {},
      { brokers: [] },
      { brokers: ['token-broker-prod-broker'] },
      { brokers: [transport], failover: { openMS: 5 } },
      { brokers: [transport], failover: { openMs: 0 } },
      { brokers: [transport], failover: { openMs: 10_000, maxOpenMs: 5_000 } },
      // Before: accepted and ignored.
      { transport, failover: { openMs: 1_000 } },
    ];
    for (const options of refused) {
      expect(() => createTokenClient(options as never), JSON.stringify(options)).toThrow(
        ClientConfigError,
      );
    }
    expect(() =>
      createTokenClient({
        brokers: [
          'arn:aws:lambda:eu-west-1:123456789012:function:token-broker-prod-broker',
          'https://abc.lambda-url.eu-central-1.on.aws',
          transport,
        ],
      }),
    ).not.toThrow();
  });

  it('invokes a function ARN in the ARN’s region', async () => {
    const scopes: string[] = [];
    const server = createServer((request, response) => {
      scopes.push(
        String(request.headers.authorization).match(/Credential=[^/]+\/\d+\/([^/]+)/)?.[1] ?? '',
      );
      response.setHeader('content-type', 'application/json');
      response.end(JSON.stringify(answer()));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    try {
      for (const region of ['eu-central-1', 'us-west-2']) {
        const transport = createTransport({
          type: 'lambda',
          functionName: `arn:aws:lambda:${region}:123456789012:function:token-broker`,
          endpoint,
        });
        await transport.send(
          { action: 'getToken', connection: 'sandbox' },
          { signal: new AbortController().signal },
        );
      }
      expect(scopes).toEqual(['eu-central-1', 'us-west-2']);
    } finally {
      server.close();
    }
  });

  it('gives Lambda’s service errors their HTTP status: a denial or a missing function fails over, not stale', async () => {
    const sdkError = (name: string, httpStatusCode: number) =>
      Object.assign(new Error(`${name}: no`), { name, $metadata: { httpStatusCode } });
    const cases: [string, number][] = [
      ['AccessDeniedException', 403],
      ['ResourceNotFoundException', 404],
      ['TooManyRequestsException', 429],
      ['ServiceException', 500],
    ];
    for (const [name, status] of cases) {
      const client = {
        send: async () => {
          throw sdkError(name, status);
        },
      } as unknown as LambdaClient;
      const transport = createTransport({ type: 'lambda', functionName: 'f', client });
      const error = await transport
        .send({ action: 'status' }, { signal: new AbortController().signal })
        .then(() => undefined, caught);
      expect(error).toBeInstanceOf(TransportError);
      expect(error).toMatchObject({ status });
      expect(cannotAnswer(error)).toBe(true);
    }
  });
});

describe('Client failover: Breaker', () => {
  let now = 0;
  const breaker = () => new Breaker(DEFAULT_FAILOVER, () => now);
  /** Read afresh each time (the clock moves it), not narrowed by an earlier check. */
  const isOpen = (b: Breaker) => b.state === 'open';
  beforeEach(() => {
    now = 0;
  });

  it('opens at the first failure, half-opens after openMs with one trial at a time', () => {
    const b = breaker();
    expect(b.acquire()).toBe('closed');
    expect(b.failed('closed')).toBe(true);
    expect(b.state).toBe('open');
    expect(b.acquire()).toBeUndefined();
    now = 5_000;
    expect(b.state).toBe('half-open');
    expect(b.acquire()).toBe('trial');
    expect(b.available()).toBe(false);
    expect(b.acquire()).toBeUndefined();
    b.released('trial');
    expect(b.acquire()).toBe('trial');
    b.succeeded();
    expect(b.state).toBe('closed');
  });

  it('doubles the open time after each failed trial up to maxOpenMs, and resets it on an answer', () => {
    const b = breaker();
    b.failed('closed');
    const opens: number[] = [];
    for (let i = 0; i < 6; i += 1) {
      const openedAt = now;
      while (isOpen(b)) now += 1_000;
      opens.push(now - openedAt);
      expect(b.failed(b.acquire() as 'trial')).toBe(false);
    }
    expect(opens).toEqual([5_000, 10_000, 20_000, 40_000, 60_000, 60_000]);
    while (isOpen(b)) now += 1_000;
    b.acquire();
    b.succeeded();
    b.failed('closed');
    const openedAt = now;
    while (isOpen(b)) now += 1_000;
    expect(now - openedAt).toBe(5_000);
  });

  it('a forced call (every breaker open) that fails leaves the open time as it was', () => {
    const b = breaker();
    b.failed('closed');
    now = 4_000;
    expect(b.failed('forced')).toBe(false);
    now = 5_000;
    expect(b.state).toBe('half-open');
  });
});
