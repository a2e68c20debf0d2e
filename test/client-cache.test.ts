/**
 * The client's cache and its shared requests, against a scripted transport on fake timers: how
 * long a token is reused (the broker's `maxAgeMs`, counted from the send on a monotonic clock),
 * and how concurrent callers share one request while each keeps its own timeout and signal.
 * The same client against the real broker is in client.test.ts and client-package.test.ts.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import {
  type AccessToken,
  BadRequestError,
  createTokenClient,
  InternalError,
  StoreUnavailableError,
  TokenAcceptedError,
  TokenRejectedAgainError,
  TokenReportedError,
  TransportError,
  UnknownConnectionError,
  UpstreamUnavailableError,
} from '../client/src/index.js';
import { type TokenContext, tokenBroker } from '../client/src/middy.js';
import { caught, unexpected } from './support/errors.js';
import { scripted } from './support/scripted-transport.js';

const T0 = new Date('2026-11-24T12:00:00Z').getTime();

let tokens = 0;
/** A broker answer: a token valid for an hour, reusable for `maxAgeMs`. */
const answer = (maxAgeMs: number | undefined, expiresInMs = 3_600_000) => {
  tokens += 1;
  return {
    connection: 'sandbox',
    accessToken: `at_${tokens}`,
    expiresAt: new Date(Date.now() + expiresInMs).toISOString(),
    expiresIn: Math.floor(expiresInMs / 1000),
    ...(maxAgeMs === undefined ? {} : { maxAgeMs }),
  };
};

/** Lets the client's promise chains run (fake timers do not run microtasks on their own). */
const flush = () => vi.advanceTimersByTimeAsync(0);

