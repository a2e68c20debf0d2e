/**
 * One way to run the local stand-ins (the Open API simulator, the Secrets Manager and KMS
 * endpoints, dynalite, the Lambda emulator): listen on 127.0.0.1 and port 0 unless told
 * otherwise, answer JSON, and close without waiting for idle keep-alive sockets.
 */
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import {
  createServer as createHttpServer,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { hostname } from 'node:os';
import { text } from 'node:stream/consumers';

export interface ListenOptions {
  readonly host?: string;
  readonly port?: number;
}

export interface LoopbackServer {
  readonly host: string;
  readonly port: number;
  /** `http://host:port`, or `https://localhost:port` for TLS on 127.0.0.1 (the certificate's name). */
  readonly url: string;
  close(): Promise<void>;
}

/**
 * Resolves if `port` on `host` can be listened on now (listens, then closes at once); rejects
 * with the listen error (`EADDRINUSE`, say) if not. A check ahead of work that should not run
 * when the port is taken; the port may still be taken between the check and the real listen.
 */
export const portFree = async (host: string, port: number): Promise<void> => {
  const probe = createHttpServer();
  probe.listen(port, host);
  try {
    await once(probe, 'listening');
  } finally {
    await new Promise((done) => probe.close(done));
  }
};

/** Listens with an existing server (dynalite's, say) and returns how to reach and close it. */
export const listen = async (
  server: Server,
  { host = '127.0.0.1', port = 0 }: ListenOptions = {},
  scheme: 'http' | 'https' = 'http',
): Promise<LoopbackServer> => {
  server.listen(port, host);
  // Rejects on 'error' (a port in use, say) instead of hanging.
  await once(server, 'listening');
  const bound = (server.address() as AddressInfo).port;
  const name =
    scheme === 'https' && host === '127.0.0.1'
      ? 'localhost'
      : host.includes(':')
        ? `[${host}]`
        : host;
  return {
    host,
    port: bound,
    url: `${scheme}://${name}:${bound}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections?.();
        server.close(() => resolve());
      }),
  };
};

export interface ServeOptions extends ListenOptions {
  /** Serve HTTPS with this key pair instead of plain HTTP. */
  readonly tls?: { readonly key: string | Buffer; readonly cert: string | Buffer } | undefined;
  /** Answers a request whose handler threw (a 500 in the service's own error shape). */
  readonly onError: (res: ServerResponse, error: unknown) => void;
}

/**
 * A host name or address of this machine: `localhost` and its subdomains (RFC 6761), 127.0.0.0/8,
 * `::1`, and the machine's own name (Debian's /etc/hosts maps it to 127.0.1.1). A page's
 * rebinding needs a name of its own, never one of these.
 */
const isLoopbackName = (raw: string): boolean => {
  const name = raw.replace(/\.$/, '');
  return (
    name === 'localhost' ||
    name.endsWith('.localhost') ||
    name === '::1' ||
    /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(name) ||
    name === hostname().toLowerCase()
  );
};

/** The host name of a `Host` header (`name`, `name:port`, `[v6]:port`). */
const hostName = (header: string): string =>
  (header.startsWith('[') ? header.slice(1, header.indexOf(']')) : (header.split(':')[0] ?? ''))
    .trim()
    .toLowerCase();

/**
 * Why a loopback server refuses a request from outside this machine's own programs, if it does:
 * a `Host` that is not a loopback name (a web page whose name was made to resolve to 127.0.0.1,
 * DNS rebinding, would otherwise read tokens and secrets with the developer's real credentials),
 * or an `Origin` that is not a loopback page (a web page's request). Curl, the AWS CLI and SDKs,
 * and the broker send neither.
 */
export const foreignRequest = (req: IncomingMessage): string | undefined => {
  const host = req.headers.host;
  if (host !== undefined && !isLoopbackName(hostName(host))) {
    return 'This local server answers only requests addressed to a loopback host (127.0.0.1, localhost): a guard against DNS rebinding';
  }
  const origin = req.headers.origin;
  if (origin !== undefined) {
    let name: string;
    try {
      name = new URL(origin).hostname.replace(/^\[|\]$/g, '');
    } catch {
      name = '';
    }
    if (!isLoopbackName(name)) return 'This local server does not answer web pages of other sites';
  }
  return undefined;
};

/**
 * Serves `handle` on a new loopback server. Bound to a loopback address (the default), it refuses
 * requests from web pages and those addressed to another host ({@link foreignRequest}): 403.
 */
export const serve = (
  handle: (req: IncomingMessage, res: ServerResponse) => Promise<unknown>,
  { tls, onError, ...where }: ServeOptions,
): Promise<LoopbackServer & { readonly server: Server }> => {
  const guarded = isLoopbackName((where.host ?? '127.0.0.1').toLowerCase());
  const listener = (req: IncomingMessage, res: ServerResponse) => {
    const refusal = guarded ? foreignRequest(req) : undefined;
    if (refusal) {
      req.resume();
      sendJson(res, 403, { message: refusal });
      return;
    }
    handle(req, res).catch((error: unknown) => {
      if (!res.headersSent) onError(res, error);
      else res.destroy();
    });
  };
  const server: Server = tls
    ? createHttpsServer({ key: tls.key, cert: tls.cert }, listener)
    : createHttpServer(listener);
  return listen(server, where, tls ? 'https' : 'http').then((bound) => ({ ...bound, server }));
};

/** The request body as text (UTF-8). */
export const readBody = (req: IncomingMessage): Promise<string> => text(req);

/** Answers with a JSON body. */
export const sendJson = (
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void => {
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(JSON.stringify(body));
};

/** Answers as an AWS JSON 1.1 service does (Secrets Manager, KMS, SSM), with a request id. */
export const sendAwsJson = (res: ServerResponse, status: number, body: unknown): void =>
  sendJson(res, status, body, {
    'content-type': 'application/x-amz-json-1.1',
    'x-amzn-requestid': randomUUID(),
  });
