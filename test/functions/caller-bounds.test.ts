/**
 * The caller's word at the edge: forcing is a permission (`forceCallers`), a replacement too
 * soon after the last forced one is a 429 that says what can be had now, and an early report is
 * answered as kept. The whole handler, over the local stack (dynalite, the simulator, loopback
 * Secrets Manager), with the production defaults for both ages (floor 0 only where a test
 * needs a first replacement at once).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  DEFAULT_LAMBDA,
  httpEvent,
  httpResponse,
  type LambdaHandler,
} from '../../local/lambda-events.js';
import { invokeHandler } from '../../local/lambda-invoke.js';
import { applyEnv, type Stack, startStack } from '../../local/stack.js';
import { captureOutput, newContainer } from '../support/lambda.js';

const SERVICE = 'arn:aws:sts::123456789012:assumed-role/orders-service/i-0abc';
const OPERATOR = 'arn:aws:sts::123456789012:assumed-role/platform-ops/alice';
/** The simulator's tokens live a day: a token a second old cannot give this, a new one can. */
const FORCING = 86_399;
const aSecond = () => new Promise((resolve) => setTimeout(resolve, 1_100));

let stack: Stack;
let output: ReturnType<typeof captureOutput>;
let handler: LambdaHandler;

beforeAll(async () => {
  stack = await startStack();
  const url = stack.simulator.url;
  // No countdown (the upstream keeps earlier tokens valid): each replacement is one flow.
  const connection = {
    variant: 'v3',
    baseUrl: url,
    secretId: 'open-api/v3',
    revokesOnReissue: false,
  };
  applyEnv({
    ...stack.env,
    BROKER_CONNECTIONS: JSON.stringify({
      open: connection,
      guarded: {
        ...connection,
        forceCallers: ['arn:aws:sts::123456789012:assumed-role/platform-ops/*'],
      },
      fenced: {
        ...connection,
        forceCallers: ['arn:aws:sts::123456789012:assumed-role/platform-ops/*'],
      },
    }),
    BROKER_INVALIDATE_MIN_AGE_SECONDS: '0',
    // The production default: a forced token is not replaced on a caller's word for a window.
    BROKER_FORCED_MIN_AGE_SECONDS: '',
  });
  output = captureOutput();
  handler = newContainer();
});
afterAll(async () => {
  output.stop();
  await stack.close();
});

const http = async (method: string, url: string, callerArn: string, body?: unknown) => {
  const response = httpResponse(
    await invokeHandler(
      handler,
      httpEvent({
        method,
        url,
        callerArn,
        ...(body === undefined
          ? {}
          : { body: JSON.stringify(body), headers: { 'content-type': 'application/json' } }),
      }),
    ),
  );
  return { ...response, json: response.body ? JSON.parse(response.body) : undefined };
};

