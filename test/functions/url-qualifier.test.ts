/**
 * Issue 37: a caller identity is trusted only from the Function URL's own request context. The
 * URL serves an alias of its own (`BROKER_URL_QUALIFIER`, the stack's `url`); Lambda's Invoke
 * API takes any payload, so a direct invoker can send the event a Function URL would have built,
 * naming whichever IAM ARN it likes. The function tells the two apart only by the qualifier it
 * was invoked with (`context.invokedFunctionArn`): an HTTP-shaped event is served through the
 * URL's alias alone, and that alias serves nothing else. The whole handler, over the local stack.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { qualifierOf, wrongQualifier } from '../../functions/broker/qualifier.js';
import {
  DEFAULT_LAMBDA,
  httpEvent,
  httpResponse,
  type InvokeOutcome,
  type LambdaHandler,
  scheduledEvent,
} from '../../local/lambda-events.js';
import { invokeHandler } from '../../local/lambda-invoke.js';
import { OPERATOR, ORDERS_ROLE } from '../support/callers.js';
import { newContainer, newContainerWithout } from '../support/lambda.js';
import { useLocalStack } from '../support/local-stack.js';

/** Who sends the hand-made events: a service granted `lambda:InvokeFunction` on `:live`. */
const INTRUDER = 'arn:aws:sts::123456789012:assumed-role/reports-service/i-0def';
const URL_ALIAS = 'url';

const local = useLocalStack({
  connections: (url) => ({
    open: { variant: 'v3', baseUrl: url, secretId: 'open-api/v3' },
    orders: {
      variant: 'v3',
      baseUrl: url,
      secretId: 'open-api/v3',
      callers: ['arn:aws:sts::123456789012:assumed-role/orders-*/*'],
    },
  }),
  env: {
    BROKER_OPERATOR_CALLERS: 'arn:aws:sts::123456789012:assumed-role/platform-*/*',
    BROKER_URL_QUALIFIER: URL_ALIAS,
  },
});
let handler: LambdaHandler;
beforeAll(() => {
  handler = newContainer();
});

/** Invokes the handler as Lambda does through `qualifier` (none: the unqualified ARN). */
const invokeAs = (
  qualifier: string | undefined,
  event: unknown,
  on: LambdaHandler = handler,
): Promise<InvokeOutcome> => invokeHandler(on, event, DEFAULT_LAMBDA, { qualifier });

/** The event a Function URL builds for `callerArn`, as a direct invoker can write it too. */
const asIf = (callerArn: string, method: string, url: string, body?: unknown) =>
  httpEvent({
    method,
    url,
    callerArn,
    ...(body === undefined
      ? {}
      : { body: JSON.stringify(body), headers: { 'content-type': 'application/json' } }),
  });

const served = (outcome: InvokeOutcome) => {
  expect(outcome.ok, JSON.stringify(outcome)).toBe(true);
  const response = httpResponse(outcome);
  return { ...response, json: JSON.parse(response.body) };
};

/**
 * An HTTP-shaped event refused for its qualifier: answered as HTTP, 403 WRONG_QUALIFIER (not a
 * function error, which the function-errors alarm would count).
 */
const refusedAsHttp = (outcome: InvokeOutcome, what = '') => {
  const response = served(outcome);
  expect(response.status, what).toBe(403);
  expect(response.json.error.code, what).toBe('WRONG_QUALIFIER');
  return response;
};

