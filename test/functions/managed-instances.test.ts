/**
 * Lambda Managed Instances (issue 37), as the AWS Node.js runtime runs a function there: the
 * runtime creates its InvokeStore (`@aws/lambda-invoke-store`, AsyncLocalStorage-based because
 * Lambda sets AWS_LAMBDA_MAX_CONCURRENCY) before the function loads, then runs each invocation
 * inside `InvokeStore.run`, many at once in one worker thread; AWS_LAMBDA_INITIALIZATION_TYPE
 * is `lambda-managed-instances`; an extension's INVOKE registration is refused; nothing
 * freezes. Powertools (2.29 and later) keeps its per-invocation state in that store, and
 * refuses to log outside an invocation ("No context available").
 *
 * Here: the entry in that setting (no extension, init's own log lines), then concurrent
 * invocations through the whole handler, their awaits interleaved on real I/O (dynalite, the
 * simulator over HTTP): each invocation's lines carry its own connection, concurrent cold
 * requests share one issuance, every served token is counted once in the metrics.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { InvokeStore, InvokeStoreBase } from '@aws/lambda-invoke-store';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { init } from '../../functions/broker/init.js';
import {
  createContext,
  DEFAULT_LAMBDA,
  httpEvent,
  httpResponse,
  type LambdaHandler,
} from '../../local/lambda-events.js';
import { type Stack, startStack } from '../../local/stack.js';
import { captureOutput } from '../support/lambda.js';

const MANAGED_INSTANCES = {
  AWS_LAMBDA_INITIALIZATION_TYPE: 'lambda-managed-instances',
  AWS_LAMBDA_MAX_CONCURRENCY: '64',
};

let store: InvokeStoreBase;
let output: ReturnType<typeof captureOutput>;
beforeAll(async () => {
  // As the runtime does before it loads the function: the multi-context store, made global.
  process.env.AWS_LAMBDA_MAX_CONCURRENCY = MANAGED_INSTANCES.AWS_LAMBDA_MAX_CONCURRENCY;
  store = await InvokeStore.getInstanceAsync();
  output = captureOutput();
});
afterAll(() => {
  output.stop();
  delete process.env.AWS_LAMBDA_MAX_CONCURRENCY;
  delete (globalThis as { awslambda?: { InvokeStore?: unknown } }).awslambda?.InvokeStore;
});
afterEach(() => {
  vi.unstubAllEnvs();
});

/** One invocation as the runtime runs it on Managed Instances: in a store context of its own. */
const invoke = (handler: LambdaHandler, event: unknown, requestId: string) =>
  store.run(
    {
      [InvokeStoreBase.PROTECTED_KEYS.REQUEST_ID]: requestId,
      [InvokeStoreBase.PROTECTED_KEYS.X_RAY_TRACE_ID]: `Root=1-00000000-${requestId}`,
    },
    () => handler(event, createContext(DEFAULT_LAMBDA, requestId)),
  );

