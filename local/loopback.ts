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

/** Serves `handle` on a new loopback server. */
export const serve = (
  handle: (req: IncomingMessage, res: ServerResponse) => Promise<unknown>,
  { tls, onError, ...where }: ServeOptions,
): Promise<LoopbackServer & { readonly server: Server }> => {
  const listener = (req: IncomingMessage, res: ServerResponse) => {
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
