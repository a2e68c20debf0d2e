/**
 * Property-based tests (fast-check) of everything a caller or the upstream can send: whatever
 * the input, the handler answers (never crashes, never poisons the container), caller mistakes
 * are 4xx, and the upstream parsers only ever raise the broker's own typed errors.
 */
import fc from 'fast-check';
import { beforeAll, describe, expect, it } from 'vitest';
import { createHandler } from '../../functions/broker/handler.js';
import { createLogger } from '../../lib/adapters/aws.js';
import { TokenBroker } from '../../lib/broker/index.js';
import { DEFAULT_TIMING } from '../../lib/broker/timing/index.js';
import { BrokerError } from '../../lib/errors.js';
import { readJsonBody, tokenFromPayload, unwrapV3Envelope } from '../../lib/upstream/open-api.js';
import { httpEvent, httpResponse, type LambdaHandler } from '../../local/lambda-events.js';
import { invokeHandler } from '../../local/lambda-invoke.js';
import { connection, FakeIssuer, FakeSecretSource, InMemoryTokenStore } from '../support/fakes.js';

const RUNS = 2_000;
let handler: LambdaHandler;

beforeAll(() => {
  process.env.POWERTOOLS_LOG_LEVEL = 'SILENT';
  const logger = createLogger();
  const broker = new TokenBroker({
    config: {
      connections: new Map([
        ['sandbox', connection()],
        [
          'restricted',
          connection({
            name: 'restricted',
            callers: ['arn:aws:sts::123456789012:assumed-role/orders/*'],
          }),
        ],
      ]),
      defaultMinValiditySeconds: 60,
      refreshWindowSeconds: 600,
      memoryRecheckSeconds: 5,
      maxTokenLifetimeSeconds: 30 * 86_400,
      upstreamTimeoutMs: 2_000,
      invalidateMinAgeSeconds: 2,
    },
    timing: DEFAULT_TIMING,
    store: new InMemoryTokenStore(),
    secrets: new FakeSecretSource(),
    issuer: new FakeIssuer(),
    logger,
  });
  handler = createHandler({ broker, logger }) as LambdaHandler;
});

const segment = fc.oneof(
  fc.constantFrom(
    'tokens',
    'sandbox',
    'restricted',
    'invalidate',
    'health',
    '..',
    '%2e%2e',
    '__proto__',
    'constructor',
    '',
  ),
  fc.string({ maxLength: 12 }).map(encodeURIComponent),
);
const path = fc.array(segment, { maxLength: 5 }).map((parts) => `/${parts.join('/')}`);
const query = fc.dictionary(
  fc.constantFrom('minValidity', 'x', 'minValidity '),
  fc.string({ maxLength: 12 }),
  {
    maxKeys: 2,
  },
);
const body = fc.oneof(
  fc.constant(undefined),
  fc.string({ maxLength: 200 }),
  fc.jsonValue({ maxDepth: 3 }).map((v) => JSON.stringify(v)),
  fc
    .record({ accessToken: fc.oneof(fc.string(), fc.integer(), fc.constant(null)) })
    .map((v) => JSON.stringify(v)),
  fc.constant('x'.repeat(9_000)),
);

describe('Fuzz: HTTP events', () => {
  it(`answers ${RUNS} generated requests with JSON, and never a 5xx for a caller's mistake`, async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom('GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS', 'HEAD'),
        path,
        query,
        body,
        fc.option(
          fc.constantFrom('application/json', 'text/plain', 'application/json; charset=utf-8'),
          { nil: undefined },
        ),
        fc.option(
          fc.constantFrom(
            'arn:aws:sts::123456789012:assumed-role/orders/i-1',
            'arn:aws:iam::1:user/x',
            '',
          ),
          { nil: undefined },
        ),
        async (method, p, q, b, contentType, callerArn) => {
          const url = `${p}?${new URLSearchParams(q).toString()}`;
          const event = httpEvent({
            method,
            url,
            ...(b === undefined ? {} : { body: b }),
            ...(contentType ? { headers: { 'content-type': contentType } } : {}),
            ...(callerArn === undefined ? {} : { callerArn }),
          });
          const outcome = await invokeHandler(handler, event);
          expect(outcome.ok).toBe(true);
          const response = httpResponse(outcome);
          expect(response.status).toBeLessThan(500);
          expect(response.headers['content-type']).toBe('application/json');
          const json = JSON.parse(response.body);
          if (response.status >= 400) expect(json.error.code).toMatch(/^[A-Z_]+$/);
        },
      ),
      { numRuns: RUNS },
    );
  });
});

describe('Fuzz: direct invoke and unknown events', () => {
  it(`refuses ${RUNS} generated events with a typed caller error, never an internal one`, async () => {
    const event = fc.oneof(
      fc.jsonValue({ maxDepth: 3 }),
      fc.record(
        {
          action: fc.oneof(
            fc.constantFrom('getToken', 'invalidate', 'GETTOKEN'),
            fc.jsonValue({ maxDepth: 3 }),
          ),
          connection: fc.oneof(
            fc.constantFrom('sandbox', 'nope', '__proto__'),
            fc.jsonValue({ maxDepth: 3 }),
          ),
          minValidity: fc.oneof(
            fc.integer({ min: -5, max: 100_000_000 }),
            fc.jsonValue({ maxDepth: 3 }),
          ),
          accessToken: fc.oneof(fc.string(), fc.jsonValue({ maxDepth: 3 })),
        },
        { requiredKeys: [] },
      ),
      fc.record({ version: fc.constant('2.0'), requestContext: fc.jsonValue({ maxDepth: 3 }) }),
      fc.record({ source: fc.constant('aws.events'), 'detail-type': fc.string() }),
    );
    await fc.assert(
      fc.asyncProperty(event, async (e) => {
        const outcome = await invokeHandler(handler, e);
        if (!outcome.ok) {
          expect([
            'BadRequestError',
            'UnknownConnectionError',
            'MinValidityUnsatisfiableError',
          ]).toContain(outcome.errorType);
        }
      }),
      { numRuns: RUNS },
    );
  });

  it('still serves normally after all that', async () => {
    const outcome = await invokeHandler(handler, { action: 'getToken', connection: 'sandbox' });
    expect(outcome).toMatchObject({ ok: true, result: { connection: 'sandbox' } });
  });
});

describe('Fuzz: upstream response parsers', () => {
  it(`read ${RUNS} generated responses and raise only the broker's own errors`, async () => {
    await fc.assert(
      fc.asyncProperty(
        // 204, 205 and 304 never carry a body.
        fc
          .integer({ min: 200, max: 599 })
          .filter((status) => ![204, 205, 304].includes(status)),
        fc.oneof(
          fc.string({ maxLength: 300 }),
          fc.jsonValue({ maxDepth: 4 }).map((v) => JSON.stringify(v)),
        ),
        fc.constantFrom('authorize', 'access-token'),
        async (status, text, step) => {
          try {
            const body = await readJsonBody(new Response(text, { status }), step as 'authorize');
            tokenFromPayload(unwrapV3Envelope(body, step as 'authorize', []), {
              maxLifetimeSeconds: 86_400,
            });
          } catch (error) {
            expect(error).toBeInstanceOf(BrokerError);
          }
        },
      ),
      { numRuns: RUNS },
    );
  });
});
