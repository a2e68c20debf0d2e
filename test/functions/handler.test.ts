/**
 * The whole Lambda handler, wired to AWS SDK clients that reach dynalite and the loopback
 * Secrets Manager through AWS_ENDPOINT_URL_*, and to the simulator over real HTTP. Every line
 * the broker logs is captured (not printed); the leak test runs its own requests and searches
 * what they logged for every credential the stack handed out.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import {
  httpEvent,
  httpResponse,
  type LambdaHandler,
  scheduledEvent,
} from '../../local/lambda-events.js';
import { invokeHandler } from '../../local/lambda-invoke.js';
import { OPERATOR, ORDERS_ROLE } from '../support/callers.js';
import { newContainer, newContainerWithout } from '../support/lambda.js';
import { useLocalStack } from '../support/local-stack.js';

const OPERATORS = 'arn:aws:sts::123456789012:assumed-role/platform-*/*';

// Tokens are encrypted by the application (loopback KMS): every flow below goes through it.
const local = useLocalStack({
  start: [{}, ['sandbox', 'legacy'], { encrypt: true }],
  connections: (url) => ({
    sandbox: { variant: 'v3', baseUrl: url, secretId: 'open-api/v3' },
    legacy: { variant: 'legacy', baseUrl: url, secretId: 'open-api/legacy' },
    restricted: {
      variant: 'v3',
      baseUrl: url,
      secretId: 'open-api/v3',
      callers: ['arn:aws:sts::123456789012:assumed-role/orders-*/*'],
    },
    broken: { variant: 'legacy', baseUrl: url, secretId: 'open-api/missing' },
  }),
  env: {
    // As loud as an operator could make it: still nothing secret may come out.
    POWERTOOLS_LOG_LEVEL: 'DEBUG',
    POWERTOOLS_LOGGER_LOG_EVENT: 'true',
    BROKER_UPSTREAM_TIMEOUT_MS: '1000',
    // A connection restricts its callers: the operator routes are for these only (issue 37).
    BROKER_OPERATOR_CALLERS: OPERATORS,
  },
});

const http = async (
  handler: LambdaHandler,
  method: string,
  url: string,
  options: { body?: string; callerArn?: string; headers?: Record<string, string> } = {},
) => {
  const response = httpResponse(
    await invokeHandler(handler, httpEvent({ method, url, ...options })),
  );
  return { ...response, json: response.body ? JSON.parse(response.body) : undefined };
};

/** A new container for which the connection has no cached token anywhere (memory or table). */
const containerWithEmptyCache = async (connection: string): Promise<LambdaHandler> => {
  const handler = newContainer();
  const { accessToken } = (await http(handler, 'GET', `/tokens/${connection}`)).json;
  await http(handler, 'POST', `/tokens/${connection}/invalidate`, {
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ accessToken }),
  });
  return handler;
};

