/**
 * The broker's internal extension (functions/broker/after-response.ts) against a loopback
 * Extensions API: it registers for INVOKE during init, and after an INVOKE asks for its next
 * event only once that invocation's handler has returned and the work it started has ended.
 * Lambda freezes the environment only then (issue 17).
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import {
  Invocations,
  registerAfterResponse,
  startRegistration,
} from '../../functions/broker/after-response.js';

interface FakeApi {
  readonly address: string;
  readonly registrations: { name: string | undefined; events: unknown }[];
  /** `event/next` calls received so far. */
  nexts: number;
  /** Answers the pending `event/next` with `event`. */
  send(event: Record<string, unknown>): void;
  close(): Promise<void>;
}

const fakeApi = async (): Promise<FakeApi> => {
  let pending: ServerResponse | undefined;
  const api: Omit<FakeApi, 'address' | 'close'> = {
    registrations: [],
    nexts: 0,
    send: (event) => {
      pending?.writeHead(200, {
        'Content-Type': 'application/json',
        'Lambda-Extension-Event-Identifier': 'e-1',
      });
      pending?.end(JSON.stringify(event));
      pending = undefined;
    },
  };
  const server = createServer(async (req: IncomingMessage, res: ServerResponse) => {
    let body = '';
    for await (const chunk of req) body += chunk;
    if (req.method === 'POST' && req.url === '/2020-01-01/extension/register') {
      api.registrations.push({
        name: req.headers['lambda-extension-name'] as string | undefined,
        events: JSON.parse(body).events,
      });
      res.writeHead(200, { 'Lambda-Extension-Identifier': 'ext-1' });
      res.end(JSON.stringify({ functionName: 'token-broker', functionVersion: '$LATEST' }));
      return;
    }
    if (req.method === 'GET' && req.url === '/2020-01-01/extension/event/next') {
      expect(req.headers['lambda-extension-identifier']).toBe('ext-1');
      api.nexts += 1;
      pending = res;
      return;
    }
    res.writeHead(404).end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    ...api,
    get nexts() {
      return api.nexts;
    },
    set nexts(value) {
      api.nexts = value;
    },
    address: `127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        api.send({ eventType: 'SHUTDOWN', shutdownReason: 'spindown', deadlineMs: Date.now() });
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
};

const settle = (ms = 30) => new Promise((resolve) => setTimeout(resolve, ms));
const log = { warn: () => undefined };

describe('Function: registerAfterResponse', () => {
  let api: FakeApi | undefined;
  afterEach(async () => {
    await api?.close();
    api = undefined;
  });

  it('does nothing outside Lambda (no runtime API)', async () => {
    const invocations = new Invocations();
    expect(
      await registerAfterResponse({
        runtimeApi: undefined,
        idle: async () => {},
        invocations,
        log,
      }),
    ).toBe(false);
    expect(invocations.watched).toBe(false);
  });

  it('registers for INVOKE only, under its own name, during init', async () => {
    api = await fakeApi();
    const registered = await registerAfterResponse({
      runtimeApi: api.address,
      idle: async () => {},
      invocations: new Invocations(),
      log,
    });
    expect(registered).toBe(true);
    expect(api.registrations).toEqual([
      { name: 'token-broker-after-response', events: ['INVOKE'] },
    ]);
  });

  it('takes the answer of a registration the entry sent already, and sends none of its own', async () => {
    api = await fakeApi();
    const registration = startRegistration(api.address); // the entry, before the rest of init
    const registered = await registerAfterResponse({
      runtimeApi: api.address,
      registration,
      idle: async () => {},
      invocations: new Invocations(),
      log,
    });
    expect(registered).toBe(true);
    expect(api.registrations).toHaveLength(1);
    await settle();
    expect(api.nexts).toBe(1);
  });

  it('warns and registers nothing when the API refuses, or cannot be reached', async () => {
    const refusing = createServer((_req, res) => void res.writeHead(403).end('{}'));
    await new Promise<void>((resolve) => refusing.listen(0, '127.0.0.1', resolve));
    const { port } = refusing.address() as AddressInfo;
    const warnings: [string, Record<string, unknown>][] = [];
    const invocations = new Invocations();
    const deps = {
      idle: async () => {},
      invocations,
      log: {
        warn: (message: string, fields: Record<string, unknown>) =>
          void warnings.push([message, fields]),
      },
    };
    try {
      expect(await registerAfterResponse({ ...deps, runtimeApi: `127.0.0.1:${port}` })).toBe(false);
    } finally {
      refusing.close();
    }
    // Nothing listens on port 9 (discard) here: the connection is refused.
    const unreachable = startRegistration('127.0.0.1:9');
    expect(
      await registerAfterResponse({
        ...deps,
        runtimeApi: '127.0.0.1:9',
        registration: unreachable,
      }),
    ).toBe(false);
    expect(warnings).toEqual([
      ['Extension not registered: refresh ahead waits for the next invocation', { status: 403 }],
      [
        'Extension not registered: refresh ahead waits for the next invocation',
        { error: { name: 'Error' } },
      ],
    ]);
    expect(invocations.watched).toBe(false);
  });

  it('asks for its next event only once the invocation has returned and its work has ended', async () => {
    api = await fakeApi();
    const invocations = new Invocations();
    let endWork: (() => void) | undefined;
    const work = new Promise<void>((resolve) => {
      endWork = resolve;
    });
    await registerAfterResponse({
      runtimeApi: api.address,
      idle: () => work,
      invocations,
      log,
    });
    await settle();
    expect(api.nexts).toBe(1); // init over: waiting for the first event
    api.send({ eventType: 'INVOKE', requestId: 'r-1', deadlineMs: Date.now() + 3_000 });
    await settle();
    expect(api.nexts).toBe(1); // the handler of r-1 is still running
    invocations.finished('r-1');
    await settle();
    expect(api.nexts).toBe(1); // answered, but the refresh it started goes on: not frozen
    endWork?.();
    await settle();
    expect(api.nexts).toBe(2); // now the environment may freeze
  });

  it('does not mistake another invocation’s end for its own', async () => {
    api = await fakeApi();
    const invocations = new Invocations();
    await registerAfterResponse({
      runtimeApi: api.address,
      idle: async () => {},
      invocations,
      log,
    });
    await settle();
    invocations.finished('r-0'); // an earlier invocation, before the event
    api.send({ eventType: 'INVOKE', requestId: 'r-1', deadlineMs: Date.now() + 3_000 });
    await settle();
    expect(api.nexts).toBe(1);
    invocations.finished('r-1');
    await settle();
    expect(api.nexts).toBe(2);
  });
});

describe('Function: registerAfterResponse, its poll failing', () => {
  it('asks again after a poll that failed (a client timeout), and stops once the API is gone', async () => {
    const invocations = new Invocations();
    let polls = 0;
    const warnings: string[] = [];
    const send = (async (url: string) => {
      if (String(url).endsWith('/register')) {
        return new Response('{}', { status: 200, headers: { 'Lambda-Extension-Identifier': 'e' } });
      }
      polls += 1;
      if (polls === 1) throw new TypeError('fetch failed (headers timeout)');
      if (polls === 2) return Response.json({ eventType: 'INVOKE', requestId: 'r-1' });
      throw new TypeError('fetch failed (ECONNREFUSED)');
    }) as typeof fetch;
    const registered = await registerAfterResponse({
      runtimeApi: '127.0.0.1:9',
      idle: async () => {},
      invocations,
      log: { warn: (message) => void warnings.push(message) },
      fetch: send,
    });
    expect(registered).toBe(true);
    invocations.finished('r-1'); // its handler returned before the INVOKE reached the extension
    for (let i = 0; i < 50 && warnings.length === 0; i += 1) await settle(50);
    // 1 failed, 2 delivered the INVOKE (asked again), then 3 failures in a row: the API is gone.
    expect(polls).toBe(5);
    expect(warnings).toEqual(['Extension event loop ended']);
  });
  // Review 5: the Extensions API answers `event/next` with 403 or 500 ("non-recoverable state;
  // the extension should exit promptly"); such an answer carries no event and is no poll that
  // worked: asked again at once, without end, it is a busy loop against the Runtime API.
  it('takes an error answer to a poll as a failed poll, and stops once the API keeps refusing', async () => {
    const invocations = new Invocations();
    let polls = 0;
    const warnings: string[] = [];
    const send = (async (url: string) => {
      if (String(url).endsWith('/register')) {
        return new Response('{}', { status: 200, headers: { 'Lambda-Extension-Identifier': 'e' } });
      }
      polls += 1;
      // A bound for the loop on main, which never ends: the test ends after it.
      if (polls > 1_000) return Response.json({ eventType: 'SHUTDOWN' });
      return Response.json(
        {
          errorMessage: 'State transition from Ready to Invoking failed',
          errorType: 'Extension.Crash',
        },
        { status: 500 },
      );
    }) as typeof fetch;
    await registerAfterResponse({
      runtimeApi: '127.0.0.1:9',
      idle: async () => {},
      invocations,
      log: { warn: (message) => void warnings.push(message) },
      fetch: send,
    });
    for (let i = 0; i < 50 && warnings.length === 0 && polls <= 1_000; i += 1) await settle(50);
    expect(polls).toBe(3);
    expect(warnings).toEqual(['Extension event loop ended']);
  });
});
