import { createHmac } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { inspect } from 'node:util';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { issueWith } from '../../../lib/broker/issuance/issue-flow.js';
import { Deadline, systemClock } from '../../../lib/clock.js';
import type { ConnectionConfig } from '../../../lib/config.js';
import {
  BrokerError,
  UpstreamBadResponseError,
  UpstreamRejectedError,
  UpstreamUnavailableError,
} from '../../../lib/errors.js';
import type { AuthorizationCode } from '../../../lib/ports.js';
import {
  OpenApiClient,
  readJsonBody,
  tokenFromPayload,
  unwrapV3Envelope,
} from '../../../lib/upstream/open-api.js';
import {
  DEFAULT_RESILIENCE,
  RetryAfterBackoff,
  UpstreamResilience,
} from '../../../lib/upstream/resilience.js';
import type { SigningConfig } from '../../../lib/upstream/signing.js';
import { generateClient, type Simulator, startSimulator } from '../../../local/simulator.js';
import { caught, unexpected } from '../../support/errors.js';
import { connection } from '../../support/fakes.js';

const limits = { maxLifetimeSeconds: 30 * 86_400 };
const jsonResponse = (body: unknown, status = 200, headers: Record<string, string> = {}) =>
  new Response(typeof body === 'string' ? body : JSON.stringify(body), {
    status,
    headers: { 'content-type': 'application/json', ...headers },
  });

describe('Function: readJsonBody', () => {
  it('returns the parsed body of a 2xx JSON response', async () => {
    await expect(readJsonBody(jsonResponse({ a: 1 }), 'authorize')).resolves.toEqual({ a: 1 });
  });

  it.each([500, 502, 503, 429])('treats HTTP %i as unavailable', async (status) => {
    const error = await readJsonBody(
      jsonResponse({}, status, { 'retry-after': '7' }),
      'authorize',
    ).then(unexpected, caught);
    expect(error).toBeInstanceOf(UpstreamUnavailableError);
    expect(error.code).toBe('UPSTREAM_UNAVAILABLE');
    expect(error.retryAfterSeconds).toBe(7);
  });

  it('treats a 4xx as a rejection carrying the upstream code and message', async () => {
    const error = await readJsonBody(
      jsonResponse({ code: 'invalid_client', message: 'client authentication failed' }, 401),
      'access-token',
    ).then(unexpected, caught);
    expect(error).toBeInstanceOf(UpstreamRejectedError);
    expect(error.message).toBe(
      'Open API rejected the access-token request: HTTP 401, code invalid_client: client authentication failed',
    );
    expect(error.upstreamCode).toBe('invalid_client');
  });

  it('says a 200 body is not JSON without quoting it', async () => {
    const error = await readJsonBody(
      new Response('<html>at_secret_token_value</html>', {
        headers: { 'content-type': 'text/html' },
      }),
      'access-token',
    ).then(unexpected, caught);
    expect(error).toBeInstanceOf(UpstreamBadResponseError);
    expect(error.message).toContain('is not JSON (HTTP 200, content-type text/html');
    expect(error.message).not.toContain('at_secret_token_value');
  });

  it('redacts sensitive values the upstream echoes in an error message', async () => {
    const error = await readJsonBody(
      jsonResponse({ code: 'E1', message: 'code abcd1234 was already used' }, 400),
      'access-token',
      ['abcd1234'],
    ).then(unexpected, caught);
    expect(error.message).toContain('code [redacted] was already used');
    expect(error.message).not.toContain('abcd1234');
  });

  it('masks a client secret echoed URL-encoded, in another case or in part (too short and too varied for the opaque-run rule)', async () => {
    const secret = 'Kx9@q!Lm2#Zr7$Wp4&Tn';
    const echoes = [
      `clientSecret=${encodeURIComponent(secret)}`,
      `secret ${secret.toLowerCase()} is invalid`,
      `secret starting ${secret.slice(0, 12)} is invalid`,
      `secret ending ${secret.slice(-9).toUpperCase()}`,
    ];
    for (const echo of echoes) {
      const error = await readJsonBody(
        jsonResponse({ code: 'E2', message: `invalid client: ${echo}` }, 401),
        'access-token',
        [secret],
      ).then(unexpected, caught);
      expect(error.message, echo).toContain('[redacted]');
      for (let i = 0; i + 8 <= secret.length; i += 1) {
        const part = secret.slice(i, i + 8).toLowerCase();
        expect(error.message.toLowerCase(), echo).not.toContain(part);
        expect(error.message.toLowerCase(), echo).not.toContain(
          encodeURIComponent(secret)
            .toLowerCase()
            .slice(i, i + 8),
        );
      }
    }
    // The words around an echo stay: an operator reads what the upstream said.
    const plain = await readJsonBody(
      jsonResponse({ code: 'E2', message: 'invalid client secret' }, 401),
      'access-token',
      [secret],
    ).then(unexpected, caught);
    expect(plain.message).toBe(
      'Open API rejected the access-token request: HTTP 401, code E2: invalid client secret',
    );
  });

  it('masks an echo after characters whose lower case is longer (İ): the masks stay aligned', async () => {
    const secret = 'S3cr3tValue-0123456789';
    for (const before of ['İİİ', 'İ'.repeat(33)]) {
      const error = await readJsonBody(
        jsonResponse({ code: 'E3', message: `${before} invalid secret ${secret} given` }, 400),
        'access-token',
        [secret],
      ).then(unexpected, caught);
      expect(error.message).toContain('invalid secret [redacted] given');
      expect(error.message).not.toContain(secret.slice(0, 3));
    }
  });

  it('masks a signature echoed in another case, encoding or in part, which exact values miss', async () => {
    const mac = createHmac('sha256', 'secret').update('clientId=c&code=x').digest();
    const forms = [
      mac.toString('hex').toUpperCase(),
      mac.toString('base64'),
      mac.toString('base64url'),
      mac.toString('hex').slice(0, 32),
    ];
    for (const form of forms) {
      const error = await readJsonBody(
        jsonResponse({ code: '100413', message: `signature mismatch: got ${form}` }, 401),
        'access-token',
        [mac.toString('hex')],
      ).then(unexpected, caught);
      expect(error.message).toContain('code 100413: signature mismatch: got [redacted]');
      expect(error.message).not.toContain(form);
    }
  });
});