describe('Handler: HTTP callers (payload format 2.0)', () => {
  let handler: LambdaHandler;
  beforeAll(() => {
    handler = newContainer();
  });

  it('GET /tokens/{connection} returns the token with its reuse time as private max-age and its stale-if-error, for both variants', async () => {
    for (const connection of ['sandbox', 'legacy']) {
      const before = Date.now();
      const response = await http(handler, 'GET', `/tokens/${connection}`);
      expect(response.status).toBe(200);
      expect(Object.keys(response.json).sort()).toEqual([
        'accessToken',
        'connection',
        'expiresAt',
        'expiresIn',
        'maxAgeMs',
        'staleIfErrorSeconds',
      ]);
      // Just issued: reusable for the re-check (5 s by default) less the margin, never longer.
      expect(response.json.maxAgeMs).toBeGreaterThan(0);
      expect(response.json.maxAgeMs).toBeLessThanOrEqual(5_000 - 100);
      expect(response.headers).toMatchObject({
        'content-type': 'application/json',
        'cache-control': `private, max-age=${Math.floor(response.json.maxAgeMs / 1000)}, stale-if-error=${response.json.staleIfErrorSeconds}`,
      });
      // Usable while the broker cannot be reached up to its expiry (a day) less a minute.
      expect(response.json.staleIfErrorSeconds).toBeGreaterThan(86_400 - 60 - 10);
      expect(response.json.staleIfErrorSeconds).toBeLessThanOrEqual(86_400 - 60);
      expect(response.json.connection).toBe(connection);
      expect(local.stack.simulator.isValid(response.json.accessToken)).toBe(true);
      expect(response.json.expiresAt).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
      const expiresAt = Date.parse(response.json.expiresAt);
      expect(expiresAt).toBeGreaterThanOrEqual(before + 86_400_000);
      expect(response.json.expiresIn).toBeGreaterThan(86_390);
      expect(response.json.expiresIn).toBeLessThanOrEqual(86_400);
      expect(response.body).not.toContain('refreshToken');
    }
  });

  it('marks every answer but a token as not to be stored: errors, status, health', async () => {
    for (const [method, path] of [
      ['GET', '/tokens/nope'],
      ['GET', '/tokens/sandbox?minValidity=x'],
      ['GET', '/status'],
      ['GET', '/health'],
      ['GET', '/nowhere'],
    ] as const) {
      const response = await http(handler, method, path, { callerArn: OPERATOR });
      expect(response.headers['cache-control'], `${method} ${path}`).toBe('no-store');
    }
  });

  it('serves repeat calls without reaching the upstream, and a new container from DynamoDB', async () => {
    const issued = local.stack.simulator.stats().issuances;
    const first = await http(handler, 'GET', '/tokens/sandbox');
    const second = await http(handler, 'GET', '/tokens/sandbox');
    const otherContainer = await http(newContainer(), 'GET', '/tokens/sandbox');
    expect(second.json.accessToken).toBe(first.json.accessToken);
    expect(otherContainer.json.accessToken).toBe(first.json.accessToken);
    expect(local.stack.simulator.stats().issuances).toBe(issued);
  });

  it('honours ?minValidity and rejects malformed values', async () => {
    expect((await http(handler, 'GET', '/tokens/sandbox?minValidity=3600')).status).toBe(200);
    for (const value of ['abc', '-1', '1.5', '', '1e3']) {
      const response = await http(handler, 'GET', `/tokens/sandbox?minValidity=${value}`);
      expect(response.status).toBe(400);
      expect(response.json.error.code).toBe('BAD_REQUEST');
    }
    const tooLong = await http(handler, 'GET', '/tokens/sandbox?minValidity=90000');
    expect(tooLong.status).toBe(400);
    expect(tooLong.json.error).toEqual({
      code: 'MIN_VALIDITY_UNSATISFIABLE',
      message:
        'The Open API issues tokens valid for 86400s, which cannot satisfy a validity of 90000s',
    });
  });

  it('refuses unknown query parameters and body fields as direct invoke does, naming the field', async () => {
    const typo = await http(handler, 'GET', '/tokens/sandbox?minvalidity=5');
    expect(typo.status).toBe(400);
    expect(typo.json.error).toEqual({
      code: 'BAD_REQUEST',
      message: 'Invalid request: unknown query parameter "minvalidity"',
    });
    for (const url of ['/health?verbose=1', '/status?all=1']) {
      const response = await http(handler, 'GET', url);
      expect(response.status).toBe(400);
      expect(response.json.error.message).toContain('unknown query parameter');
    }
    const extra = await http(handler, 'POST', '/tokens/sandbox/invalidate', {
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ accessToken: 'at_x', reason: '401' }),
    });
    expect(extra.status).toBe(400);
    expect(extra.json.error.message).toBe('Invalid request: unknown body field "reason"');
    // The same typo by direct invoke: the same refusal, naming the same field.
    const invoked = await invokeHandler(handler, {
      action: 'getToken',
      connection: 'sandbox',
      minvalidity: 5,
    });
    expect(invoked).toMatchObject({
      ok: false,
      errorType: 'BadRequestError',
      errorMessage: 'Invalid direct invoke: unknown field "minvalidity"',
    });
  });

  it('refuses a body on the routes that take none, naming the field, as direct invoke does', async () => {
    const json = { 'content-type': 'application/json' };
    const warm = await http(handler, 'POST', '/warm', { headers: json, body: '{"foo":1}' });
    expect(warm.status).toBe(400);
    expect(warm.json.error).toEqual({
      code: 'BAD_REQUEST',
      message: 'Invalid request: unknown body field "foo"',
    });
    const invoked = await invokeHandler(handler, { action: 'warmUp', foo: 1 });
    expect(invoked).toMatchObject({
      ok: false,
      errorType: 'BadRequestError',
      errorMessage: 'Invalid direct invoke: unknown field "foo"',
    });
    for (const url of ['/tokens/sandbox', '/status', '/health']) {
      const response = await http(handler, 'GET', url, {
        headers: json,
        body: '{"minValidity":5}',
      });
      expect(response.status).toBe(400);
      expect(response.json.error.message).toBe('Invalid request: unknown body field "minValidity"');
    }
    for (const body of ['[1]', '"x"', 'foo=1', '{']) {
      const response = await http(handler, 'GET', '/tokens/sandbox', { body });
      expect(response.status).toBe(400);
      expect(response.json.error).toEqual({
        code: 'BAD_REQUEST',
        message: 'Invalid request: this route takes no body',
      });
    }
    // No body, an empty one, or an empty object: nothing to refuse.
    for (const body of [undefined, '', ' \n', '{}']) {
      const response = await http(handler, 'GET', '/tokens/sandbox', {
        headers: json,
        ...(body === undefined ? {} : { body }),
      });
      expect(response.status).toBe(200);
    }
  });

  it('answers 404 for unknown connections and routes, with the error JSON', async () => {
    const unknown = await http(handler, 'GET', '/tokens/production');
    expect(unknown.status).toBe(404);
    expect(unknown.json).toEqual({
      error: {
        code: 'UNKNOWN_CONNECTION',
        message: "Unknown connection 'production'; this caller may use: sandbox, legacy, broken",
      },
    });
    for (const [method, url] of [
      ['GET', '/nope'],
      ['DELETE', '/tokens/sandbox'],
      ['GET', '/tokens/sandbox/extra'],
      ['GET', '/tokens/%2E%2E%2Fhealth'],
    ] as const) {
      const response = await http(handler, method, url);
      expect(response.status).toBe(404);
      expect(['ROUTE_NOT_FOUND', 'UNKNOWN_CONNECTION']).toContain(response.json.error.code);
    }
  });

  // Issue 38: the message named no connection, and a name with a slash came back URL-encoded.
  it('names the connections this caller may use when it names an unknown one, and the name as given', async () => {
    // Those whose `callers` admit it: `restricted` only for the orders role.
    const orders = await http(handler, 'GET', '/tokens/sandbx', { callerArn: ORDERS_ROLE });
    expect(orders.json.error.message).toBe(
      "Unknown connection 'sandbx'; this caller may use: sandbox, legacy, restricted, broken",
    );
    const other = await http(handler, 'GET', '/tokens/sandbx', {
      callerArn: 'arn:aws:sts::123456789012:assumed-role/billing/i-0def',
    });
    expect(other.json.error.message).not.toContain('restricted');
    // The client sends a name's '/' as %2F: it is repeated as given, decoded.
    const slashed = await http(handler, 'POST', '/tokens/demo%2Fv3/invalidate', {
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ accessToken: 'at_x' }),
    });
    expect(slashed.status).toBe(404);
    expect(slashed.json.error.message).toMatch(/^Unknown connection 'demo\/v3';/);
    // Direct invoke is not bound by `callers`: every name.
    const invoked = await invokeHandler(handler, { action: 'getToken', connection: 'sandbx' });
    expect(invoked).toMatchObject({
      ok: false,
      errorType: 'UnknownConnectionError',
      errorMessage:
        "Unknown connection 'sandbx'; this caller may use: sandbox, legacy, restricted, broken",
    });
  });

  it('enforces the callers allowlist on the IAM principal', async () => {
    const allowed = await http(handler, 'GET', '/tokens/restricted', { callerArn: ORDERS_ROLE });
    expect(allowed.status).toBe(200);
    const denied = await http(handler, 'GET', '/tokens/restricted', {
      callerArn: 'arn:aws:sts::123456789012:assumed-role/billing/i-0abc',
    });
    expect(denied.status).toBe(403);
    expect(denied.json.error.code).toBe('CALLER_NOT_ALLOWED');
    const invalidate = await http(handler, 'POST', '/tokens/restricted/invalidate', {
      callerArn: 'arn:aws:iam::123456789012:user/someone',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ accessToken: allowed.json.accessToken }),
    });
    expect(invalidate.status).toBe(403);
  });

  it('keeps the operator routes (/status, /ready, /warm) to BROKER_OPERATOR_CALLERS over HTTP, when set', async () => {
    const operated = handler;
    const routes = [
      ['GET', '/status'],
      ['GET', '/ready'],
      ['POST', '/warm'],
    ] as const;
    for (const [method, url] of routes) {
      for (const callerArn of [ORDERS_ROLE, undefined]) {
        const denied = await http(operated, method, url, callerArn ? { callerArn } : {});
        expect({ url, status: denied.status, code: denied.json.error?.code }).toEqual({
          url,
          status: 403,
          code: 'CALLER_NOT_ALLOWED',
        });
      }
      const allowed = await http(operated, method, url, { callerArn: OPERATOR });
      expect([200, 503], url).toContain(allowed.status);
      expect(allowed.json.error, url).toBeUndefined();
    }
    // A service's own routes are its connections' callers' to decide, as before.
    expect(
      (await http(operated, 'GET', '/tokens/sandbox', { callerArn: ORDERS_ROLE })).status,
    ).toBe(200);
  });

  // Issue 37, secure by default: a connection that sets `callers` makes the operator routes,
  // and /health's list of connections, BROKER_OPERATOR_CALLERS' only; unset, nobody's.
  it('refuses the operator routes to everyone when a connection restricts its callers and BROKER_OPERATOR_CALLERS is unset, and /health lists only what the caller may use', async () => {
    const unset = newContainerWithout('BROKER_OPERATOR_CALLERS');
    for (const [method, url] of [
      ['GET', '/status'],
      ['GET', '/ready'],
      ['POST', '/warm'],
    ] as const) {
      for (const callerArn of [OPERATOR, ORDERS_ROLE, undefined]) {
        const denied = await http(unset, method, url, callerArn ? { callerArn } : {});
        expect({ url, status: denied.status, code: denied.json.error?.code }).toEqual({
          url,
          status: 403,
          code: 'CALLER_NOT_ALLOWED',
        });
        expect(denied.json.error.message).toContain('BROKER_OPERATOR_CALLERS');
        expect(denied.json.error.message).toContain('operatorCallers');
      }
    }
    const billing = 'arn:aws:sts::123456789012:assumed-role/billing/i-0abc';
    const names = async (h: LambdaHandler, callerArn?: string) =>
      (await http(h, 'GET', '/health', callerArn ? { callerArn } : {})).json.connections;
    // A caller `restricted` refuses does not learn its name; the orders role may use it.
    expect(await names(unset, billing)).toEqual(['sandbox', 'legacy', 'broken']);
    expect(await names(unset, ORDERS_ROLE)).toEqual(['sandbox', 'legacy', 'restricted', 'broken']);
    expect(await names(unset)).toEqual(['sandbox', 'legacy', 'broken']);
    // With BROKER_OPERATOR_CALLERS set, an operator sees every connection.
    expect(await names(handler, OPERATOR)).toEqual(['sandbox', 'legacy', 'restricted', 'broken']);
    expect(await names(handler, billing)).toEqual(['sandbox', 'legacy', 'broken']);
  });

  it('POST /tokens/{connection}/invalidate drops only the reported current token', async () => {
    const current = await http(handler, 'GET', '/tokens/legacy');
    const issued = local.stack.simulator.stats().issuances;
    const post = (accessToken: string) =>
      http(handler, 'POST', '/tokens/legacy/invalidate', {
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ accessToken }),
      });
    const stale = await post('at_some_older_token');
    expect(stale).toMatchObject({ status: 200, json: { invalidated: false } });
    const dropped = await post(current.json.accessToken);
    expect(dropped).toMatchObject({ status: 200, json: { invalidated: true } });
    const next = await http(handler, 'GET', '/tokens/legacy');
    expect(next.json.accessToken).not.toBe(current.json.accessToken);
    expect(local.stack.simulator.isValid(next.json.accessToken)).toBe(true);
    expect(local.stack.simulator.stats().issuances).toBe(issued + 1);
    expect((await post(current.json.accessToken)).json).toEqual({ invalidated: false });
  });

  it.each([
    ['bad JSON', 'application/json', '{"accessToken":'],
    ['no accessToken', 'application/json', '{"token":"x"}'],
    ['empty accessToken', 'application/json', '{"accessToken":""}'],
    ['a JSON array', 'application/json', '[1,2]'],
    ['a text body', 'text/plain', 'accessToken=x'],
    [
      'a token over 8192 characters',
      'application/json',
      JSON.stringify({ accessToken: 'x'.repeat(9000) }),
    ],
    ['a body over 16 KiB', 'application/json', JSON.stringify({ accessToken: 'x'.repeat(17_000) })],
    ['a __proto__ key', 'application/json', '{"__proto__":{"x":1},"accessToken":"y"}'],
  ])('invalidate answers 400 for %s', async (_label, contentType, body) => {
    const response = await http(handler, 'POST', '/tokens/sandbox/invalidate', {
      headers: { 'content-type': contentType },
      body,
    });
    expect(response.status).toBe(400);
    expect(response.json.error.code).toBe('BAD_REQUEST');
  });

  // Review 5: the contract takes a token of up to 8192 characters on both doors; its JSON body
  // is 17 bytes more, which the body limit refused over HTTP while direct invoke answered it.
  it('invalidate takes over HTTP a report of the longest token the contract allows', async () => {
    const accessToken = 'x'.repeat(8192);
    const body = JSON.stringify({ accessToken });
    const response = await http(handler, 'POST', '/tokens/sandbox/invalidate', {
      headers: { 'content-type': 'application/json' },
      body,
    });
    expect(response).toMatchObject({ status: 200, json: { invalidated: false } });
    const invoked = await invokeHandler(handler, {
      action: 'invalidate',
      connection: 'sandbox',
      accessToken,
    });
    expect(invoked).toMatchObject({ ok: true, result: { invalidated: false } });
  });

  it('GET /health answers without touching the upstream', async () => {
    const before = local.stack.simulator.requests().length;
    const response = await http(handler, 'GET', '/health', { callerArn: OPERATOR });
    expect(response).toMatchObject({
      status: 200,
      json: { status: 'ok', connections: ['sandbox', 'legacy', 'restricted', 'broken'] },
    });
    expect(local.stack.simulator.requests().length).toBe(before);
  });

  it('answers 502 with the upstream code and message when the upstream rejects the flow', async () => {
    const fresh = await containerWithEmptyCache('sandbox');
    local.stack.simulator.injectFault({
      times: 1,
      status: 200,
      pathIncludes: 'v3/oauth/authorize',
      body: '{"code":"100009","message":"account suspended","data":null}',
    });
    const response = await http(fresh, 'GET', '/tokens/sandbox');
    expect(response.status).toBe(502);
    expect(response.json.error).toEqual({
      code: 'UPSTREAM_REJECTED',
      message: 'Open API rejected the authorize request: code 100009: account suspended',
    });
  });

  it('answers 503 with Retry-After when the upstream is down and nothing is cached', async () => {
    const fresh = await containerWithEmptyCache('sandbox');
    local.stack.simulator.injectFault({
      times: 1,
      status: 503,
      pathIncludes: 'v3/oauth/authorize',
      headers: { 'retry-after': '30' },
    });
    const response = await http(fresh, 'GET', '/tokens/sandbox');
    expect(response.status).toBe(503);
    expect(response.headers['retry-after']).toBe('30');
    expect(response.json.error.code).toBe('UPSTREAM_UNAVAILABLE');
  });

  it('answers a hung upstream with 503 before the Lambda deadline', async () => {
    const fresh = await containerWithEmptyCache('sandbox');
    local.stack.simulator.injectFault({
      times: 3,
      delayMs: 5000,
      pathIncludes: 'v3/oauth/authorize',
    });
    const outcome = await invokeHandler(
      fresh,
      httpEvent({ method: 'GET', url: '/tokens/sandbox' }),
      {
        functionName: 'token-broker',
        region: 'us-east-1',
        accountId: '000000000000',
        timeoutMs: 3000,
      },
    );
    expect(outcome.ok).toBe(true);
    expect(httpResponse(outcome).status).toBe(503);
  });

  it('answers 500 without internals when a secret is missing, and logs which one', async () => {
    const response = await http(handler, 'GET', '/tokens/broken');
    expect(response.status).toBe(500);
    expect(response.json.error.code).toBe('INTERNAL_ERROR');
    expect(response.json.error.message).toMatch(
      /^Internal error; the broker logs have the details \(request id [0-9a-f-]{36}\)$/,
    );
    expect(response.body).not.toContain('open-api/missing');
    expect(local.output.text()).toContain("Secret 'open-api/missing' does not exist");
  });
});