describe('Edge: a caller’s word is bounded', () => {
  it('answers a second forcing minValidity within the window with 429, Retry-After and what can be had now, issuing nothing', async () => {
    const natural = await http('GET', '/tokens/open', SERVICE);
    await aSecond();
    // The first replacement of a token issued otherwise (the floor is 0 here) goes through.
    const first = await http('GET', `/tokens/open?minValidity=${FORCING}`, SERVICE);
    expect(first.status).toBe(200);
    expect(first.json.accessToken).not.toBe(natural.json.accessToken);
    await aSecond();
    const issued = stack.simulator.stats().issuances;
    const second = await http('GET', `/tokens/open?minValidity=${FORCING}`, SERVICE);
    expect(second.status).toBe(429);
    expect(second.json.error.code).toBe('REPLACEMENT_TOO_SOON');
    const retryAfter = Number(second.headers['retry-after']);
    expect(retryAfter).toBeGreaterThan(0);
    expect(retryAfter).toBeLessThanOrEqual(600);
    const available = second.json.error.availableMinValidity as number;
    expect(available).toBeLessThan(FORCING);
    expect(available).toBeGreaterThan(FORCING - 60);
    expect(second.json.error.message).toContain(`ask for ${available}s or less`);
    expect(stack.simulator.stats().issuances).toBe(issued);
    // What it was told it can have, it gets, from the same token.
    const served = await http('GET', `/tokens/open?minValidity=${available - 1}`, SERVICE);
    expect(served.status).toBe(200);
    expect(served.json.accessToken).toBe(first.json.accessToken);
  });

  it('lets only the callers in forceCallers force a replacement; others get 403 with what can be had now', async () => {
    const token = await http('GET', '/tokens/guarded', SERVICE);
    expect(token.status).toBe(200);
    await aSecond();
    const refused = await http('GET', `/tokens/guarded?minValidity=${FORCING}`, SERVICE);
    expect(refused.status).toBe(403);
    expect(refused.json.error.code).toBe('FORCE_NOT_ALLOWED');
    expect(refused.json.error.availableMinValidity).toBeGreaterThan(FORCING - 60);
    expect(refused.headers['retry-after']).toBeUndefined();
    const allowed = await http('GET', `/tokens/guarded?minValidity=${FORCING}`, OPERATOR);
    expect(allowed.status).toBe(200);
    expect(allowed.json.accessToken).not.toBe(token.json.accessToken);
  });

  it('refuses forcing over direct invoke where forceCallers is set: it carries no identity', async () => {
    await aSecond();
    const outcome = await invokeHandler(handler, {
      action: 'getToken',
      connection: 'guarded',
      minValidity: FORCING,
    });
    expect(outcome).toMatchObject({ ok: false, errorType: 'ForceNotAllowedError' });
    // Reporting a rejected token needs no permission: it is kept, and answered so.
    const { accessToken } = (await http('GET', '/tokens/guarded', SERVICE)).json;
    const report = await http('POST', '/tokens/guarded/invalidate', SERVICE, { accessToken });
    expect(report.status).toBe(200);
    // That token was issued on a caller's word a moment ago: kept for its window.
    expect(report.json.invalidated).toBe(false);
    expect(report.json.deferredSeconds).toBeGreaterThan(590);
  });

  // Review 5, issue 37: Lambda's Invoke API takes any payload. A caller with plain
  // `lambda:InvokeFunction` sends the event a Function URL would have built, naming an operator's
  // ARN. Through `live` it is refused (test/functions/url-qualifier.test.ts); through the URL's
  // own alias nothing in it tells it from the URL's, so only IAM keeps such callers off that
  // alias (a grant of lambda:InvokeFunction there only under lambda:InvokedViaFunctionUrl). Pinned,
  // with the threat model saying so.
  it('answers an HTTP-shaped direct invoke through the URL’s alias as the identity it claims, forcing past forceCallers (what only IAM closes), and refuses it through live', async () => {
    const saved = process.env.BROKER_URL_QUALIFIER;
    process.env.BROKER_URL_QUALIFIER = 'url';
    let guarded: LambdaHandler;
    try {
      guarded = newContainer();
    } finally {
      if (saved === undefined) delete process.env.BROKER_URL_QUALIFIER;
      else process.env.BROKER_URL_QUALIFIER = saved;
    }
    const before = (await http('GET', '/tokens/fenced', SERVICE)).json.accessToken as string;
    await aSecond();
    const forged = {
      version: '2.0',
      rawPath: '/tokens/fenced',
      rawQueryString: `minValidity=${FORCING}`,
      queryStringParameters: { minValidity: String(FORCING) },
      pathParameters: { connection: 'fenced' },
      headers: {},
      requestContext: {
        http: { method: 'GET', path: '/tokens/fenced' },
        authorizer: { iam: { userArn: OPERATOR } },
      },
    };
    const issued = stack.simulator.stats().issuances;
    const throughLive = await invokeHandler(guarded, forged, DEFAULT_LAMBDA, { qualifier: 'live' });
    expect(throughLive.ok && httpResponse(throughLive).status).toBe(403);
    expect(stack.simulator.stats().issuances).toBe(issued);
    const throughUrl = await invokeHandler(guarded, forged, DEFAULT_LAMBDA, { qualifier: 'url' });
    expect(throughUrl.ok && httpResponse(throughUrl).status).toBe(200);
    // A replacement: forced, as the operator it named may.
    const forcedToken = JSON.parse(httpResponse(throughUrl).body).accessToken as string;
    expect(forcedToken).not.toBe(before);
    expect(stack.simulator.isValid(forcedToken)).toBe(true);
  });
});