describe('Function: unwrapV3Envelope', () => {
  it('returns data on code 000000', () => {
    expect(
      unwrapV3Envelope({ code: '000000', message: 'success', data: { x: 1 } }, 'authorize', []),
    ).toEqual({ x: 1 });
  });

  it('rejects any other envelope code with the upstream code and message', () => {
    let error: UpstreamRejectedError | undefined;
    try {
      unwrapV3Envelope(
        { code: '100001', message: 'invalid clientId', data: null },
        'authorize',
        [],
      );
    } catch (e) {
      error = e as UpstreamRejectedError;
    }
    expect(error).toBeInstanceOf(UpstreamRejectedError);
    expect(error?.message).toBe(
      'Open API rejected the authorize request: code 100001: invalid clientId',
    );
    expect(error?.upstreamMessage).toBe('invalid clientId');
  });

  it.each([
    [100401, 'token invalid', 'code 100401: token invalid'],
    [0, 'failure', 'code 0: failure'],
    [-1, 'system busy', 'code -1: system busy'],
  ])('reads a numeric code %j as a rejection, never as success', (code, message, said) => {
    let error: UpstreamRejectedError | undefined;
    try {
      unwrapV3Envelope({ code, message, data: { accessToken: 'x' } }, 'access-token', []);
    } catch (e) {
      error = e as UpstreamRejectedError;
    }
    expect(error).toBeInstanceOf(UpstreamRejectedError);
    expect(error?.message).toBe(`Open API rejected the access-token request: ${said}`);
    expect(error?.upstreamCode).toBe(String(code));
  });

  it('takes only the string 000000 as success', () => {
    expect(() =>
      unwrapV3Envelope({ code: Number('000000'), message: 'success', data: {} }, 'authorize', []),
    ).toThrow(UpstreamRejectedError);
    expect(() =>
      unwrapV3Envelope({ code: '0', message: 'success', data: {} }, 'authorize', []),
    ).toThrow('code 0: success');
    expect(unwrapV3Envelope({ code: '000000', data: { y: 2 } }, 'authorize', [])).toEqual({
      y: 2,
    });
  });

  it.each([
    [{ code: null }],
    [{ code: true }],
    [{ code: Number.NaN }],
    ['text'],
  ])('refuses an envelope whose code is neither a string nor a number: %j', (body) => {
    expect(() => unwrapV3Envelope(body, 'access-token', [])).toThrow(UpstreamBadResponseError);
  });

  it('reports a body that is not an envelope by its fields', () => {
    expect(() => unwrapV3Envelope({ accessToken: 'x' }, 'access-token', [])).toThrow(
      /not a v3 envelope: expected a string or number "code" \(fields present: accessToken\)/,
    );
  });
});

describe('Function: tokenFromPayload', () => {
  it('reads accessToken, expiresIn and timestamp', () => {
    expect(
      tokenFromPayload(
        { accessToken: 'a', refreshToken: 'r', expiresIn: 86400, timestamp: 1700000000 },
        limits,
      ),
    ).toEqual({
      accessToken: 'a',
      expiresIn: 86400,
      upstreamTimestamp: 1700000000,
    });
  });

  it.each([
    [{ expiresIn: 10 }, 'no string "accessToken" (fields present: expiresIn)'],
    [{ accessToken: 'a' }, 'no positive whole "expiresIn" (got undefined)'],
    [{ accessToken: 'a', expiresIn: 0 }, 'no positive whole "expiresIn" (got 0)'],
    [{ accessToken: 'a', expiresIn: -5 }, 'no positive whole "expiresIn" (got -5)'],
    [{ accessToken: 'a', expiresIn: '86400' }, 'no positive whole "expiresIn" (got string)'],
    [{ accessToken: 'a', expiresIn: 1.5 }, 'no positive whole "expiresIn" (got 1.5)'],
    [{ accessToken: 'a', expiresIn: 40 * 86400 }, 'above the accepted maximum of 2592000s'],
  ])('rejects %j', (payload, message) => {
    expect(() => tokenFromPayload(payload, limits)).toThrow(message);
  });

  it('never throws anything but a BrokerError, and never echoes a string value, for any payload', () => {
    fc.assert(
      fc.property(fc.dictionary(fc.string(), fc.jsonValue()), (payload) => {
        try {
          tokenFromPayload(payload, limits);
        } catch (error) {
          expect(error).toBeInstanceOf(BrokerError);
          const token = payload.accessToken;
          if (typeof token === 'string' && token.length > 3)
            expect((error as Error).message).not.toContain(token);
        }
      }),
      { numRuns: 2000 },
    );
  });
});

