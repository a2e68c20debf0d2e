/**
 * A fault-injecting HTTP proxy for one link of one container (container → DynamoDB, or
 * container → Open API). Requests and answers are small here, so both are read in full: a
 * scenario can look at them (the DynamoDB operation, the Open API step) and hold them.
 *
 * Link modes, applied when a request arrives, again when it would be forwarded and when its
 * answer would be passed on:
 * - `pass`: forwarded as is;
 * - `refuse`: a partition that resets: new connections are reset at once, requests in flight
 *   get their connection reset (the client sees ECONNRESET), nothing is forwarded;
 * - `blackhole`: a partition that drops: connections are accepted, requests are read and never
 *   forwarded nor answered;
 * - `stall`: requests are forwarded (a write takes effect) but the answer never comes back;
 * - `delay`: answers are passed on after a uniformly drawn `minMs`..`maxMs`.
 *
 * Hooks let a scenario act at the exact step it aims at: pause the container the moment its
 * authorize answer arrives, hold its access-token POST, and so on. A request always reaches the
 * target once forwarded, even if the client gave up meanwhile (the far side still processes it).
 * `onResponse` may also lose or change one answer the target gave (the request was processed):
 * reset the client's connection instead of answering, never answer it, or answer something else
 * (a gateway's 502, say). The link modes still apply to the answer a hook let through.
 * `onRequest` may keep a request from the target: answer it from the proxy (a store's refusal,
 * such as a replicated write conflict) or never answer it (a region cut off).
 */
import {
  Agent,
  createServer,
  request as httpRequest,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { trackedSleep } from './tracked-sleep.js';

export type LinkMode =
  | { readonly kind: 'pass' }
  | { readonly kind: 'refuse' }
  | { readonly kind: 'blackhole' }
  | { readonly kind: 'stall' }
  | { readonly kind: 'delay'; readonly minMs: number; readonly maxMs: number };

export const PASS: LinkMode = { kind: 'pass' };

export interface ProxiedRequest {
  /** Sequence number on this proxy, from 1. */
  readonly id: number;
  readonly method: string;
  /** Path and query. */
  readonly path: string;
  readonly headers: IncomingHttpHeaders;
  readonly body: Buffer;
  /** Epoch ms at which the request was read in full. */
  readonly receivedAt: number;
}

export interface ProxiedResponse {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  readonly body: Buffer;
}

/**
 * What `onResponse` may do with an answer the target gave (so the request took effect there):
 * - `reset`: the client's connection is reset instead (it sees ECONNRESET after sending);
 * - `drop`: the client never gets an answer (its own timeout fires), the connection stays open;
 * - `replace`: the client gets `response` instead (e.g. a gateway's 502 for a processed request).
 */
export type AnswerFault =
  | { readonly kind: 'reset' }
  | { readonly kind: 'drop' }
  | { readonly kind: 'replace'; readonly response: ProxiedResponse };

/**
 * What `onRequest` may do instead of forwarding a request (the target never sees it):
 * - `answer`: the client gets `response` from the proxy (e.g. a store's refusal);
 * - `drop`: the client never gets an answer (its own timeout fires), the connection stays open.
 */
export type RequestFault =
  | { readonly kind: 'answer'; readonly response: ProxiedResponse }
  | { readonly kind: 'drop' };

export interface ProxyHooks {
  /**
   * A request was read in full; it is forwarded once the returned promise settles, unless it
   * settles with a {@link RequestFault}.
   */
  onRequest?(
    request: ProxiedRequest,
    // biome-ignore lint/suspicious/noConfusingVoidType: the scenarios' hooks return nothing
  ): RequestFault | undefined | void | Promise<RequestFault | undefined | void>;
  /**
   * The target answered; the answer is passed on once the returned promise settles, unless it
   * settles with an {@link AnswerFault}.
   */
  onResponse?(
    request: ProxiedRequest,
    response: ProxiedResponse,
  ): AnswerFault | undefined | Promise<AnswerFault | undefined>;
}

export interface ProxyStats {
  requests: number;
  forwarded: number;
  answered: number;
  refused: number;
  blackholed: number;
  stalled: number;
  delayed: number;
  /** Answers of the target lost by an `onResponse` fault: connection reset instead. */
  answersReset: number;
  /** Answers of the target lost by an `onResponse` fault: never answered. */
  answersDropped: number;
  /** Answers of the target replaced by an `onResponse` fault. */
  answersReplaced: number;
  /** Requests answered by an `onRequest` fault, never forwarded. */
  requestsAnswered: number;
  /** Requests dropped by an `onRequest` fault: never forwarded, never answered. */
  requestsDropped: number;
  /** The target itself failed (connection error): the client's connection was reset. */
  targetErrors: number;
  /** A hook threw: counted, and the request went on as if the hook had returned. */
  hookErrors: number;
}

export interface FaultProxy {
  readonly url: string;
  readonly label: string;
  mode(): LinkMode;
  setMode(mode: LinkMode): void;
  setHooks(hooks: ProxyHooks): void;
  stats(): ProxyStats;
  close(): Promise<void>;
}

/** One request's way through the proxy, on `performance.now()`'s clock (ms). */
export interface Exchange {
  readonly request: ProxiedRequest;
  /** When it was read in full (its client sent it just before). */
  arrivedAt: number;
  /** When the target's answer came back: it had processed the request. None if never. */
  targetAnsweredAt?: number;
  /** When its client was answered (by the target's answer or a hook's). None if never. */
  answeredAt?: number;
}

export interface ProxyOptions {
  /** Base URL of the target, `http://127.0.0.1:<port>`. */
  readonly target: string;
  readonly label?: string;
  readonly hooks?: ProxyHooks;
  readonly mode?: LinkMode;
  readonly random?: () => number;
  /**
   * Sees each request once the proxy is done with it (answered, refused, dropped, or never to
   * be answered), whatever the hooks and the mode: the harness measures round trips and how
   * late a POST was processed with it.
   */
  readonly observe?: (exchange: Readonly<Exchange>) => void;
}

/** Headers of one hop only: never forwarded as they are. */
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'transfer-encoding',
  'upgrade',
  'te',
  'trailer',
  'content-length',
]);