describe('Handler: direct invoke', () => {
  let handler: LambdaHandler;
  beforeAll(() => {
    handler = newContainer();
  });

  it('getToken returns the same object as HTTP', async () => {
    const outcome = await invokeHandler(handler, {
      action: 'getToken',
      connection: 'legacy',
      minValidity: 60,
    });
    expect(outcome.ok).toBe(true);
    const result = (outcome as { result: Record<string, unknown> }).result;
    expect(Object.keys(result).sort()).toEqual([
      'accessToken',
      'connection',
      'expiresAt',
      'expiresIn',
      'maxAgeMs',
      'staleIfErrorSeconds',
    ]);
    const viaHttp = await http(handler, 'GET', '/tokens/legacy');
    expect(viaHttp.json).toEqual({
      ...result,
      expiresIn: viaHttp.json.expiresIn,
      maxAgeMs: viaHttp.json.maxAgeMs,
    });
    // Served from the same memory entry: the later answer may not be reused for longer.
    expect(viaHttp.json.maxAgeMs).toBeLessThanOrEqual(result.maxAgeMs as number);
  });

  it('invalidate returns { invalidated }', async () => {
    const token = await invokeHandler(handler, { action: 'getToken', connection: 'sandbox' });
    const accessToken = (token as { result: { accessToken: string } }).result.accessToken;
    expect(
      await invokeHandler(handler, { action: 'invalidate', connection: 'sandbox', accessToken }),
    ).toEqual({
      ok: true,
      result: { invalidated: true },
    });
    expect(
      await invokeHandler(handler, { action: 'invalidate', connection: 'sandbox', accessToken }),
    ).toEqual({
      ok: true,
      result: { invalidated: false },
    });
  });

  it.each([
    [{ action: 'getToken' }, 'BadRequestError', 'Invalid direct invoke: "connection"'],
    [
      { action: 'getToken', connection: 'sandbox', minValidity: '60' },
      'BadRequestError',
      '"minValidity"',
    ],
    [
      { action: 'getToken', connection: 'sandbox', minvalidity: 60 },
      'BadRequestError',
      'minvalidity',
    ],
    [{ action: 'refresh', connection: 'sandbox' }, 'BadRequestError', '"action"'],
    [{ action: 'invalidate', connection: 'sandbox' }, 'BadRequestError', '"accessToken"'],
    [
      { action: 'getToken', connection: 'production' },
      'UnknownConnectionError',
      "Unknown connection 'production'",
    ],
    [{ action: 'getToken', connection: 'broken' }, 'InternalError', 'Internal error'],
  ])('%j fails with errorType %s', async (event, errorType, message) => {
    const outcome = await invokeHandler(handler, event);
    expect(outcome).toMatchObject({
      ok: false,
      errorType,
      errorMessage: expect.stringContaining(message),
    });
  });

  it('reports an upstream rejection as UpstreamRejectedError', async () => {
    const fresh = await containerWithEmptyCache('legacy');
    local.stack.simulator.injectFault({
      times: 1,
      status: 401,
      pathIncludes: 'open-api/oauth/access-token',
      body: '{"code":"invalid_client","message":"client authentication failed"}',
    });
    const outcome = await invokeHandler(fresh, { action: 'getToken', connection: 'legacy' });
    expect(outcome).toMatchObject({ ok: false, errorType: 'UpstreamRejectedError' });
  });
});