describe('Class: OpenApiClient against the simulator', () => {
  const client = generateClient('flow');
  let simulator: Simulator;
  let v3: ConnectionConfig;
  let legacy: ConnectionConfig;
  const openApi = (timeoutMs = 5000) => new OpenApiClient({ timeoutMs, limits });
  const deadline = () => Deadline.in(systemClock, 10_000);

  beforeAll(async () => {
    simulator = await startSimulator({ clients: [client], expiresIn: 86400 });
    v3 = connection({ variant: 'v3', baseUrl: simulator.url });
    legacy = connection({ name: 'legacy', variant: 'legacy', baseUrl: simulator.url });
  });
  afterAll(() => simulator.close());

  it('counts expiry from when the token request leaves, after the fence, not from the authorize', async () => {
    let fenceDone = 0;
    const token = await issueWith(openApi(), v3, client, {
      deadline: deadline(),
      // The lease holder's fence waits out its countdown here.
      fence: async () => {
        await new Promise((resolve) => setTimeout(resolve, 300));
        fenceDone = Date.now();
      },
    });
    expect(fenceDone).toBeGreaterThan(0);
    expect(token.requestedAt).toBeGreaterThanOrEqual(fenceDone);
  });

  it('runs the v3 flow and never sends the client secret', async () => {
    const before = Date.now();
    const token = await issueWith(openApi(), v3, client, { deadline: deadline() });
    expect(simulator.isValid(token.accessToken)).toBe(true);
    expect(token.expiresIn).toBe(86400);
    expect(token.requestedAt).toBeGreaterThanOrEqual(before);
    const requests = simulator.requests().slice(-2);
    expect(requests.map((r) => `${r.method} ${r.path}`)).toEqual([
      'GET /open-api/v3/oauth/authorize',
      'POST /open-api/v3/oauth/access-token',
    ]);
    expect(requests[1]?.bodyKeys.toSorted()).toEqual(['clientId', 'code']);
    expect(requests.every((r) => r.headers.accept === 'application/json')).toBe(true);
    expect(requests[1]?.headers['content-type']).toBe('application/json');
  });

  // A redirect followed would carry the legacy POST's client secret (or a v3 POST's signature
  // and code) to wherever it points, and take that host's answer as the token.
  it.each([
    ['legacy', 'access-token'],
    ['v3', 'access-token'],
    ['legacy', 'authorize'],
  ] as const)('follows no redirect: a %s %s answered 307 elsewhere is refused, and nothing reaches the other host', async (variant, redirected) => {
    const elsewhere = `${simulator.url}/open-api/elsewhere`;
    const redirector = createServer((request, response) => {
      const isToken = request.url?.includes('/oauth/access-token');
      if ((redirected === 'access-token') === isToken) {
        response.writeHead(307, { location: elsewhere }).end();
        return;
      }
      // The step not redirected is the simulator's own answer.
      void fetch(`${simulator.url}${request.url}`).then(async (answer) => {
        response.writeHead(answer.status, { 'content-type': 'application/json' });
        response.end(await answer.text());
      });
    });
    await new Promise<void>((resolve) => redirector.listen(0, '127.0.0.1', resolve));
    const baseUrl = `http://127.0.0.1:${(redirector.address() as AddressInfo).port}`;
    const seenBefore = simulator.requests().length;
    try {
      const config = variant === 'v3' ? { ...v3, baseUrl } : { ...legacy, baseUrl };
      const error = await issueWith(openApi(), config, client, { deadline: deadline() }).then(
        unexpected,
        caught,
      );
      expect(error).toBeInstanceOf(UpstreamRejectedError);
      expect(error.message).toBe(
        `Open API rejected the ${redirected} request: HTTP 307 (a redirect, not followed: check the connection's baseUrl)`,
      );
      expect(error.message).not.toContain('elsewhere');
      const reached = simulator.requests().slice(seenBefore);
      expect(reached.filter((r) => r.path.includes('elsewhere'))).toEqual([]);
    } finally {
      await new Promise((resolve) => redirector.close(resolve));
    }
  });

  it('takes a 303 (or 302) to the access-token POST as processed: its outcome unknown, the redirect not followed', async () => {
    for (const status of [302, 303]) {
      const fetch = (async (request: Request) =>
        new URL(request.url).pathname.endsWith('/access-token')
          ? new Response(null, { status, headers: { location: `${simulator.url}/result` } })
          : globalThis.fetch(request)) as typeof globalThis.fetch;
      const upstream = new OpenApiClient({ timeoutMs: 5000, limits, fetch });
      const error = await issueWith(upstream, v3, client, { deadline: deadline() }).then(
        unexpected,
        caught,
      );
      expect(error).toBeInstanceOf(UpstreamBadResponseError);
      expect((error as UpstreamBadResponseError).outcomeUnknown).toBe(true);
      expect(error.message).toBe(
        `Open API access-token answered HTTP ${status} (a redirect, not followed: check the connection's baseUrl)`,
      );
    }
  });

  describe('unknown outcomes and the lease fence', () => {
    /**
     * A fetch that passes the authorize step through and treats the token request as told. The
     * authorize step is sent without the client's time limit (200 ms in some tests here): on a
     * loaded machine a real round trip to the simulator can take longer, and the test would fail
     * on the authorize step, not on the token request it is about.
     */
    const fetchWith = (tokenRequest: (signal: AbortSignal) => Promise<Response>) => {
      const posts: number[] = [];
      const fetch = (async (input: Request, init?: RequestInit) => {
        if (!input.url.includes('access-token')) return globalThis.fetch(input);
        posts.push(Date.now());
        return tokenRequest(init?.signal as AbortSignal);
      }) as typeof globalThis.fetch;
      return { fetch, posts };
    };
    const held = (signal: AbortSignal) =>
      new Promise<Response>((_, reject) => {
        signal.addEventListener('abort', () => reject(signal.reason), { once: true });
      });

    it('reports a token request that timed out as an unknown outcome, and never retries it', async () => {
      const { fetch, posts } = fetchWith(held);
      const upstream = new OpenApiClient({ timeoutMs: 200, limits, fetch });
      const error = await issueWith(upstream, v3, client, { deadline: deadline() }).then(
        unexpected,
        caught,
      );
      expect(error).toMatchObject({ code: 'UPSTREAM_UNAVAILABLE', outcomeUnknown: true });
      expect(error.message).toContain('access-token request timed out after 200 ms');
      expect(posts).toHaveLength(1);
    });

    it('retries a token request that provably never left (connection refused)', async () => {
      const refused = Object.assign(new TypeError('fetch failed'), {
        cause: { code: 'ECONNREFUSED' },
      });
      const { fetch, posts } = fetchWith(async () => {
        throw refused;
      });
      const upstream = new OpenApiClient({ timeoutMs: 200, limits, fetch });
      const error = await issueWith(upstream, v3, client, { deadline: deadline() }).then(
        unexpected,
        caught,
      );
      expect(error).toMatchObject({ code: 'UPSTREAM_UNAVAILABLE', outcomeUnknown: false });
      expect(posts.length).toBeGreaterThan(1);
    });

    it('reports a token request reset after sending as an unknown outcome', async () => {
      const reset = Object.assign(new TypeError('fetch failed'), { cause: { code: 'ECONNRESET' } });
      const { fetch, posts } = fetchWith(async () => {
        throw reset;
      });
      const upstream = new OpenApiClient({ timeoutMs: 200, limits, fetch });
      const error = await issueWith(upstream, v3, client, { deadline: deadline() }).then(
        unexpected,
        caught,
      );
      expect(error).toMatchObject({ outcomeUnknown: true });
      expect(posts).toHaveLength(1);
    });

    it('runs the fence before the token request, and sends nothing when it throws', async () => {
      const { fetch, posts } = fetchWith(async () => new Response('{}'));
      const upstream = new OpenApiClient({ timeoutMs: 1000, limits, fetch });
      const fenced = new Error('lease lost');
      const error = await issueWith(upstream, v3, client, {
        deadline: deadline(),
        fence: async () => {
          throw fenced;
        },
      }).then(unexpected, caught);
      expect(error).toBe(fenced);
      expect(posts).toHaveLength(0);
    });

    it('abandons a token request when the lease ends, as an unknown outcome', async () => {
      const { fetch, posts } = fetchWith(held);
      const upstream = new OpenApiClient({ timeoutMs: 5000, limits, fetch });
      const lease = new AbortController();
      const pending = issueWith(upstream, v3, client, {
        deadline: deadline(),
        signal: lease.signal,
        fence: async () => {
          setTimeout(() => lease.abort(new Error('lease ended')), 50);
        },
      });
      const error = await pending.then(unexpected, caught);
      expect(error).toMatchObject({ outcomeUnknown: true });
      expect(error.message).toContain('abandoned: the lease ended');
      expect(posts).toHaveLength(1);
    });

    it('stops at the lease’s reason when it ends before the token request', async () => {
      const { fetch, posts } = fetchWith(async () => new Response('{}'));
      const upstream = new OpenApiClient({ timeoutMs: 1000, limits, fetch });
      const lease = new AbortController();
      const bounds = { deadline: deadline(), signal: lease.signal };
      const code = await upstream.authorize(v3, client, bounds);
      const reason = new Error('lease taken over');
      lease.abort(reason);
      const error = await upstream.requestToken(v3, client, code, bounds).then(unexpected, caught);
      expect(error).toBe(reason);
      expect(posts).toHaveLength(0);
    });

    it('sends no access-token request before the fence resolves', async () => {
      const { fetch, posts } = fetchWith(async () =>
        jsonResponse({ code: '000000', data: { accessToken: 'at', expiresIn: 60 } }),
      );
      const upstream = new OpenApiClient({ timeoutMs: 1000, limits, fetch });
      let release: () => void = () => undefined;
      const gate = new Promise<void>((resolve) => {
        release = resolve;
      });
      let fenced = false;
      const pending = issueWith(upstream, v3, client, {
        deadline: deadline(),
        fence: async () => {
          fenced = true;
          await gate;
        },
      });
      await vi.waitFor(() => expect(fenced).toBe(true));
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(posts).toHaveLength(0);
      const releasedAt = Date.now();
      release();
      const token = await pending;
      expect(posts).toHaveLength(1);
      expect(token.requestedAt).toBeGreaterThanOrEqual(releasedAt);
    });

    it('fences once for the token request, and retries an unsent attempt under that fence, its expiry counted from the attempt that answered', async () => {
      const refused = Object.assign(new TypeError('fetch failed'), {
        cause: { code: 'ECONNREFUSED' },
      });
      const { fetch, posts } = fetchWith(async () => {
        if (posts.length === 1) throw refused;
        return jsonResponse({ code: '000000', data: { accessToken: 'at', expiresIn: 60 } });
      });
      const upstream = new OpenApiClient({ timeoutMs: 1000, limits, fetch });
      let fences = 0;
      const token = await issueWith(upstream, v3, client, {
        deadline: deadline(),
        fence: async () => {
          fences += 1;
        },
      });
      expect(fences).toBe(1);
      expect(posts).toHaveLength(2);
      expect(token.requestedAt).toBeGreaterThanOrEqual(posts[0] ?? Number.NaN);
      expect(token.requestedAt).toBeLessThanOrEqual(posts[1] ?? Number.NaN);
    });

    it('starts no retry of an unsent attempt once the lease has ended', async () => {
      const lease = new AbortController();
      const reason = new Error('the access-token request outlived its lease');
      const { fetch, posts } = fetchWith(async () => {
        // Refused (provably unsent); the lease's confirmed time runs out during the backoff.
        setTimeout(() => lease.abort(reason), 10);
        throw Object.assign(new TypeError('fetch failed'), { cause: { code: 'ECONNREFUSED' } });
      });
      const upstream = new OpenApiClient({
        timeoutMs: 1000,
        limits,
        fetch,
        // The full backoff ceiling (100 ms) every time: the lease ends well before the retry.
        resilience: new UpstreamResilience({ ...DEFAULT_RESILIENCE, random: () => 1 }),
      });
      const error = await issueWith(upstream, v3, client, {
        deadline: deadline(),
        signal: lease.signal,
      }).then(unexpected, caught);
      expect(error).toBe(reason);
      expect(posts).toHaveLength(1);
    });

    it('refuses a code it did not hand out, and sends nothing', async () => {
      const { fetch, posts } = fetchWith(async () => new Response('{}'));
      const upstream = new OpenApiClient({ timeoutMs: 1000, limits, fetch });
      const forged = { code: 'guessed' } as unknown as AuthorizationCode;
      const error = await upstream
        .requestToken(v3, client, forged, { deadline: deadline() })
        .then(unexpected, caught);
      expect(error).toMatchObject({ name: 'InternalError', code: 'INTERNAL_ERROR' });
      expect(error.message).not.toContain('guessed');
      expect(posts).toHaveLength(0);
    });
  });

  it('hands the authorization code over sealed: it prints, serialises and inspects as [authorization code]', async () => {
    const upstream = openApi();
    const before = simulator.handedOut().length;
    const code = await upstream.authorize(v3, client, { deadline: deadline() });
    const [value] = simulator.handedOut().slice(before);
    expect(value).toMatch(/.{8,}/);
    const shown = [
      String(code),
      `${code}`,
      JSON.stringify({ code }),
      inspect(code),
      inspect({ code }, { showHidden: true, depth: 5 }),
      new Error(`with ${code}`).message,
    ];
    for (const text of shown) {
      expect(text).toContain('[authorization code]');
      expect(text).not.toContain(value);
    }
    expect(Object.keys(code)).toEqual([]);
    const token = await upstream.requestToken(v3, client, code, { deadline: deadline() });
    expect(simulator.isValid(token.accessToken)).toBe(true);
  });

  it('runs the legacy flow with the client secret in the token request', async () => {
    const token = await issueWith(openApi(), legacy, client, { deadline: deadline() });
    expect(simulator.isValid(token.accessToken)).toBe(true);
    const requests = simulator.requests().slice(-2);
    expect(requests.map((r) => `${r.method} ${r.path}`)).toEqual([
      'GET /open-api/oauth/authorize',
      'POST /open-api/oauth/access-token',
    ]);
    expect(requests[1]?.bodyKeys.toSorted()).toEqual(['clientId', 'clientSecret', 'code']);
  });

  it('reads the v3 code from a configured field, and lists the fields when it is absent', async () => {
    simulator.settings.codeField = 'authCode';
    try {
      const error = await issueWith(openApi(), v3, client, { deadline: deadline() }).then(
        unexpected,
        caught,
      );
      expect(error).toBeInstanceOf(UpstreamBadResponseError);
      expect(error.message).toContain(
        'no authorization code in data.code (fields present: timestamp, eventType, orderId, authCode)',
      );
      // The provider's documented example has no code field: the message says where to look.
      expect(error.message).toContain(
        `the provider's documented v3 example has no code field while working clients read data.code: set the connection's "codeField" (default "code") to the field your provider sends`,
      );
      const token = await issueWith(openApi(), { ...v3, codeField: 'authCode' }, client, {
        deadline: deadline(),
      });
      expect(simulator.isValid(token.accessToken)).toBe(true);
    } finally {
      simulator.settings.codeField = 'code';
    }
  });

  it('reports a v3 rejection with the upstream code and message', async () => {
    const error = await issueWith(
      openApi(),
      v3,
      { clientId: 'unknown', clientSecret: 'x' },
      { deadline: deadline() },
    ).then(unexpected, caught);
    expect(error).toBeInstanceOf(UpstreamRejectedError);
    expect(error.message).toBe(
      'Open API rejected the authorize request: code 100001: invalid clientId',
    );
  });

  it('reports a legacy rejection of a wrong secret without echoing it', async () => {
    const wrong = { clientId: client.clientId, clientSecret: 'wrong-secret-value' };
    const error = await issueWith(openApi(), legacy, wrong, { deadline: deadline() }).then(
      unexpected,
      caught,
    );
    expect(error).toBeInstanceOf(UpstreamRejectedError);
    expect(error.message).toContain('HTTP 401, code invalid_client');
    expect(error.message).not.toContain('wrong-secret-value');
  });

  it('times out a hung upstream within its budget', async () => {
    simulator.injectFault({ times: 3, delayMs: 2000, pathIncludes: 'authorize' });
    const error = await issueWith(openApi(200), v3, client, { deadline: deadline() }).then(
      unexpected,
      caught,
    );
    expect(error).toBeInstanceOf(UpstreamUnavailableError);
    expect(error.message).toBe('Open API authorize request timed out after 200 ms');
  });

  it('never starts a request past the deadline', async () => {
    const error = await issueWith(openApi(), v3, client, {
      deadline: Deadline.in(systemClock, -1),
    }).then(unexpected, caught);
    expect(error).toBeInstanceOf(UpstreamUnavailableError);
  });

  it('reports a refused connection as unavailable', async () => {
    const closed = await startSimulator({ clients: [client] });
    await closed.close();
    const error = await issueWith(openApi(), { ...v3, baseUrl: closed.url }, client, {
      deadline: deadline(),
    }).then(unexpected, caught);
    expect(error).toBeInstanceOf(UpstreamUnavailableError);
    expect(error.message).toBe('Open API authorize request failed: ECONNREFUSED (connect)');
  });

  it('reports a 5xx from the token endpoint as an unknown outcome, never retried, and an envelope error as rejected', async () => {
    // A gateway's 503 or 504 may hide a request the upstream processed: it may have issued.
    simulator.injectFault({ times: 1, status: 504, pathIncludes: 'access-token' });
    const posts = simulator.requests().length;
    const unknown = await issueWith(openApi(), v3, client, { deadline: deadline() }).then(
      unexpected,
      caught,
    );
    expect(unknown).toMatchObject({ code: 'UPSTREAM_UNAVAILABLE', outcomeUnknown: true });
    expect(simulator.requests().length - posts).toBe(2); // one authorize, one POST, no retry
    const before = simulator.requests().length;
    simulator.injectFault({
      times: 1,
      status: 200,
      pathIncludes: 'access-token',
      body: '{"code":"200001","message":"rate limited","data":null}',
    });
    const error = await issueWith(openApi(), v3, client, { deadline: deadline() }).then(
      unexpected,
      caught,
    );
    expect(error).toBeInstanceOf(UpstreamRejectedError);
    expect(error.message).toBe(
      'Open API rejected the access-token request: code 200001: rate limited',
    );
    // A rejection is not retried: one authorize and one access-token request.
    expect(simulator.requests().length - before).toBe(2);
  });

  it('retries transient failures (reset, 5xx, 429) and succeeds', async () => {
    simulator.injectFault({ times: 1, reset: true, pathIncludes: 'v3/oauth/authorize' });
    simulator.injectFault({ times: 1, status: 429, pathIncludes: 'v3/oauth/access-token' });
    const before = simulator.stats().issuances;
    const token = await issueWith(openApi(), v3, client, { deadline: deadline() });
    expect(simulator.isValid(token.accessToken)).toBe(true);
    expect(simulator.stats().issuances - before).toBe(1);
  });

  it('opens the connection’s circuit after repeated transient failures, and then fails fast', async () => {
    const resilience = new UpstreamResilience({
      ...DEFAULT_RESILIENCE,
      maxAttempts: 1,
      circuitThreshold: 2,
    });
    const states: string[] = [];
    const breaking = new UpstreamResilience({
      ...DEFAULT_RESILIENCE,
      maxAttempts: 1,
      circuitThreshold: 2,
      onCircuitChange: (_c: string, s: string) => states.push(s),
    });
    const fragile = new OpenApiClient({ timeoutMs: 5000, limits, resilience: breaking });
    simulator.injectFault({ times: 2, status: 503, pathIncludes: 'v3/oauth/authorize' });
    for (let i = 0; i < 2; i += 1) {
      await expect(issueWith(fragile, v3, client, { deadline: deadline() })).rejects.toThrow(
        'HTTP 503',
      );
    }
    const before = simulator.requests().length;
    const error = await issueWith(fragile, v3, client, { deadline: deadline() }).then(
      unexpected,
      caught,
    );
    expect(error).toBeInstanceOf(UpstreamUnavailableError);
    expect(error.message).toContain('failed repeatedly');
    expect(simulator.requests().length).toBe(before);
    expect(states).toEqual(['open']);
    // Other connections are not affected.
    const other = new OpenApiClient({ timeoutMs: 5000, limits, resilience });
    await expect(issueWith(other, legacy, client, { deadline: deadline() })).resolves.toMatchObject(
      {
        expiresIn: 86400,
      },
    );
  });
});