describe('Client cache: reuse as long as the broker says, no longer', () => {
  beforeEach(() => {
    vi.useFakeTimers().setSystemTime(T0);
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('reuses a token for maxAgeMs counted from when the request was sent, then asks again', async () => {
    const { sent, transport } = scripted();
    const client = createTokenClient({ transport });
    const first = client.getToken('sandbox');
    await flush();
    // The answer takes 500 ms to come back: those count against the reuse time.
    await vi.advanceTimersByTimeAsync(500);
    sent[0]?.answer(answer(3_000));
    const token = await first;
    expect(token.maxAgeMs).toBe(3_000);
    await vi.advanceTimersByTimeAsync(2_499);
    expect((await client.getToken('sandbox')).accessToken).toBe(token.accessToken);
    expect(sent).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(1);
    const again = client.getToken('sandbox');
    await flush();
    expect(sent).toHaveLength(2);
    sent[1]?.answer(answer(3_000));
    expect((await again).accessToken).not.toBe(token.accessToken);
  });

  it('does not reuse an answer with maxAgeMs 0, or without one (a broker before the field)', async () => {
    for (const maxAgeMs of [0, undefined, -5, Number.NaN]) {
      const { sent, transport } = scripted();
      const client = createTokenClient({ transport });
      const first = client.getToken('sandbox');
      await flush();
      sent[0]?.answer(answer(maxAgeMs));
      expect((await first).maxAgeMs).toBe(0);
      const second = client.getToken('sandbox');
      await flush();
      expect(sent).toHaveLength(2);
      sent[1]?.answer(answer(maxAgeMs));
      await second;
    }
  });

  it('keeps the margin before expiry on top of maxAgeMs', async () => {
    const { sent, transport } = scripted();
    const client = createTokenClient({ transport, marginSeconds: 60 });
    const first = client.getToken('sandbox');
    await flush();
    // Reusable for 5 s, but it expires in 61 s: 60 s of margin leave 1 s of it.
    sent[0]?.answer(answer(5_000, 61_000));
    await first;
    await vi.advanceTimersByTimeAsync(1_000);
    const second = client.getToken('sandbox');
    await flush();
    expect(sent).toHaveLength(2);
    sent[1]?.answer(answer(5_000));
    await second;
  });

  it('is not stretched by a wall clock that steps back: reuse counts on the monotonic clock', async () => {
    const { sent, transport } = scripted();
    let wall = T0;
    const client = createTokenClient({ transport, now: () => wall });
    const first = client.getToken('sandbox');
    await flush();
    sent[0]?.answer(answer(2_000));
    await first;
    await vi.advanceTimersByTimeAsync(2_000);
    // The process's wall clock steps back an hour: the reuse time has still run out.
    wall = T0 - 3_600_000;
    const second = client.getToken('sandbox');
    await flush();
    expect(sent).toHaveLength(2);
    sent[1]?.answer(answer(2_000));
    await second;
  });

  it('is not stretched by a monotonic clock that stood still while the process was frozen: the wall clock counts too', async () => {
    const { sent, transport } = scripted();
    let wall = T0;
    const client = createTokenClient({ transport, now: () => wall });
    const first = client.getToken('sandbox');
    await flush();
    sent[0]?.answer(answer(5_000));
    await first;
    // Frozen for ten minutes: the wall clock moved on, the monotonic clock did not.
    wall = T0 + 600_000;
    const second = client.getToken('sandbox');
    await flush();
    expect(sent).toHaveLength(2);
    sent[1]?.answer(answer(5_000));
    await second;
  });

  it('ends the reuse when the wall clock steps back, even with no monotonic time gone', async () => {
    const { sent, transport } = scripted();
    let wall = T0;
    const client = createTokenClient({ transport, now: () => wall });
    const first = client.getToken('sandbox');
    await flush();
    sent[0]?.answer(answer(5_000));
    await first;
    wall = T0 - 1;
    const second = client.getToken('sandbox');
    await flush();
    expect(sent).toHaveLength(2);
    sent[1]?.answer(answer(5_000));
    await second;
  });

  it('drops the cached token when the broker answers one that may not be reused', async () => {
    const { sent, transport } = scripted();
    const client = createTokenClient({ transport });
    const first = client.getToken('sandbox');
    await flush();
    sent[0]?.answer(answer(5_000));
    await first;
    // A forced call brings a token not to be reused: the cached one is older, so it goes too.
    const forced = client.getToken('sandbox', { forceRefresh: true });
    await flush();
    sent[1]?.answer(answer(0));
    await forced;
    const third = client.getToken('sandbox');
    await flush();
    expect(sent).toHaveLength(3);
    sent[2]?.answer(answer(5_000));
    await third;
  });
});

describe('Client: concurrent calls share one request, each under its own limits', () => {
  beforeEach(() => {
    vi.useFakeTimers().setSystemTime(T0);
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('a second caller does not inherit the first caller’s 1 ms timeout', async () => {
    const { sent, transport } = scripted();
    const client = createTokenClient({ transport });
    const hasty = client.getToken('sandbox', { timeoutMs: 1 }).then(unexpected, caught);
    const patient = client.getToken('sandbox', { timeoutMs: 5_000 });
    await vi.advanceTimersByTimeAsync(50);
    const error = await hasty;
    expect(error).toBeInstanceOf(TransportError);
    expect(error.code).toBe('TIMEOUT');
    expect(sent).toHaveLength(1);
    expect(sent[0]?.signal.aborted).toBe(false);
    sent[0]?.answer(answer(5_000));
    expect((await patient).accessToken).toMatch(/^at_/);
  });

  it('a caller that aborts does not cancel the shared request for the others', async () => {
    const { sent, transport } = scripted();
    const client = createTokenClient({ transport });
    const controller = new AbortController();
    const leaving = client
      .getToken('sandbox', { signal: controller.signal })
      .then(unexpected, caught);
    const staying = client.getToken('sandbox');
    await flush();
    controller.abort();
    const error = await leaving;
    expect(error.code).toBe('ABORTED');
    expect(sent[0]?.signal.aborted).toBe(false);
    sent[0]?.answer(answer(5_000));
    const token: AccessToken = await staying;
    expect(token.accessToken).toMatch(/^at_/);
    expect(sent).toHaveLength(1);
  });

  it('aborts the request once every caller has given up, and a later caller starts a new one', async () => {
    const { sent, transport } = scripted();
    const client = createTokenClient({ transport });
    const a = client.getToken('sandbox', { timeoutMs: 100 }).then(unexpected, caught);
    const b = client.getToken('sandbox', { timeoutMs: 200 }).then(unexpected, caught);
    await vi.advanceTimersByTimeAsync(150);
    expect((await a).code).toBe('TIMEOUT');
    expect(sent[0]?.signal.aborted).toBe(false);
    await vi.advanceTimersByTimeAsync(100);
    expect((await b).code).toBe('TIMEOUT');
    expect(sent[0]?.signal.aborted).toBe(true);
    const later = client.getToken('sandbox');
    await flush();
    expect(sent).toHaveLength(2);
    sent[1]?.answer(answer(5_000));
    await later;
    // The abandoned request's late failure reaches nobody, and is no unhandled rejection.
    sent[0]?.fail(new DOMException('aborted', 'AbortError'));
    await flush();
  });
});

describe('Middy middleware: tokenRejected', () => {
  beforeEach(() => {
    vi.useFakeTimers().setSystemTime(T0);
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  const context = () =>
    ({ getRemainingTimeInMillis: () => 5_000 }) as unknown as TokenContext<object, 'openApiToken'>;

  it('invalidates the token given, fetches once more, sets it, and never loops', async () => {
    const { sent, transport } = scripted();
    const middleware = tokenBroker({ transport, fetchData: { openApiToken: 'sandbox' } });
    const request = { context: context(), internal: {} as Record<string, unknown> };
    const before = middleware.before(request);
    await flush();
    sent[0]?.answer(answer(5_000));
    await before;
    const given = request.context.openApiToken;
    expect(request.internal.openApiToken).toBe(given);

    const fresh = request.context.tokenRejected('openApiToken');
    await flush();
    expect(sent[1]?.operation).toEqual({
      action: 'invalidate',
      connection: 'sandbox',
      accessToken: given,
    });
    sent[1]?.answer({ invalidated: true });
    await flush();
    // The cached token was the rejected one: the client asks the broker, not its cache.
    expect(sent[2]?.operation).toEqual({ action: 'getToken', connection: 'sandbox' });
    sent[2]?.answer(answer(5_000));
    const token = await fresh;
    expect(token).not.toBe(given);
    expect(request.context.openApiToken).toBe(token);
    expect(request.internal.openApiToken).toBe(token);

    const again = await request.context.tokenRejected('openApiToken').then(unexpected, caught);
    expect(again).toBeInstanceOf(TokenRejectedAgainError);
    expect(again.code).toBe('TOKEN_REJECTED_AGAIN');
    expect(sent).toHaveLength(3);
    expect(again.message).not.toContain(token);
    expect(again.message).not.toContain(given);
  });

  it('refuses a key that fetchData does not name, and starts afresh on the next invocation', async () => {
    const { sent, transport } = scripted();
    const middleware = tokenBroker({ transport, fetchData: { openApiToken: 'sandbox' } });
    const first = { context: context(), internal: {} };
    const before = middleware.before(first);
    await flush();
    sent[0]?.answer(answer(5_000));
    await before;
    const error = await first.context
      .tokenRejected('constructor' as 'openApiToken')
      .then(unexpected, caught);
    expect(error.code).toBe('CLIENT_CONFIG_INVALID');
    // A new invocation may report once more.
    const second = { context: context(), internal: {} };
    await middleware.before(second);
    const fresh = second.context.tokenRejected('openApiToken');
    await flush();
    sent.at(-1)?.answer({ invalidated: true });
    await flush();
    sent.at(-1)?.answer(answer(5_000));
    expect(await fresh).toMatch(/^at_/);
  });
});

describe('Client: a token it reported is never handed out again (issue 24)', () => {
  beforeEach(() => {
    vi.useFakeTimers().setSystemTime(T0);
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  /** A broker answer carrying a given token. */
  const carrying = (accessToken: string, maxAgeMs = 5_000) => ({
    ...answer(maxAgeMs),
    accessToken,
  });

  it('a getToken sent before an invalidate and answered after it: neither cached nor handed out', async () => {
    const { sent, transport } = scripted();
    const client = createTokenClient({ transport });
    const first = client.getToken('sandbox');
    await flush();
    sent[0]?.answer(carrying('at_reported'));
    expect((await first).accessToken).toBe('at_reported');
    // Another getToken leaves (the cache is past its reuse time) …
    await vi.advanceTimersByTimeAsync(5_000);
    const racing = client.getToken('sandbox');
    await flush();
    expect(sent).toHaveLength(2);
    // … then the Open API rejects at_reported, and the client reports it.
    const report = client.invalidate('sandbox', 'at_reported');
    await flush();
    sent[2]?.answer({ invalidated: true });
    await report;
    // The racing request is answered with the reported token by a container that had not seen
    // the report yet: the client asks once more, and hands out the fresh token.
    sent[1]?.answer(carrying('at_reported'));
    await flush();
    expect(sent).toHaveLength(4);
    expect(sent[3]?.operation).toEqual({ action: 'getToken', connection: 'sandbox' });
    sent[3]?.answer(carrying('at_fresh'));
    expect((await racing).accessToken).toBe('at_fresh');
    const later: string[] = [];
    for (let i = 0; i < 4; i += 1) {
      const next = client.getToken('sandbox');
      await flush();
      sent.at(-1)?.answer(carrying('at_fresh'));
      later.push((await next).accessToken);
    }
    expect(later).toEqual(['at_fresh', 'at_fresh', 'at_fresh', 'at_fresh']);
  });

  it('an answer to a request sent before the report is not cached, even with another token', async () => {
    const { sent, transport } = scripted();
    const client = createTokenClient({ transport });
    const racing = client.getToken('sandbox');
    await flush();
    const report = client.invalidate('sandbox', 'at_reported');
    await flush();
    sent[1]?.answer({ invalidated: true });
    await report;
    sent[0]?.answer(carrying('at_other'));
    expect((await racing).accessToken).toBe('at_other');
    // Not cached: the next call asks the broker.
    const next = client.getToken('sandbox');
    await flush();
    expect(sent).toHaveLength(3);
    sent[2]?.answer(carrying('at_other'));
    expect((await next).accessToken).toBe('at_other');
    // That one was sent after the report: cached.
    expect((await client.getToken('sandbox')).accessToken).toBe('at_other');
    expect(sent).toHaveLength(3);
  });

  it('a later request does not join one sent before the report', async () => {
    const { sent, transport } = scripted();
    const client = createTokenClient({ transport });
    const early = client.getToken('sandbox');
    await flush();
    const report = client.invalidate('sandbox', 'at_reported');
    await flush();
    sent[1]?.answer({ invalidated: true });
    await report;
    const late = client.getToken('sandbox');
    await flush();
    expect(sent).toHaveLength(3);
    expect(sent[2]?.operation).toEqual({ action: 'getToken', connection: 'sandbox' });
    sent[2]?.answer(carrying('at_fresh'));
    expect((await late).accessToken).toBe('at_fresh');
    sent[0]?.answer(carrying('at_reported'));
    await flush();
    // The early caller got the reported token: it asks again rather than hand it out.
    sent[3]?.answer(carrying('at_fresh'));
    expect((await early).accessToken).toBe('at_fresh');
  });

  it('callers that shared the answer with a reported token share one new request; one that gave up starts none', async () => {
    const { sent, transport } = scripted();
    const client = createTokenClient({ transport });
    const report = client.invalidate('sandbox', 'at_reported');
    await flush();
    sent[0]?.answer({ invalidated: true });
    await report;
    const controller = new AbortController();
    const leaving = client
      .getToken('sandbox', { signal: controller.signal })
      .then(unexpected, caught);
    const a = client.getToken('sandbox');
    const b = client.getToken('sandbox');
    await flush();
    expect(sent).toHaveLength(2);
    controller.abort();
    expect((await leaving).code).toBe('ABORTED');
    sent[1]?.answer(carrying('at_reported'));
    await flush();
    expect(sent).toHaveLength(3);
    sent[2]?.answer(carrying('at_fresh'));
    expect([(await a).accessToken, (await b).accessToken]).toEqual(['at_fresh', 'at_fresh']);
    expect(sent).toHaveLength(3);
  });

  it('invalidate() resolves with the broker’s answer, deferredSeconds included', async () => {
    const { sent, transport } = scripted();
    const client = createTokenClient({ transport });
    const now = client.invalidate('sandbox', 'at_one');
    await flush();
    sent[0]?.answer({ invalidated: true });
    expect(await now).toEqual({ invalidated: true });
    const deferred = client.invalidate('sandbox', 'at_two');
    await flush();
    sent[1]?.answer({ invalidated: false, deferredSeconds: 7 });
    expect(await deferred).toEqual({ invalidated: false, deferredSeconds: 7 });
    const stale = client.invalidate('sandbox', 'at_three');
    await flush();
    sent[2]?.answer({ invalidated: false });
    expect(await stale).toEqual({ invalidated: false });
  });

  it('fails with TokenReportedError, never the token, when the broker still serves it after one more ask', async () => {
    const { sent, transport } = scripted();
    const client = createTokenClient({ transport });
    const report = client.invalidate('sandbox', 'at_reported');
    await flush();
    sent[0]?.answer({ invalidated: true });
    await report;
    const refused = client.getToken('sandbox').then(unexpected, caught);
    await flush();
    sent[1]?.answer(carrying('at_reported', 2_500));
    await flush();
    expect(sent).toHaveLength(3);
    sent[2]?.answer(carrying('at_reported', 2_500));
    const error = await refused;
    expect(error).toBeInstanceOf(TokenReportedError);
    expect(error.code).toBe('TOKEN_REPORTED');
    // The answering container serves it from memory for its maxAgeMs at most.
    expect(error.retryAfterSeconds).toBe(3);
    expect(error.message).not.toContain('at_reported');
    expect(sent).toHaveLength(3);
  });

  it('while the broker keeps a report for deferredSeconds, refuses its token without asking twice, then takes the replacement', async () => {
    const { sent, transport } = scripted();
    const client = createTokenClient({ transport });
    const report = client.invalidate('sandbox', 'at_reported');
    await flush();
    sent[0]?.answer({ invalidated: false, deferredSeconds: 3 });
    expect(await report).toEqual({ invalidated: false, deferredSeconds: 3 });
    const refused = client.getToken('sandbox').then(unexpected, caught);
    await flush();
    sent[1]?.answer(carrying('at_reported'));
    const error = await refused;
    expect(error).toBeInstanceOf(TokenReportedError);
    expect(error.retryAfterSeconds).toBe(3);
    expect(sent).toHaveLength(2);
    // Past the deferral the broker replaced it: the client hands out the new one.
    await vi.advanceTimersByTimeAsync(3_000);
    const after = client.getToken('sandbox');
    await flush();
    sent[2]?.answer(carrying('at_replacement'));
    expect((await after).accessToken).toBe('at_replacement');
    // A late answer with the reported token is still refused after the deferral (asked again).
    await vi.advanceTimersByTimeAsync(5_000);
    const late = client.getToken('sandbox');
    await flush();
    sent[3]?.answer(carrying('at_reported'));
    await flush();
    sent[4]?.answer(carrying('at_replacement'));
    expect((await late).accessToken).toBe('at_replacement');
  });

  it('forgets a reported token when it expires, and a report that did not reach the broker', async () => {
    const { sent, transport } = scripted();
    const client = createTokenClient({ transport, marginSeconds: 0 });
    const failed = client.invalidate('sandbox', 'at_unreported').then(unexpected, caught);
    await flush();
    sent[0]?.fail(new Error('connection reset'));
    expect((await failed).code).toBe('TRANSPORT_FAILED');
    const first = client.getToken('sandbox');
    await flush();
    sent[1]?.answer(carrying('at_unreported'));
    expect((await first).accessToken).toBe('at_unreported');
    // Reported and seen with its expiry (an hour): refused until then, then forgotten.
    const report = client.invalidate('sandbox', 'at_unreported');
    await flush();
    sent[2]?.answer({ invalidated: true });
    await report;
    await vi.advanceTimersByTimeAsync(3_600_000);
    const expired = {
      ...carrying('at_unreported'),
      expiresAt: new Date(Date.now() + 1_000).toISOString(),
    };
    const after = client.getToken('sandbox');
    await flush();
    sent[3]?.answer(expired);
    expect((await after).accessToken).toBe('at_unreported');
  });

  it('withToken’s retry uses a token other than the one it reported, also when a racing answer brings it back', async () => {
    const { sent, transport } = scripted();
    const client = createTokenClient({ transport });
    const seen: string[] = [];
    let racing: Promise<AccessToken> | undefined;
    const outcome = client.withToken('sandbox', async (token) => {
      seen.push(token);
      if (seen.length === 1) {
        // Meanwhile another caller of this client asks (the cache is past its reuse time).
        await vi.advanceTimersByTimeAsync(5_000);
        racing = client.getToken('sandbox');
        await flush();
        return new Response(null, { status: 401 });
      }
      return new Response('ok');
    });
    await flush();
    sent[0]?.answer(carrying('at_reported'));
    await vi.waitFor(() => expect(sent).toHaveLength(3));
    expect(sent[2]?.operation.action).toBe('invalidate');
    sent[2]?.answer({ invalidated: true });
    // The racing request comes back with the reported token after the report.
    sent[1]?.answer(carrying('at_reported'));
    await flush();
    // Whatever the client asks from here on, the broker answers with a fresh token.
    for (const request of sent.slice(3)) request.answer(carrying('at_fresh'));
    await flush();
    for (const request of sent.slice(3)) request.answer(carrying('at_fresh'));
    await (await outcome).text();
    expect(seen).toEqual(['at_reported', 'at_fresh']);
    expect((await racing)?.accessToken).toBe('at_fresh');
  });

  it('a report the broker’s probe found wrong (verified: valid) is forgotten: the token is handed out again, and withToken does not retry with it', async () => {
    const { sent, transport } = scripted();
    const client = createTokenClient({ transport });
    const seen: string[] = [];
    const outcome = client.withToken('sandbox', async (token) => {
      seen.push(token);
      return new Response('{"error":"insufficient scope"}', { status: 401 });
    });
    await flush();
    sent[0]?.answer(carrying('at_live'));
    await vi.waitFor(() => expect(sent).toHaveLength(2));
    expect(sent[1]?.operation.action).toBe('invalidate');
    sent[1]?.answer({ invalidated: false, verified: 'valid' });
    // The caller sees the 401 its fn got, body and all: a retry would send the same token.
    const response = await outcome;
    expect(response.status).toBe(401);
    expect(await response.json()).toEqual({ error: 'insufficient scope' });
    expect(seen).toEqual(['at_live']);
    expect(sent).toHaveLength(2);
    // And the token is not refused as reported: the Open API accepts it.
    await vi.advanceTimersByTimeAsync(5_000);
    const again = client.getToken('sandbox');
    await flush();
    sent[2]?.answer(carrying('at_live'));
    expect((await again).accessToken).toBe('at_live');
    expect(sent).toHaveLength(3);
  });

  it('a failed report does not forget a token another report of it got to the broker', async () => {
    const { sent, transport } = scripted();
    const client = createTokenClient({ transport });
    const lost = client.invalidate('sandbox', 'at_reported').then(unexpected, caught);
    const kept = client.invalidate('sandbox', 'at_reported');
    await flush();
    // The broker keeps the second report for 30 s; the first never gets an answer.
    sent[1]?.answer({ invalidated: false, deferredSeconds: 30 });
    expect(await kept).toEqual({ invalidated: false, deferredSeconds: 30 });
    sent[0]?.fail(new Error('connection reset'));
    expect((await lost).code).toBe('TRANSPORT_FAILED');
    // The broker still serves it: the client does not hand it out.
    const refused = client.getToken('sandbox').then(unexpected, caught);
    await flush();
    sent[2]?.answer(carrying('at_reported'));
    expect(await refused).toBeInstanceOf(TokenReportedError);
  });

  it('the middleware’s tokenRejected fails with TokenAcceptedError when the broker’s probe found the token valid', async () => {
    const { sent, transport } = scripted();
    const middleware = tokenBroker({ transport, fetchData: { openApiToken: 'sandbox' } });
    const request = {
      context: { getRemainingTimeInMillis: () => 5_000 } as unknown as TokenContext<
        object,
        'openApiToken'
      >,
      internal: {} as Record<string, unknown>,
    };
    const before = middleware.before(request as never);
    await flush();
    sent[0]?.answer(carrying('at_live'));
    await before;
    const rejected = request.context.tokenRejected('openApiToken').then(unexpected, caught);
    await flush();
    sent[1]?.answer({ invalidated: false, verified: 'valid' });
    const error = await rejected;
    expect(error).toBeInstanceOf(TokenAcceptedError);
    expect(error.code).toBe('TOKEN_ACCEPTED');
    expect(error.message).not.toContain('at_live');
    expect(sent).toHaveLength(2);
  });

  it('the middleware’s tokenRejected never returns the token it reported', async () => {
    const { sent, transport } = scripted();
    const middleware = tokenBroker({ transport, fetchData: { openApiToken: 'sandbox' } });
    const request = {
      context: { getRemainingTimeInMillis: () => 5_000 } as unknown as TokenContext<
        object,
        'openApiToken'
      >,
      internal: {} as Record<string, unknown>,
    };
    const before = middleware.before(request);
    await flush();
    sent[0]?.answer(carrying('at_reported'));
    await before;
    const fresh = request.context.tokenRejected('openApiToken').then(unexpected, caught);
    await flush();
    sent[1]?.answer({ invalidated: false, deferredSeconds: 2 });
    await flush();
    sent[2]?.answer(carrying('at_reported'));
    const error = await fresh;
    expect(error).toBeInstanceOf(TokenReportedError);
    expect(error.retryAfterSeconds).toBe(2);
    expect(request.context.openApiToken).toBe('at_reported');
  });
});

describe('Client: the local-defaults warning', () => {
  it('is printed once per process, however many clients target a loopback broker', async () => {
    const saved = { ...process.env };
    for (const name of Object.keys(process.env)) {
      if (name.startsWith('AWS_')) delete process.env[name];
    }
    process.env.AWS_EC2_METADATA_DISABLED = 'true';
    process.env.AWS_CONFIG_FILE = '/nonexistent';
    process.env.AWS_SHARED_CREDENTIALS_FILE = '/nonexistent';
    const emitted = vi.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
    try {
      const fakeFetch: typeof fetch = async () =>
        Response.json(answer(5_000), { headers: { 'content-type': 'application/json' } });
      for (let i = 0; i < 3; i += 1) {
        const client = createTokenClient({
          transport: { type: 'http', url: 'http://127.0.0.1:9', fetch: fakeFetch },
        });
        expect((await client.getToken('sandbox')).accessToken).toMatch(/^at_/);
      }
      const local = emitted.mock.calls.filter(
        ([, options]) =>
          (options as { code?: string } | undefined)?.code === 'TOKEN_BROKER_LOCAL_DEFAULTS',
      );
      expect(local).toHaveLength(1);
      expect(String(local[0]?.[0])).toContain('placeholder credentials');
      // A client's own onWarning is told every time: it is the caller's to dedupe.
      const told: string[] = [];
      await createTokenClient({
        onWarning: (message) => told.push(message),
        transport: { type: 'http', url: 'http://127.0.0.1:9', fetch: fakeFetch },
      }).getToken('sandbox');
      expect(told).toHaveLength(1);
    } finally {
      emitted.mockRestore();
      process.env = saved;
    }
  });
});

describe('Client: the last token while the broker cannot be reached (stale-if-error, issue 26)', () => {
  beforeEach(() => {
    vi.useFakeTimers().setSystemTime(T0);
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  /** A broker answer that may be reused 5 s, and used stale `staleIfErrorSeconds` after that. */
  const staleAnswer = (staleIfErrorSeconds: number, expiresInMs = 3_600_000) => ({
    ...answer(5_000, expiresInMs),
    staleIfErrorSeconds,
  });
  const unreachable = () =>
    new TransportError('Could not reach http://127.0.0.1:3000: fetch failed', 'TRANSPORT_FAILED');

  /** A client with one answered token, and what it was told. */
  const holding = async (first: unknown, options: { marginSeconds?: number } = {}) => {
    const { sent, transport } = scripted();
    const warnings: string[] = [];
    const client = createTokenClient({
      transport,
      onWarning: (message) => warnings.push(message),
      ...options,
    });
    const got = client.getToken('sandbox');
    await flush();
    sent[0]?.answer(first);
    const token = await got;
    /** One getToken whose request fails with `error` (or is answered with `body`). */
    const next = async (outcome: { error?: unknown; body?: unknown }, minValidity?: number) => {
      const call = client
        .getToken('sandbox', minValidity === undefined ? {} : { minValidity })
        .then((t) => t, caught);
      await flush();
      const request = sent.at(-1);
      if (outcome.body === undefined) request?.fail(outcome.error);
      else request?.answer(outcome.body);
      return call;
    };
    return { client, sent, token, warnings, next };
  };

  it('hands out the last token, flagged stale, within its window, with one warning per outage, asking again on every call', async () => {
    const { sent, token, warnings, next } = await holding(staleAnswer(120));
    expect(token.staleIfErrorSeconds).toBe(120);
    expect(token.stale).toBeUndefined();
    await vi.advanceTimersByTimeAsync(6_000);
    for (let i = 0; i < 5; i += 1) {
      const stale = (await next({ error: unreachable() })) as AccessToken;
      expect(stale).toMatchObject({ accessToken: token.accessToken, stale: true });
      await vi.advanceTimersByTimeAsync(1_000);
    }
    // Each call asked the broker again: no circuit breaker.
    expect(sent).toHaveLength(6);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain("connection 'sandbox'");
    expect(warnings[0]).not.toContain(token.accessToken);
  });

  it('does so after the broker’s own 5xx and AWS’s 5xx or 429, but not after a 4xx, an IAM denial or an abort', async () => {
    const outages = [
      new StoreUnavailableError('The token store could not be read', 'STORE_UNAVAILABLE', {
        status: 503,
      }),
      new UpstreamUnavailableError('down', 'UPSTREAM_UNAVAILABLE', { status: 503 }),
      new InternalError('Sandbox.Timedout: timed out', 'INTERNAL_ERROR'),
      new TransportError('HTTP 502 without the broker’s error', 'TRANSPORT_FAILED', {
        status: 502,
      }),
      new TransportError('HTTP 429 without the broker’s error', 'TRANSPORT_FAILED', {
        status: 429,
      }),
      new TransportError('no answer in time', 'TIMEOUT'),
    ];
    for (const error of outages) {
      const { token, next } = await holding(staleAnswer(120));
      await vi.advanceTimersByTimeAsync(6_000);
      expect(await next({ error }), error.message).toMatchObject({
        accessToken: token.accessToken,
        stale: true,
      });
    }
    const answers = [
      new UnknownConnectionError('No connection', 'UNKNOWN_CONNECTION', { status: 404 }),
      new BadRequestError('bad', 'BAD_REQUEST', { status: 400 }),
      new TransportError('HTTP 403 without the broker’s error', 'TRANSPORT_FAILED', {
        status: 403,
      }),
      new TransportError('aborted', 'ABORTED'),
    ];
    for (const error of answers) {
      const { next } = await holding(staleAnswer(120));
      await vi.advanceTimersByTimeAsync(6_000);
      expect(await next({ error }), error.message).toBe(error);
    }
  });

  it('fails with the error past the window, counted from the send of the request', async () => {
    const { next } = await holding(staleAnswer(10));
    // Reusable 5 s, then usable stale 10 s: 15 s after the send.
    await vi.advanceTimersByTimeAsync(14_999);
    expect(await next({ error: unreachable() })).toMatchObject({ stale: true });
    await vi.advanceTimersByTimeAsync(1);
    const error = await next({ error: unreachable() });
    expect(error).toBeInstanceOf(TransportError);
  });

  it('fails when the wall clock stepped forward past the window, although the monotonic clock did not', async () => {
    const { next } = await holding(staleAnswer(10));
    await vi.advanceTimersByTimeAsync(6_000);
    expect(await next({ error: unreachable() })).toMatchObject({ stale: true });
    vi.setSystemTime(Date.now() + 10_000);
    expect(await next({ error: unreachable() })).toBeInstanceOf(TransportError);
  });

  it('never hands out a token it reported, even when the report did not reach the broker', async () => {
    const { client, sent, token, next } = await holding(staleAnswer(120));
    await vi.advanceTimersByTimeAsync(6_000);
    const report = client.invalidate('sandbox', token.accessToken).then(unexpected, caught);
    await flush();
    sent.at(-1)?.fail(unreachable());
    expect(await report).toBeInstanceOf(TransportError);
    expect(await next({ error: unreachable() })).toBeInstanceOf(TransportError);
  });

  it('never below the call’s own minValidity or the client’s margin', async () => {
    const { next } = await holding(staleAnswer(120, 100_000), { marginSeconds: 60 });
    await vi.advanceTimersByTimeAsync(6_000);
    // 94 s left: above the 60 s margin, below a minValidity of 95 s.
    expect(await next({ error: unreachable() })).toMatchObject({ stale: true });
    expect(await next({ error: unreachable() }, 95)).toBeInstanceOf(TransportError);
    await vi.advanceTimersByTimeAsync(35_000);
    // 59 s left: inside the margin.
    expect(await next({ error: unreachable() })).toBeInstanceOf(TransportError);
  });

  it('does not use a token stale when the broker said 0, and a later such answer ends an older one’s window', async () => {
    const none = await holding(staleAnswer(0));
    await vi.advanceTimersByTimeAsync(6_000);
    expect(await none.next({ error: unreachable() })).toBeInstanceOf(TransportError);

    const { next } = await holding(staleAnswer(120));
    await vi.advanceTimersByTimeAsync(6_000);
    // A replacement is announced on the next token: the broker grants it no stale use.
    const announced = (await next({ body: staleAnswer(0) })) as AccessToken;
    expect(announced.staleIfErrorSeconds).toBe(0);
    await vi.advanceTimersByTimeAsync(6_000);
    expect(await next({ error: unreachable() })).toBeInstanceOf(TransportError);
  });

  it('recovers: a fresh answer, no stale flag, and a later outage is told again', async () => {
    const { token, warnings, next } = await holding(staleAnswer(120));
    await vi.advanceTimersByTimeAsync(6_000);
    expect(await next({ error: unreachable() })).toMatchObject({ stale: true });
    const fresh = (await next({ body: staleAnswer(120) })) as AccessToken;
    expect(fresh.accessToken).not.toBe(token.accessToken);
    expect(fresh.stale).toBeUndefined();
    await vi.advanceTimersByTimeAsync(6_000);
    expect(await next({ error: unreachable() })).toMatchObject({
      accessToken: fresh.accessToken,
      stale: true,
    });
    expect(warnings).toHaveLength(2);
  });

  it('is what provider(), withToken and the middleware hand out; forceRefresh asks the broker only', async () => {
    const { client, sent } = await holding(staleAnswer(120));
    await vi.advanceTimersByTimeAsync(6_000);
    const failNext = async <T>(promise: Promise<T>) => {
      await flush();
      sent.at(-1)?.fail(unreachable());
      return promise;
    };
    const given = await failNext(client.provider('sandbox')());
    expect(given).toMatch(/^at_/);
    expect(await failNext(client.withToken('sandbox', async (t) => t))).toBe(given);
    const middleware = tokenBroker({ client, fetchData: { openApiToken: 'sandbox' } });
    const request = {
      context: { getRemainingTimeInMillis: () => 5_000 },
      internal: {} as Record<string, unknown>,
    };
    await failNext(middleware.before(request));
    expect(request.internal.openApiToken).toBe(given);
    const forced = await failNext(
      client.getToken('sandbox', { forceRefresh: true }).then(unexpected, caught),
    );
    expect(forced).toBeInstanceOf(TransportError);
  });
});