describe('Handler: operator actions', () => {
  it('status reports every connection’s token metadata and lease, never the token', async () => {
    const handler = newContainer();
    const token = await invokeHandler(handler, { action: 'getToken', connection: 'sandbox' });
    const accessToken = (token as { result: { accessToken: string } }).result.accessToken;
    const outcome = await invokeHandler(handler, { action: 'status' });
    const { connections } = (outcome as { result: { connections: Record<string, unknown>[] } })
      .result;
    expect(connections.map((c) => c.connection)).toEqual([
      'sandbox',
      'legacy',
      'restricted',
      'broken',
    ]);
    expect(connections[0]).toMatchObject({
      variant: 'v3',
      token: {
        expiresIn: expect.any(Number),
        issuedAt: expect.any(String),
        tokenDigest: expect.any(String),
      },
      lease: null,
    });
    expect(JSON.stringify(outcome)).not.toContain(accessToken);
    const viaHttp = await http(handler, 'GET', '/status', { callerArn: OPERATOR });
    expect(viaHttp.status).toBe(200);
    expect(viaHttp.body).not.toContain(accessToken);
  });

  it('warmUp runs the warm-up on demand, by invoke and over HTTP', async () => {
    const handler = newContainer();
    const outcome = await invokeHandler(handler, { action: 'warmUp' });
    expect(outcome).toMatchObject({
      ok: true,
      result: { connections: { sandbox: { status: expect.any(String) } } },
    });
    const viaHttp = await http(handler, 'POST', '/warm', { callerArn: OPERATOR });
    expect(viaHttp.json.connections.legacy.status).toMatch(/^(fresh|issued)$/);
  });
});