describe('Class: RetryAfterBackoff', () => {
  const context = (error: unknown, attempt = 1) => ({
    attempt,
    result: { error },
    signal: new AbortController().signal,
  });

  it('waits with full jitter below an exponential ceiling', () => {
    const backoff = new RetryAfterBackoff(
      { baseDelayMs: 100, maxDelayMs: 2000, random: () => 0.5 },
      () => 10_000,
    );
    expect(backoff.next(context(new UpstreamUnavailableError('x'), 1)).duration).toBe(50);
    expect(backoff.next(context(new UpstreamUnavailableError('x'), 3)).duration).toBe(200);
    expect(backoff.next(context(new UpstreamUnavailableError('x'), 10)).duration).toBe(1000);
  });

  it('waits at least as long as the upstream’s Retry-After, but never past the budget', () => {
    const error = new UpstreamUnavailableError('429', {
      retryAfterSeconds: 2,
      upstreamRetryAfterSeconds: 2,
    });
    const generous = new RetryAfterBackoff(
      { baseDelayMs: 100, maxDelayMs: 2000, random: () => 0 },
      () => 10_000,
    );
    expect(generous.next(context(error)).duration).toBe(2000);
    const tight = new RetryAfterBackoff(
      { baseDelayMs: 100, maxDelayMs: 2000, random: () => 0 },
      () => 700,
    );
    expect(tight.next(context(error)).duration).toBe(700);
  });
});