const endToEnd = (headers: IncomingHttpHeaders, body: Buffer): IncomingHttpHeaders => {
  const out: IncomingHttpHeaders = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value !== undefined && !HOP_BY_HOP.has(name)) out[name] = value;
  }
  out['content-length'] = String(body.length);
  return out;
};

const readAll = async (stream: IncomingMessage): Promise<Buffer> => {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
};

export const startFaultProxy = async (options: ProxyOptions): Promise<FaultProxy> => {
  const target = new URL(options.target);
  const random = options.random ?? Math.random;
  const label = options.label ?? target.host;
  let mode: LinkMode = options.mode ?? PASS;
  let hooks: ProxyHooks = options.hooks ?? {};
  let closed = false;
  let sequence = 0;
  const stats: ProxyStats = {
    requests: 0,
    forwarded: 0,
    answered: 0,
    refused: 0,
    blackholed: 0,
    stalled: 0,
    delayed: 0,
    answersReset: 0,
    answersDropped: 0,
    answersReplaced: 0,
    requestsAnswered: 0,
    requestsDropped: 0,
    targetErrors: 0,
    hookErrors: 0,
  };
  const sockets = new Set<Socket>();
  const timers = new Set<NodeJS.Timeout>();
  // Keep-alive towards the target, as an SDK client would have.
  const agent = new Agent({ keepAlive: true, maxSockets: 64 });

  const sleep = trackedSleep(timers);

  const reset = (socket: Socket | null) => {
    if (socket && !socket.destroyed) socket.resetAndDestroy();
  };

  const runHook = async <T>(hook: () => T | Promise<T>): Promise<T | undefined> => {
    try {
      return await hook();
    } catch {
      stats.hookErrors += 1;
      return undefined;
    }
  };

  /** Applies the mode to a request at one point of its way; false when it goes no further. */
  const admit = (res: ServerResponse, at: 'arrival' | 'forward' | 'answer'): boolean => {
    if (closed) return false;
    // Once read, a request goes on even if its client gave up (the far side would still get
    // it); only its answer needs the client.
    if (at !== 'forward' && (res.socket === null || res.socket.destroyed)) return false;
    switch (mode.kind) {
      case 'refuse':
        stats.refused += 1;
        reset(res.socket);
        return false;
      case 'blackhole':
        // After the target answered, a black hole drops the answer: same as a stall from here.
        stats.blackholed += 1;
        return false;
      case 'stall':
        if (at !== 'answer') return true;
        stats.stalled += 1;
        return false;
      default:
        return true;
    }
  };

  const forward = (request: ProxiedRequest): Promise<ProxiedResponse> =>
    new Promise((resolve, reject) => {
      const outgoing = httpRequest(
        {
          protocol: target.protocol,
          hostname: target.hostname,
          port: target.port,
          method: request.method,
          path: request.path,
          headers: endToEnd(request.headers, request.body),
          agent,
        },
        (incoming) => {
          readAll(incoming).then(
            (body) =>
              resolve({ status: incoming.statusCode ?? 502, headers: incoming.headers, body }),
            reject,
          );
        },
      );
      outgoing.once('error', reject);
      outgoing.end(request.body);
    });

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const body = await readAll(req);
    stats.requests += 1;
    sequence += 1;
    const request: ProxiedRequest = {
      id: sequence,
      method: req.method ?? 'GET',
      path: req.url ?? '/',
      headers: req.headers,
      body,
      receivedAt: Date.now(),
    };
    const exchange: Exchange = { request, arrivedAt: performance.now() };
    try {
      await pass(request, res, exchange);
    } finally {
      options.observe?.(exchange);
    }
  };

  /** The rest of `handle`: the request's way, its times noted in `exchange`. */
  const pass = async (request: ProxiedRequest, res: ServerResponse, exchange: Exchange) => {
    if (!admit(res, 'arrival')) return;
    const { onRequest } = hooks;
    const refusal = onRequest ? await runHook(() => onRequest(request)) : undefined;
    if (refusal?.kind === 'drop') {
      stats.requestsDropped += 1;
      return;
    }
    if (refusal?.kind === 'answer') {
      if (!admit(res, 'answer')) return;
      stats.requestsAnswered += 1;
      exchange.answeredAt = performance.now();
      res.writeHead(
        refusal.response.status,
        endToEnd(refusal.response.headers, refusal.response.body),
      );
      res.end(refusal.response.body);
      return;
    }
    if (!admit(res, 'forward')) return;
    stats.forwarded += 1;
    let response: ProxiedResponse;
    try {
      response = await forward(request);
      exchange.targetAnsweredAt = performance.now();
    } catch {
      stats.targetErrors += 1;
      reset(res.socket);
      return;
    }
    if (!admit(res, 'answer')) return;
    if (mode.kind === 'delay') {
      stats.delayed += 1;
      await sleep(mode.minMs + random() * (mode.maxMs - mode.minMs));
      if (!admit(res, 'answer')) return;
    }
    const { onResponse } = hooks;
    const fault = onResponse ? await runHook(() => onResponse(request, response)) : undefined;
    if (fault?.kind === 'reset') {
      stats.answersReset += 1;
      reset(res.socket);
      return;
    }
    if (fault?.kind === 'drop') {
      stats.answersDropped += 1;
      return;
    }
    if (fault?.kind === 'replace') {
      stats.answersReplaced += 1;
      response = fault.response;
    }
    if (!admit(res, 'answer')) return;
    stats.answered += 1;
    exchange.answeredAt = performance.now();
    res.writeHead(response.status, endToEnd(response.headers, response.body));
    res.end(response.body);
  };

  const server = createServer((req, res) => {
    handle(req, res).catch(() => reset(res.socket));
  });
  server.keepAliveTimeout = 5_000;
  server.on('connection', (socket: Socket) => {
    if (closed || mode.kind === 'refuse') {
      stats.refused += 1;
      socket.resetAndDestroy();
      return;
    }
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
    // A client that gives up resets its side; nothing to report.
    socket.on('error', () => undefined);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}`,
    label,
    mode: () => mode,
    setMode: (next) => {
      mode = next;
      // A partition that resets also cuts the connections already open (keep-alive ones too).
      if (next.kind === 'refuse') for (const socket of sockets) reset(socket);
    },
    setHooks: (next) => {
      hooks = next;
    },
    stats: () => ({ ...stats }),
    close: async () => {
      closed = true;
      for (const timer of timers) clearTimeout(timer);
      timers.clear();
      for (const socket of sockets) socket.destroy();
      agent.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
};