/** A loopback Extensions API that refuses INVOKE, as Lambda does on Managed Instances. */
const refusingExtensionsApi = async () => {
  const registrations: unknown[] = [];
  const server = createServer(async (req: IncomingMessage, res: ServerResponse) => {
    let body = '';
    for await (const chunk of req) body += chunk;
    if (req.method === 'POST' && req.url === '/2020-01-01/extension/register') {
      registrations.push(JSON.parse(body || '{}'));
      res.writeHead(403, { 'Content-Type': 'application/json' });
      res.end(
        JSON.stringify({
          errorType: 'Extension.InvalidEventType',
          errorMessage: 'INVOKE: not supported on Lambda Managed Instances',
        }),
      );
      return;
    }
    res.writeHead(404).end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    address: `127.0.0.1:${port}`,
    registrations,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
};

/** The entry (functions/broker/index.ts) loaded afresh with `env`, as a worker's init runs it. */
const loadEntry = async (env: Record<string, string>) => {
  for (const [name, value] of Object.entries(env)) vi.stubEnv(name, value);
  vi.resetModules();
  return (await import('../../functions/broker/index.js')) as { handler: LambdaHandler };
};

const BROKER_ENV = {
  BROKER_TABLE_NAME: 'tokens',
  BROKER_CONNECTIONS: JSON.stringify({
    sandbox: { variant: 'v3', baseUrl: 'https://open-api.example.com', secretId: 'open-api/v3' },
  }),
  AWS_REGION: 'eu-west-1',
};

describe('Entry on Lambda Managed Instances', () => {
  it('registers no extension there (INVOKE is refused, nothing freezes) and says nothing about one', async () => {
    const api = await refusingExtensionsApi();
    try {
      const mark = output.mark();
      const { handler } = await loadEntry({
        ...BROKER_ENV,
        ...MANAGED_INSTANCES,
        BROKER_KMS_KEY_ID: 'alias/token-broker',
        AWS_LAMBDA_RUNTIME_API: api.address,
      });
      expect(typeof handler).toBe('function');
      expect(api.registrations).toEqual([]);
      expect(output.since(mark)).not.toContain('Extension not registered');
    } finally {
      await api.close();
    }
  });

  it("logs at init, outside any invocation, where Powertools alone would throw 'No context available'", async () => {
    const mark = output.mark();
    // No BROKER_KMS_KEY_ID: init warns that tokens are stored without application encryption.
    const { handler } = await loadEntry({ ...BROKER_ENV, ...MANAGED_INSTANCES });
    expect(typeof handler).toBe('function');
    expect(output.since(mark)).toContain('BROKER_KMS_KEY_ID is not set');
  });

  it('still registers its extension on Lambda (on demand)', async () => {
    const api = await refusingExtensionsApi();
    try {
      // One invocation at a time there: the runtime sets no AWS_LAMBDA_MAX_CONCURRENCY.
      vi.stubEnv('AWS_LAMBDA_MAX_CONCURRENCY', undefined);
      await loadEntry({
        ...BROKER_ENV,
        BROKER_KMS_KEY_ID: 'alias/token-broker',
        AWS_LAMBDA_INITIALIZATION_TYPE: 'on-demand',
        AWS_LAMBDA_RUNTIME_API: api.address,
      });
      expect(api.registrations).toEqual([{ events: ['INVOKE'] }]);
    } finally {
      await api.close();
    }
  });
});

describe('Concurrent invocations in one worker (Lambda Managed Instances)', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack({ latencyMs: 20 }, ['sandbox', 'legacy'], { encrypt: true });
  });
  afterAll(async () => {
    await stack.close();
  });

  /** A worker's handler: the production init, with this stack's environment. */
  const worker = async () => {
    for (const [name, value] of Object.entries({
      ...stack.env,
      ...MANAGED_INSTANCES,
      POWERTOOLS_LOG_LEVEL: 'DEBUG',
    })) {
      vi.stubEnv(name, value);
    }
    return (await init(undefined, undefined)) as LambdaHandler;
  };

  /** Log lines written since `mark`, parsed (Powertools' JSON; EMF lines too). */
  const linesSince = (mark: number) =>
    output
      .since(mark)
      .split('\n')
      .filter((line) => line.startsWith('{'))
      .map((line) => JSON.parse(line) as Record<string, unknown>);

  it('has concurrent cold requests for one connection share one issuance (single flight)', async () => {
    const handler = await worker();
    // First in this file: nothing cached for the connection, in memory or in the table.
    const before = stack.simulator.issuanceTimes().length;
    const answers = await Promise.all(
      Array.from({ length: 10 }, (_, i) =>
        invoke(handler, { action: 'getToken', connection: 'sandbox', minValidity: 0 }, `cold-${i}`),
      ),
    );
    const tokens = new Set(answers.map((a) => (a as { accessToken: string }).accessToken));
    expect(tokens.size).toBe(1);
    expect(stack.simulator.issuanceTimes().length - before).toBe(1);
  });

  it('keeps each invocation its own connection in its log lines, their awaits interleaved', async () => {
    const handler = await worker();
    const mark = output.mark();
    const spans: { id: string; from: number; to: number }[] = [];
    const requests = Array.from({ length: 12 }, (_, i) => ({
      id: `req-${i}`,
      connection: i % 2 === 0 ? 'sandbox' : 'legacy',
    }));
    const answers = await Promise.all(
      requests.map(async ({ id, connection }) => {
        const from = performance.now();
        const outcome = await invoke(
          handler,
          httpEvent({ method: 'GET', url: `/tokens/${connection}` }),
          id,
        );
        spans.push({ id, from, to: performance.now() });
        return httpResponse({ ok: true, result: outcome });
      }),
    );
    expect(answers.map((a) => a.status)).toEqual(requests.map(() => 200));
    // They overlapped: each one began before another had ended.
    const overlapping = spans.filter((s) =>
      spans.some((t) => t !== s && t.from < s.to && s.from < t.to),
    );
    expect(overlapping.length).toBeGreaterThan(1);
    const lines = linesSince(mark).filter((line) => typeof line.function_request_id === 'string');
    const served = lines.filter((line) => line.message === 'Token served');
    expect(served.length).toBe(requests.length);
    for (const line of lines) {
      const request = requests.find((r) => r.id === line.function_request_id);
      if (line.connection !== undefined) expect(line.connection).toBe(request?.connection);
    }
    for (const request of requests) {
      expect(served.find((l) => l.function_request_id === request.id)?.connection).toBe(
        request.connection,
      );
    }
  });

  it('counts every served token once in the metrics, whichever invocation publishes them', async () => {
    const handler = await worker();
    const mark = output.mark();
    const count = 16;
    await Promise.all(
      Array.from({ length: count }, (_, i) =>
        invoke(handler, { action: 'getToken', connection: i % 2 ? 'sandbox' : 'legacy' }, `m-${i}`),
      ),
    );
    const served = linesSince(mark)
      .filter((line) => line._aws !== undefined && line.connection !== undefined)
      .reduce((total, line) => {
        for (const name of [
          'TokensServedFromMemory',
          'TokensServedFromDynamoDB',
          'TokensServedFromUpstream',
        ]) {
          const value = line[name];
          total += Array.isArray(value)
            ? value.reduce((a: number, b: number) => a + b, 0)
            : typeof value === 'number'
              ? value
              : 0;
        }
        return total;
      }, 0);
    expect(served).toBe(count);
  });
});