describe('Strict Access Token Mode against the simulator', () => {
  const plain = generateClient('strict-default');
  const schemes = {
    '{timestamp}{params}': {
      ...generateClient('strict-ts'),
      signing: { stringToSign: '{timestamp}{params}' },
    },
    '{params}&timestamp={timestamp}': {
      ...generateClient('strict-suffix'),
      signing: { stringToSign: '{params}&timestamp={timestamp}' },
    },
    '{body} base64': {
      ...generateClient('strict-body'),
      signing: { stringToSign: '{body}', encoding: 'base64' as const },
    },
  };
  const relaxed = { ...generateClient('not-strict'), signing: false as const };
  let simulator: Simulator;
  let v3: ConnectionConfig;
  /** Every access-token request the broker sent: its signing headers, for the leak checks. */
  const sent: { timestamp: string | null; signature: string | null }[] = [];
  const recordingFetch: typeof fetch = async (input, init) => {
    const request = input as Request;
    if (request.url.endsWith('/access-token')) {
      sent.push({
        timestamp: request.headers.get('x-timestamp'),
        signature: request.headers.get('x-signature'),
      });
    }
    return fetch(input, init);
  };
  /** Messages of every error below, checked at the end for anything secret. */
  const messages: string[] = [];
  const rejection = async (promise: Promise<unknown>) => {
    const error = await promise.then(unexpected, caught);
    messages.push(error.message);
    return error;
  };
  const openApi = (now?: () => number) =>
    new OpenApiClient({
      timeoutMs: 5000,
      limits,
      fetch: recordingFetch,
      ...(now ? { clock: { now } } : {}),
    });
  const deadline = () => Deadline.in(systemClock, 10_000);

  beforeAll(async () => {
    simulator = await startSimulator({
      clients: [plain, relaxed, ...Object.values(schemes)],
      expiresIn: 3600,
    });
    v3 = connection({ variant: 'v3', baseUrl: simulator.url });
  });
  afterAll(() => simulator.close());

  it('signs the access-token POST by default ({params}, hex) and leaves the authorize GET unsigned', async () => {
    const before = Date.now();
    const token = await issueWith(openApi(), v3, plain, { deadline: deadline() });
    expect(simulator.isValid(token.accessToken)).toBe(true);
    const [authorize, post] = simulator.requests().slice(-2);
    expect(authorize?.method).toBe('GET');
    expect(authorize?.headers['x-timestamp']).toBeUndefined();
    expect(authorize?.headers['x-signature']).toBeUndefined();
    expect(post?.method).toBe('POST');
    expect(post?.headers['x-signature']).toBe('[present]');
    const timestamp = Number(post?.headers['x-timestamp']);
    expect(timestamp).toBeGreaterThanOrEqual(Math.floor(before / 1000));
    expect(timestamp).toBeLessThanOrEqual(Math.ceil(Date.now() / 1000));
    expect(sent.at(-1)?.signature).toMatch(/^[0-9a-f]{64}$/);
    // The secret is still never sent.
    expect(post?.bodyKeys.toSorted()).toEqual(['clientId', 'code']);
  });

  it.each(Object.entries(schemes))('issues with the scheme %s', async (_name, client) => {
    const signing: SigningConfig = { encoding: 'hex', ...client.signing };
    const token = await issueWith(openApi(), { ...v3, signing }, client, { deadline: deadline() });
    expect(simulator.isValid(token.accessToken)).toBe(true);
    if (signing.encoding === 'base64')
      expect(sent.at(-1)?.signature).toMatch(/^[A-Za-z0-9+/]{43}=$/);
  });

  it('sends no signing headers with signing off, nor on the legacy variant', async () => {
    const unsigned = await issueWith(openApi(), { ...v3, signing: false }, relaxed, {
      deadline: deadline(),
    });
    expect(simulator.isValid(unsigned.accessToken)).toBe(true);
    expect(sent.at(-1)).toEqual({ timestamp: null, signature: null });
    const legacy = connection({ name: 'legacy', variant: 'legacy', baseUrl: simulator.url });
    await issueWith(openApi(), legacy, plain, { deadline: deadline() });
    expect(sent.at(-1)).toEqual({ timestamp: null, signature: null });
  });

  it('signs a retried attempt afresh, with that attempt’s timestamp', async () => {
    let offsetMs = 0;
    const now = () => Date.now() + offsetMs;
    // A 429: refused unprocessed, so retried (a 5xx would be an unknown outcome, never retried).
    simulator.injectFault({ times: 1, status: 429, pathIncludes: 'v3/oauth/access-token' });
    const client = new OpenApiClient({
      timeoutMs: 5000,
      limits,
      clock: { now },
      fetch: async (input, init) => {
        const response = await recordingFetch(input, init);
        // The next attempt happens two seconds later on this clock.
        if ((input as Request).url.endsWith('/access-token')) offsetMs += 2000;
        return response;
      },
    });
    const before = sent.length;
    // A scheme that signs the timestamp: the simulator accepts only a signature over the
    // timestamp actually sent, so the token proves the second attempt was signed anew.
    const stamped = schemes['{timestamp}{params}'];
    const token = await issueWith(
      client,
      { ...v3, signing: { stringToSign: '{timestamp}{params}', encoding: 'hex' } },
      stamped,
      { deadline: deadline() },
    );
    expect(simulator.isValid(token.accessToken)).toBe(true);
    const [first, second] = sent.slice(before);
    expect(sent.length - before).toBe(2);
    expect(Number(second?.timestamp) - Number(first?.timestamp)).toBeGreaterThanOrEqual(2);
    expect(second?.signature).not.toBe(first?.signature);
  });

  it('reports a wrong secret as a strict-mode rejection naming the signing settings', async () => {
    const wrong = { clientId: plain.clientId, clientSecret: 'wrong-secret-value-0123' };
    const error = await rejection(issueWith(openApi(), v3, wrong, { deadline: deadline() }));
    expect(error).toBeInstanceOf(UpstreamRejectedError);
    expect(error.code).toBe('UPSTREAM_REJECTED');
    expect(error.upstreamCode).toBe('100413');
    expect(error.message).toBe(
      'Open API rejected the signed access-token request (Strict Access Token Mode): code 100413: signature verification failed. Connection \'sandbox\' signs with stringToSign "{params}", encoding "hex" (connection field "signing"): confirm the string-to-sign and encoding with the provider, check that the client secret is current, and that this clock is within 5 minutes of theirs',
    );
    expect(error.message).not.toContain(wrong.clientSecret);
  });

  it('reports a template the provider does not use the same way, naming it', async () => {
    const client = schemes['{timestamp}{params}'];
    const error = await rejection(
      issueWith(
        openApi(),
        { ...v3, signing: { stringToSign: '{params}{timestamp}', encoding: 'hex' } },
        client,
        {
          deadline: deadline(),
        },
      ),
    );
    expect(error).toBeInstanceOf(UpstreamRejectedError);
    expect(error.message).toContain('(Strict Access Token Mode): code 100413');
    expect(error.message).toContain(
      'signs with stringToSign "{params}{timestamp}", encoding "hex"',
    );
    // The right template with the wrong encoding is refused too.
    const encoding = await rejection(
      issueWith(
        openApi(),
        { ...v3, signing: { stringToSign: '{timestamp}{params}', encoding: 'base64' } },
        client,
        {
          deadline: deadline(),
        },
      ),
    );
    expect(encoding.message).toContain('encoding "base64"');
    expect(encoding.upstreamCode).toBe('100413');
  });

  it('reports a clock more than 5 minutes off, and accepts one within', async () => {
    const skewed = (ms: number) => () => Date.now() + ms;
    const ahead = await rejection(
      issueWith(openApi(skewed(301_000)), v3, plain, { deadline: deadline() }),
    );
    expect(ahead).toBeInstanceOf(UpstreamRejectedError);
    expect(ahead.upstreamCode).toBe('100412');
    expect(ahead.message).toContain('code 100412: timestamp expired or invalid');
    expect(ahead.message).toContain('this clock is within 5 minutes of theirs');
    const behind = await rejection(
      issueWith(openApi(skewed(-400_000)), v3, plain, { deadline: deadline() }),
    );
    expect(behind.upstreamCode).toBe('100412');
    const near = await issueWith(openApi(skewed(-240_000)), v3, plain, {
      deadline: deadline(),
    });
    expect(simulator.isValid(near.accessToken)).toBe(true);
  });

  it('says signing is off when the provider wants a signature the connection does not send', async () => {
    const error = await rejection(
      issueWith(openApi(), { ...v3, signing: false }, plain, { deadline: deadline() }),
    );
    expect(error.upstreamCode).toBe('100411');
    expect(error.message).toContain(
      'Open API rejected the access-token request (Strict Access Token Mode): code 100411: signature required',
    );
    expect(error.message).toContain('has signing turned off ("signing": false)');
  });

  it('treats an HTTP 401 or 403 to the signed request as a strict-mode rejection', async () => {
    for (const status of [401, 403]) {
      simulator.injectFault({
        times: 1,
        status,
        pathIncludes: 'v3/oauth/access-token',
        body: JSON.stringify({ code: 100401, message: 'unauthorized' }),
      });
      const error = await rejection(issueWith(openApi(), v3, plain, { deadline: deadline() }));
      expect(error).toBeInstanceOf(UpstreamRejectedError);
      expect(error.message).toContain(
        `(Strict Access Token Mode): HTTP ${status}, code 100401: unauthorized. Connection 'sandbox' signs with`,
      );
    }
  });

  it('leaves other rejections of the token request as they were', async () => {
    simulator.injectFault({
      times: 1,
      status: 200,
      pathIncludes: 'v3/oauth/access-token',
      body: '{"code":200001,"message":"rate limited","data":null}',
    });
    const error = await rejection(issueWith(openApi(), v3, plain, { deadline: deadline() }));
    expect(error.message).toBe(
      'Open API rejected the access-token request: code 200001: rate limited',
    );
    expect(error.upstreamCode).toBe('200001');
  });

  it('redacts a signature the upstream echoes back in its error message', async () => {
    let echoed = '';
    const echoing = new OpenApiClient({
      timeoutMs: 5000,
      limits,
      fetch: async (input, init) => {
        const request = input as Request;
        if (!request.url.endsWith('/access-token')) return fetch(input, init);
        echoed = request.headers.get('x-signature') ?? '';
        return jsonResponse({ code: 100413, message: `signature ${echoed} does not match` });
      },
    });
    const error = await rejection(issueWith(echoing, v3, plain, { deadline: deadline() }));
    expect(echoed).toMatch(/^[0-9a-f]{64}$/);
    expect(error.message).toContain('code 100413: signature [redacted] does not match');
    expect(error.message).not.toContain(echoed);
    expect(error.upstreamMessage).not.toContain(echoed);
  });

  it('puts no signature, string-to-sign or secret in any error message', () => {
    const values = [
      ...simulator.handedOut(),
      ...sent.flatMap((s) => (s.signature ? [s.signature] : [])),
    ];
    // The simulator recorded what it verified: signatures and the strings it signed.
    expect(values.filter((v) => /^[0-9a-f]{64}$/.test(v)).length).toBeGreaterThan(5);
    expect(values.filter((v) => v.includes('clientId=')).length).toBeGreaterThan(3);
    expect(values.filter((v) => v.startsWith('{"clientId"')).length).toBeGreaterThan(0);
    expect(messages.length).toBeGreaterThan(8);
    expect(values.filter((v) => messages.some((m) => m.includes(v)))).toEqual([]);
  });
});

describe('Function: readJsonBody, hostile bodies', () => {
  it('stops reading a chunked body past the limit, whatever it did not declare', async () => {
    let sent = 0;
    const chunk = new TextEncoder().encode('x'.repeat(16 * 1024));
    const body = new ReadableStream<Uint8Array>({
      pull(controller) {
        sent += chunk.byteLength;
        if (sent > 5 * 1024 * 1024) controller.close();
        else controller.enqueue(chunk);
      },
    });
    const error = await readJsonBody(new Response(body, { status: 200 }), 'access-token').then(
      unexpected,
      caught,
    );
    expect(error).toBeInstanceOf(UpstreamBadResponseError);
    expect(error.message).toContain('response is too large (over 65536 bytes)');
    expect(sent).toBeLessThan(256 * 1024);
  });
});