describe('Handler: scheduled warm-up and other events', () => {
  it('refreshes what needs it, and one failing connection does not stop the others', async () => {
    const handler = newContainer();
    const outcome = await invokeHandler(handler, scheduledEvent());
    expect(outcome.ok).toBe(true);
    const report = (
      outcome as {
        result: {
          connections: Record<string, { status: string; error?: { code: string } }>;
          failed: number;
        };
      }
    ).result;
    expect(report.connections.sandbox?.status).toMatch(/^(fresh|issued)$/);
    expect(report.connections.legacy?.status).toMatch(/^(fresh|issued)$/);
    expect(report.connections.broken).toMatchObject({
      status: 'failed',
      error: { code: 'SECRET_UNAVAILABLE' },
    });
    expect(report.failed).toBe(1);
    const issued = local.stack.simulator.stats().issuances;
    const again = await invokeHandler(handler, scheduledEvent());
    expect(
      (again as { result: { connections: Record<string, { status: string }> } }).result.connections
        .sandbox?.status,
    ).toBe('fresh');
    expect(local.stack.simulator.stats().issuances).toBe(issued);
  });

  it.each([
    [{}],
    [null],
    [[1, 2]],
    ['getToken'],
    [{ httpMethod: 'GET', path: '/tokens/sandbox', requestContext: {} }],
    [{ source: 'aws.events', 'detail-type': 'Something Else' }],
    // An HTTP API event missing its path: not a request any route can answer.
    [{ version: '2.0', requestContext: { http: { method: 'GET' } } }],
  ])('refuses the unrecognised event %j with BadRequestError', async (event) => {
    const outcome = await invokeHandler(newContainer(), event);
    expect(outcome).toMatchObject({ ok: false, errorType: 'BadRequestError' });
  });
});