describe('Edge: a caller identity only from the Function URL (issue 37)', () => {
  it('refuses a direct invoke of live that sends an HTTP-shaped event naming another caller: 403 WRONG_QUALIFIER, nothing served', async () => {
    const issued = local.stack.simulator.stats().issuances;
    const refused = refusedAsHttp(
      await invokeAs('live', asIf(ORDERS_ROLE, 'GET', '/tokens/orders')),
    );
    expect(refused.json.error.message).toContain(`alias '${URL_ALIAS}'`);
    expect(Object.keys(refused.json)).toEqual(['error']);
    expect(refused.headers['cache-control']).toBe('no-store');
    // Nor the operator routes, nor any other way in: unqualified, $LATEST, a version.
    for (const qualifier of [undefined, '$LATEST', '7', 'live']) {
      for (const [method, path] of [
        ['POST', '/warm'],
        ['GET', '/status'],
        ['GET', '/health'],
      ] as const) {
        refusedAsHttp(
          await invokeAs(qualifier, asIf(OPERATOR, method, path)),
          `${qualifier} ${method} ${path}`,
        );
      }
    }
    expect(local.stack.simulator.stats().issuances).toBe(issued);
  });

  it('serves the same event through the URL’s alias, as the caller it names', async () => {
    const token = served(await invokeAs(URL_ALIAS, asIf(ORDERS_ROLE, 'GET', '/tokens/orders')));
    expect(token.status).toBe(200);
    expect(local.stack.simulator.isValid(token.json.accessToken)).toBe(true);
    // And `callers` still binds it: another service is refused there.
    const other = served(await invokeAs(URL_ALIAS, asIf(INTRUDER, 'GET', '/tokens/orders')));
    expect(other.status).toBe(403);
    expect(other.json.error.code).toBe('CALLER_NOT_ALLOWED');
    expect(served(await invokeAs(URL_ALIAS, asIf(OPERATOR, 'GET', '/status'))).status).toBe(200);
  });

  it('serves only HTTP requests through the URL’s alias: a direct invoke or a warm-up there is refused, thrown as direct invoke refusals are', async () => {
    for (const event of [
      { action: 'getToken', connection: 'open' },
      { action: 'status' },
      scheduledEvent(),
      { something: 'else' },
    ]) {
      expect(await invokeAs(URL_ALIAS, event), JSON.stringify(event)).toMatchObject({
        ok: false,
        errorType: 'WrongQualifierError',
      });
    }
  });

  it('serves direct invoke and the warm-up through live, as before', async () => {
    const token = await invokeAs('live', { action: 'getToken', connection: 'orders' });
    expect(token.ok && (token.result as { connection: string }).connection).toBe('orders');
    expect((await invokeAs('live', scheduledEvent())).ok).toBe(true);
    expect((await invokeAs(undefined, { action: 'status' })).ok).toBe(true);
  });

  it('logs the refusal with its code, the qualifier and the identity claimed, never the token the body carries', async () => {
    const { accessToken } = served(
      await invokeAs(URL_ALIAS, asIf(ORDERS_ROLE, 'GET', '/tokens/orders')),
    ).json as { accessToken: string };
    const mark = local.output.mark();
    refusedAsHttp(
      await invokeAs(
        'live',
        asIf(ORDERS_ROLE, 'POST', '/tokens/orders/invalidate', { accessToken }),
      ),
    );
    const logged = local.output.since(mark);
    const line = logged
      .split('\n')
      .filter(Boolean)
      .map((text) => JSON.parse(text) as Record<string, unknown>)
      .find((entry) => entry.message === 'Request refused');
    expect(line?.error).toMatchObject({
      name: 'WrongQualifierError',
      code: 'WRONG_QUALIFIER',
      qualifier: 'live',
      claimedCaller: ORDERS_ROLE,
    });
    expect(line?.level).toBe('WARN');
    expect(logged).not.toContain(accessToken);
  });

  it('serves HTTP requests on any qualifier where BROKER_URL_QUALIFIER is unset (in-process tests), as before', async () => {
    const open = newContainerWithout('BROKER_URL_QUALIFIER');
    const response = served(await invokeAs('live', asIf(ORDERS_ROLE, 'GET', '/health'), open));
    expect(response.status).toBe(200);
    expect((await invokeAs(URL_ALIAS, { action: 'status' }, open)).ok).toBe(true);
  });
});

describe('qualifierOf, wrongQualifier: which qualifier serves which event', () => {
  const arn = 'arn:aws:lambda:eu-west-1:123456789012:function:token-broker-prod-broker';

  it('reads the qualifier an invoker named, and none from an unqualified ARN', () => {
    expect(qualifierOf(`${arn}:live`)).toBe('live');
    expect(qualifierOf(`${arn}:$LATEST`)).toBe('$LATEST');
    expect(qualifierOf(`${arn}:12`)).toBe('12');
    expect(qualifierOf(arn)).toBeUndefined();
    expect(qualifierOf(undefined)).toBeUndefined();
    expect(qualifierOf('')).toBeUndefined();
  });

  it.each<[string, boolean, string | undefined, boolean]>([
    ['an HTTP request through the URL’s alias', true, `${arn}:url`, false],
    ['an HTTP request through live', true, `${arn}:live`, true],
    ['an HTTP request through $LATEST', true, `${arn}:$LATEST`, true],
    ['an HTTP request through a version', true, `${arn}:3`, true],
    ['an HTTP request unqualified', true, arn, true],
    ['an HTTP request through an alias named like it, cased otherwise', true, `${arn}:URL`, true],
    ['a direct invoke through live', false, `${arn}:live`, false],
    ['a direct invoke unqualified', false, arn, false],
    ['a direct invoke through the URL’s alias', false, `${arn}:url`, true],
  ])('%s: refused %s', (_, http, invoked, refused) => {
    expect(wrongQualifier(http, invoked, 'url') !== undefined).toBe(refused);
    // Unset: nothing is refused.
    expect(wrongQualifier(http, invoked, undefined)).toBeUndefined();
  });

  it('keeps what it logs printable and short: the qualifier and the identity claimed', () => {
    const refused = wrongQualifier(true, `${arn}:live`, 'url', `${'x'.repeat(300)}\u0000`);
    expect(refused?.code).toBe('WRONG_QUALIFIER');
    expect(refused?.details.qualifier).toBe('live');
    expect(String(refused?.details.claimedCaller).length).toBeLessThanOrEqual(201);
    expect(wrongQualifier(true, arn, 'url')?.details).toEqual({ qualifier: '(none)' });
    expect(wrongQualifier(true, arn, 'url')?.message).toContain('without a qualifier');
  });
});