describe('Metrics', () => {
  it('are published as EMF, one line per connection and invocation, with the connection as dimension', () => {
    const emf = local.output
      .text()
      .split('\n')
      .filter((line) => line.includes('"_aws"'))
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    expect(emf.length).toBeGreaterThan(5);
    const names = (line: Record<string, unknown>) =>
      (
        line._aws as {
          CloudWatchMetrics: {
            Namespace: string;
            Dimensions: string[][];
            Metrics: { Name: string }[];
          }[];
        }
      ).CloudWatchMetrics[0];
    expect(emf.every((line) => names(line)?.Namespace === 'TokenBroker')).toBe(true);
    expect(emf.every((line) => names(line)?.Dimensions[0]?.includes('connection'))).toBe(true);
    // The service-wide set the alarms use.
    expect(
      emf.every((line) => names(line)?.Dimensions.some((set) => set.join() === 'service')),
    ).toBe(true);
    const all = new Set(emf.flatMap((line) => names(line)?.Metrics.map((m) => m.Name) ?? []));
    for (const name of [
      'TokensServedFromMemory',
      'TokensServedFromDynamoDB',
      'UpstreamIssuances',
      'UpstreamLatency',
      'RefreshFailures',
      'RequestErrors',
    ]) {
      expect(all).toContain(name);
    }
    const issuance = emf.find((line) => 'UpstreamIssuances' in line);
    expect(issuance?.connection).toEqual(expect.any(String));
  });
});

describe('Logs', () => {
  // Self-contained: the scan covers only what this test's own requests logged, so it holds
  // whatever ran (or did not run) before it.
  it('hold no access token, refresh token, authorization code or client secret', async () => {
    const from = local.output.mark();
    const handler = newContainer();
    const served: string[] = [];
    for (const connection of ['sandbox', 'legacy']) {
      const issued = (await http(handler, 'GET', `/tokens/${connection}`)).json;
      served.push(issued.accessToken);
      await http(handler, 'GET', `/tokens/${connection}?minValidity=60`); // from memory
      await invokeHandler(handler, { action: 'getToken', connection });
      await http(handler, 'POST', `/tokens/${connection}/invalidate`, {
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ accessToken: issued.accessToken }),
      });
      await invokeHandler(handler, {
        action: 'invalidate',
        connection,
        accessToken: issued.accessToken,
      });
      served.push((await http(handler, 'GET', `/tokens/${connection}`)).json.accessToken);
    }
    // Refusals that carry a token in the request: a malformed body, an unknown field.
    await http(handler, 'POST', '/tokens/sandbox/invalidate', {
      headers: { 'content-type': 'application/json' },
      body: `{"accessToken": "${served[0]}"`,
    });
    await invokeHandler(handler, { action: 'getToken', connection: 'sandbox', token: served[0] });
    // A token pasted where a name goes: a connection, a query parameter's or a field's name.
    const pasted = served[0] as string;
    // The error as Lambda's runtime logs it: its message and its own fields.
    const asLogged = (error: Error) => JSON.stringify({ ...error, message: error.message });
    const answers = [
      (await http(handler, 'GET', `/tokens/${pasted}`)).json,
      (await http(handler, 'GET', `/tokens/sandbox?${pasted}=1`)).json,
      // A typo'd route, another method, and a token whose base64 holds '/' (segments short).
      (await http(handler, 'GET', `/token/${pasted}`)).json,
      (await http(handler, 'POST', `/tokens/${pasted}`)).json,
      (await http(handler, 'GET', `/tokens/${pasted.slice(0, 18)}/${pasted.slice(18)}`)).json,
      await invokeHandler(handler, { action: 'getToken', connection: pasted }).catch(asLogged),
      await invokeHandler(handler, {
        action: 'getToken',
        connection: 'sandbox',
        [pasted]: 1,
      }).catch((error: Error) => error.message),
    ];
    expect(JSON.stringify(answers)).not.toContain(pasted);
    expect(JSON.stringify(answers)).not.toContain(pasted.slice(18));
    expect(JSON.stringify(answers)).toContain(`(${pasted.length} characters, not repeated)`);
    await http(handler, 'GET', '/tokens/broken'); // the secret is missing
    await invokeHandler(handler, scheduledEvent());
    await http(handler, 'GET', '/status', { callerArn: OPERATOR });

    const logs = local.output.since(from);
    const secrets = local.stack.credentials();
    expect(logs.split('\n').length).toBeGreaterThan(20);
    expect(logs).toContain('"message":"Token issued by the Open API"');
    // Every token this test was served is among the values searched for.
    expect(served.every((token) => secrets.includes(token))).toBe(true);
    expect(secrets.length).toBeGreaterThan(20);
    // Strict mode's values are searched too: signatures and the strings that were signed.
    expect(secrets.filter((value) => /^[0-9a-f]{64}$/.test(value)).length).toBeGreaterThan(3);
    expect(secrets.filter((value) => value.startsWith('clientId=')).length).toBeGreaterThan(3);
    expect(
      logs.split('\n').filter((line) => secrets.some((value) => line.includes(value))),
    ).toEqual([]);
  });
});
