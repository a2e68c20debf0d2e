/**
 * A simulator of the Open API token flow, both variants, for local runs, tests and benchmarks.
 *
 * - `/open-api/v3/oauth/authorize` + `/open-api/v3/oauth/access-token` (envelope, no secret)
 * - `/open-api/oauth/authorize` + `/open-api/oauth/access-token` (flat bodies, secret required)
 * - `/open-api/v3/ping` and `/open-api/ping`: a protected call that checks `x-access-token`
 *
 * Authorization codes are single-use and short-lived; issuing a token revokes the client's
 * earlier ones (configurable), as many APIs of this kind do. v3 token requests are checked in
 * Strict Access Token Mode per client (`X-Timestamp` within `maxSkewSeconds`, `X-Signature` an
 * HMAC-SHA256 with the client secret over the client's string-to-sign template), unless the
 * client has `signing: false`. Faults can be injected. The admin endpoints under
 * `/__simulator/` report counts only, never credential values.
 */
import { createHash, createHmac, randomBytes, randomUUID, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { readBody, sendJson, serve } from './loopback.js';

/**
 * A client's Strict Access Token Mode scheme: a template over `{params}`, `{timestamp}` and
 * `{body}` (default `{params}`) and the signature encoding (default `hex`).
 */
export interface SimulatorSigning {
  readonly stringToSign?: string;
  readonly encoding?: 'hex' | 'base64';
}

export interface SimulatorClient {
  readonly clientId: string;
  readonly clientSecret: string;
  /** v3 strict mode for this client; on with the default scheme unless `false`. */
  readonly signing?: SimulatorSigning | false;
}

export interface SimulatorSettings {
  /** Token lifetime handed out, in seconds. */
  expiresIn: number;
  /** Delay added before every answer. */
  latencyMs: number;
  /** Issuing a new token revokes the client's earlier tokens. */
  revokeOnReissue: boolean;
  /** Field of the v3 authorize `data` that carries the code. */
  codeField: string;
  /** Strict mode: largest accepted distance of `X-Timestamp` from the simulator's clock. */
  maxSkewSeconds: number;
  /** How far the simulator's clock is off (its `timestamp` fields and strict-mode check). */
  clockOffsetSeconds: number;
}

export interface SimulatorOptions extends Partial<SimulatorSettings> {
  readonly clients: readonly SimulatorClient[];
  /** Serve HTTPS with this key pair instead of plain HTTP. */
  readonly tls?: { readonly key: string | Buffer; readonly cert: string | Buffer };
  readonly host?: string;
  readonly port?: number;
}

/** A fault served instead of the normal answer, `times` times, to requests whose path matches. */
export interface Fault {
  readonly times: number;
  readonly pathIncludes?: string;
  readonly status?: number;
  readonly body?: string;
  readonly headers?: Record<string, string>;
  /** Delay before answering (a hung upstream when larger than the caller's timeout). */
  readonly delayMs?: number;
  /** Destroy the socket without answering. */
  readonly reset?: boolean;
}

export interface RecordedRequest {
  readonly method: string;
  readonly path: string;
  /** Top-level keys of the JSON body, never their values. */
  readonly bodyKeys: readonly string[];
  /** `accept`, `content-type`, `x-timestamp`; `x-signature` only as `[present]`. */
  readonly headers: Readonly<Record<string, string | undefined>>;
}

export interface SimulatorStats {
  readonly issuances: number;
  readonly issuancesByClient: Readonly<Record<string, number>>;
  readonly authorizations: number;
  readonly pings: number;
  readonly rejectedPings: number;
}

export interface Simulator {
  readonly url: string;
  readonly settings: SimulatorSettings;
  stats(): SimulatorStats;
  requests(): readonly RecordedRequest[];
  /**
   * Every credential value the simulator handed out or was given, for leak scans: secrets,
   * codes, tokens, and the signatures and strings-to-sign of strict-mode requests.
   */
  handedOut(): readonly string[];
  /** Epoch ms of every issuance, in order. */
  issuanceTimes(): readonly number[];
  /** Replaces a client's secret, as a provider's console does on rotation (strict mode kept). */
  rotateSecret(clientId: string, clientSecret: string): void;
  /** Whether the Open API would accept this token now. */
  isValid(accessToken: string): boolean;
  injectFault(fault: Fault): void;
  close(): Promise<void>;
}

interface IssuedCode {
  readonly clientId: string;
  readonly expiresAt: number;
  used: boolean;
}

interface IssuedToken {
  readonly clientId: string;
  readonly expiresAt: number;
  revoked: boolean;
}

const CODE_LIFETIME_MS = 60_000;

export const startSimulator = async (options: SimulatorOptions): Promise<Simulator> => {
  const settings: SimulatorSettings = {
    expiresIn: options.expiresIn ?? 86_400,
    latencyMs: options.latencyMs ?? 0,
    revokeOnReissue: options.revokeOnReissue ?? true,
    codeField: options.codeField ?? 'code',
    maxSkewSeconds: options.maxSkewSeconds ?? 300,
    clockOffsetSeconds: options.clockOffsetSeconds ?? 0,
  };
  /** The provider's clock, in Unix seconds. */
  const unixNow = () => Date.now() / 1000 + settings.clockOffsetSeconds;
  const clients = new Map(options.clients.map((c) => [c.clientId, c]));
  const codes = new Map<string, IssuedCode>();
  const tokens = new Map<string, IssuedToken>();
  const handedOut: string[] = options.clients.map((c) => c.clientSecret);
  const recorded: RecordedRequest[] = [];
  const faults: { fault: Fault; left: number }[] = [];
  const issuancesByClient: Record<string, number> = Object.create(null);
  const issuanceTimes: number[] = [];
  const counters = { issuances: 0, authorizations: 0, pings: 0, rejectedPings: 0 };
  const history = issuanceHistory();

  const envelope = (
    res: ServerResponse,
    code: string | number,
    message: string,
    data: unknown = null,
  ) => sendJson(res, 200, { code, message, data });

  const isValid = (accessToken: string) => {
    const token = tokens.get(accessToken);
    return token !== undefined && !token.revoked && token.expiresAt > Date.now();
  };

  const authorize = (res: ServerResponse, url: URL, v3: boolean) => {
    counters.authorizations += 1;
    const clientId = url.searchParams.get('clientId') ?? '';
    if (!clients.has(clientId)) {
      return v3
        ? envelope(res, '100001', 'invalid clientId')
        : sendJson(res, 401, { code: 'invalid_client', message: 'unknown clientId' });
    }
    const code = randomBytes(12).toString('hex');
    handedOut.push(code);
    codes.set(code, { clientId, expiresAt: Date.now() + CODE_LIFETIME_MS, used: false });
    const timestamp = Math.floor(unixNow());
    if (!v3) return sendJson(res, 200, { timestamp, code });
    return envelope(res, '000000', 'success', {
      timestamp,
      eventType: 'oauth.authorize',
      orderId: randomUUID(),
      [settings.codeField]: code,
    });
  };

  /**
   * Strict Access Token Mode, checked independently of the broker's signing code so that a
   * mistake there cannot be mirrored here. Returns the failure to answer, if any.
   */
  const strictModeFailure = (
    client: SimulatorClient,
    req: IncomingMessage,
    body: Record<string, unknown>,
    raw: string,
  ): { code: number; message: string } | undefined => {
    if (client.signing === false) return undefined;
    const timestamp = req.headers['x-timestamp'];
    const received = req.headers['x-signature'];
    if (typeof received === 'string' && received.length >= 8) handedOut.push(received);
    if (typeof timestamp !== 'string' || typeof received !== 'string') {
      return { code: 100411, message: 'signature required: send X-Timestamp and X-Signature' };
    }
    const seconds = /^\d{1,12}$/.test(timestamp) ? Number(timestamp) : Number.NaN;
    if (Number.isNaN(seconds) || Math.abs(seconds - unixNow()) > settings.maxSkewSeconds) {
      return { code: 100412, message: 'timestamp expired or invalid' };
    }
    const params = Object.keys(body)
      .sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)))
      .map((key) => {
        const value = body[key];
        return `${key}=${typeof value === 'string' ? value : JSON.stringify(value)}`;
      })
      .join('&');
    const template = client.signing?.stringToSign ?? '{params}';
    const signed = template.replace(/\{(params|timestamp|body)\}/g, (_, name: string) =>
      name === 'params' ? params : name === 'timestamp' ? timestamp : raw,
    );
    const expected = createHmac('sha256', client.clientSecret)
      .update(signed)
      .digest(client.signing?.encoding ?? 'hex');
    if (signed.length >= 12) handedOut.push(signed);
    handedOut.push(expected);
    const ok =
      Buffer.byteLength(received) === Buffer.byteLength(expected) &&
      timingSafeEqual(Buffer.from(received), Buffer.from(expected));
    return ok ? undefined : { code: 100413, message: 'signature verification failed' };
  };

  const accessToken = (
    res: ServerResponse,
    req: IncomingMessage,
    body: Record<string, unknown>,
    raw: string,
    v3: boolean,
  ) => {
    const fail = (code: string | number, message: string, status = 400) =>
      v3 ? envelope(res, code, message) : sendJson(res, status, { code, message });
    const clientId = typeof body.clientId === 'string' ? body.clientId : '';
    const client = clients.get(clientId);
    if (!client) return fail('100001', 'invalid clientId', 401);
    // The current variant must never receive the secret; the earlier one requires it.
    if (v3 && 'clientSecret' in body) return fail('100400', 'clientSecret is not accepted by v3');
    // Checked before the code is looked at, so that a refused signature does not use it up.
    const strict = v3 ? strictModeFailure(client, req, body, raw) : undefined;
    if (strict) return fail(strict.code, strict.message);
    if (!v3 && body.clientSecret !== client.clientSecret) {
      return fail('invalid_client', 'client authentication failed', 401);
    }
    const issuedCode = typeof body.code === 'string' ? codes.get(body.code) : undefined;
    if (
      !issuedCode ||
      issuedCode.used ||
      issuedCode.clientId !== clientId ||
      issuedCode.expiresAt < Date.now()
    ) {
      return fail('100002', 'invalid or expired authorization code');
    }
    issuedCode.used = true;
    if (settings.revokeOnReissue) {
      for (const token of tokens.values()) if (token.clientId === clientId) token.revoked = true;
    }
    const token = `at_${randomBytes(24).toString('base64url')}`;
    const refreshToken = `rt_${randomBytes(24).toString('base64url')}`;
    handedOut.push(token, refreshToken);
    tokens.set(token, {
      clientId,
      expiresAt: Date.now() + settings.expiresIn * 1000,
      revoked: false,
    });
    history.record(clientId, token, settings.expiresIn, settings.revokeOnReissue);
    counters.issuances += 1;
    issuanceTimes.push(Date.now());
    issuancesByClient[clientId] = (issuancesByClient[clientId] ?? 0) + 1;
    const payload = {
      accessToken: token,
      refreshToken,
      expiresIn: settings.expiresIn,
      timestamp: Math.floor(unixNow()),
    };
    return v3 ? envelope(res, '000000', 'success', payload) : sendJson(res, 200, payload);
  };

  const ping = (res: ServerResponse, req: IncomingMessage) => {
    counters.pings += 1;
    const header = req.headers['x-access-token'];
    if (typeof header !== 'string' || !isValid(header)) {
      counters.rejectedPings += 1;
      return sendJson(res, 401, { code: '100401', message: 'invalid or missing x-access-token' });
    }
    return sendJson(res, 200, { code: '000000', message: 'success', data: { pong: true } });
  };

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? '/', 'http://simulator');
    const raw = await readBody(req);
    let body: Record<string, unknown> = {};
    try {
      const parsed: unknown = raw ? JSON.parse(raw) : {};
      if (typeof parsed === 'object' && parsed !== null) body = parsed as Record<string, unknown>;
    } catch {
      body = {};
    }
    if (url.pathname.startsWith('/__simulator/')) {
      if (req.method === 'GET' && url.pathname === '/__simulator/stats') {
        return sendJson(res, 200, { ...counters, issuancesByClient, settings });
      }
      if (req.method === 'POST' && url.pathname === '/__simulator/faults') {
        simulator.injectFault(body as unknown as Fault);
        return sendJson(res, 200, { ok: true });
      }
      if (req.method === 'GET' && url.pathname.startsWith('/__simulator/tokens/')) {
        const entry = history.lookup(url.pathname.slice('/__simulator/tokens/'.length));
        return entry
          ? sendJson(res, 200, entry)
          : sendJson(res, 404, { code: 'not_found', message: 'no token with this digest' });
      }
      if (req.method === 'POST' && url.pathname === '/__simulator/settings') {
        Object.assign(settings, pickSettings(body));
        return sendJson(res, 200, { settings });
      }
      return sendJson(res, 404, { code: 'not_found', message: 'no such admin route' });
    }
    recorded.push({
      method: req.method ?? '',
      path: url.pathname,
      bodyKeys: Object.keys(body),
      headers: {
        accept: req.headers.accept,
        'content-type': req.headers['content-type'],
        'x-timestamp': header(req, 'x-timestamp'),
        'x-signature': header(req, 'x-signature') === undefined ? undefined : '[present]',
      },
    });
    if (settings.latencyMs > 0) await sleep(settings.latencyMs);
    const fault = faults.find(
      (f) => f.left > 0 && (!f.fault.pathIncludes || url.pathname.includes(f.fault.pathIncludes)),
    );
    if (fault) {
      fault.left -= 1;
      if (fault.fault.delayMs) await sleep(fault.fault.delayMs);
      if (fault.fault.reset) return req.socket.destroy();
      res.writeHead(fault.fault.status ?? 500, {
        'content-type': 'application/json',
        ...fault.fault.headers,
      });
      return res.end(fault.fault.body ?? '{"code":"999999","message":"injected fault"}');
    }
    const route = `${req.method} ${url.pathname}`;
    switch (route) {
      case 'GET /open-api/v3/oauth/authorize':
        return authorize(res, url, true);
      case 'GET /open-api/oauth/authorize':
        return authorize(res, url, false);
      case 'POST /open-api/v3/oauth/access-token':
        return accessToken(res, req, body, raw, true);
      case 'POST /open-api/oauth/access-token':
        return accessToken(res, req, body, raw, false);
      case 'GET /open-api/v3/ping':
      case 'GET /open-api/ping':
        return ping(res, req);
      default:
        return sendJson(res, 404, { code: '100404', message: 'not found' });
    }
  };

  const server = await serve(handle, {
    tls: options.tls,
    host: options.host,
    port: options.port,
    onError: (res) => sendJson(res, 500, { code: '999999', message: 'simulator error' }),
  });
  server.server.keepAliveTimeout = 1000;

  const simulator: Simulator = {
    url: server.url,
    settings,
    stats: () => ({ ...counters, issuancesByClient: { ...issuancesByClient } }),
    requests: () => [...recorded],
    handedOut: () => [...handedOut],
    issuanceTimes: () => [...issuanceTimes],
    rotateSecret: (clientId, clientSecret) => {
      const signing = clients.get(clientId)?.signing;
      clients.set(clientId, {
        clientId,
        clientSecret,
        ...(signing === undefined ? {} : { signing }),
      });
      handedOut.push(clientSecret);
    },
    isValid,
    injectFault: (fault) => faults.push({ fault, left: Math.max(1, Math.floor(fault.times)) }),
    close: server.close,
  };
  return simulator;
};

// --- Issuance history, for fault-injection checkers (chaos/) --------------------------------
// `GET /__simulator/tokens/<digest>` (SHA-256 of the token, base64url, as the broker's
// `tokenDigest`) answers `{ issuedAt, expiresAt, revokedAt }` in epoch ms, `revokedAt` null while
// the token stands. Only digests go in and times come out: never a token value. A token is
// revoked by the first later issuance to the same client made while revocation was on.

/** What the upstream knows of one token it issued, by digest. */
export interface TokenHistoryEntry {
  readonly issuedAt: number;
  readonly expiresAt: number;
  readonly revokedAt: number | null;
}

const issuanceHistory = () => {
  const entries: {
    clientId: string;
    issuedAt: number;
    expiresAt: number;
    revokes: boolean;
  }[] = [];
  const byDigest = new Map<string, number>();
  return {
    record(clientId: string, token: string, expiresInSeconds: number, revokes: boolean) {
      byDigest.set(createHash('sha256').update(token).digest('base64url'), entries.length);
      const issuedAt = Date.now();
      entries.push({ clientId, issuedAt, expiresAt: issuedAt + expiresInSeconds * 1000, revokes });
    },
    lookup(digest: string): TokenHistoryEntry | undefined {
      const index = byDigest.get(digest);
      const entry = index === undefined ? undefined : entries[index];
      if (index === undefined || !entry) return undefined;
      const revoker = entries
        .slice(index + 1)
        .find((later) => later.revokes && later.clientId === entry.clientId);
      return {
        issuedAt: entry.issuedAt,
        expiresAt: entry.expiresAt,
        revokedAt: revoker ? revoker.issuedAt : null,
      };
    },
  };
};

const pickSettings = (body: Record<string, unknown>): Partial<SimulatorSettings> => {
  const out: Partial<SimulatorSettings> = {};
  if (typeof body.expiresIn === 'number') out.expiresIn = body.expiresIn;
  if (typeof body.latencyMs === 'number') out.latencyMs = body.latencyMs;
  if (typeof body.revokeOnReissue === 'boolean') out.revokeOnReissue = body.revokeOnReissue;
  if (typeof body.codeField === 'string') out.codeField = body.codeField;
  if (typeof body.maxSkewSeconds === 'number') out.maxSkewSeconds = body.maxSkewSeconds;
  if (typeof body.clockOffsetSeconds === 'number') out.clockOffsetSeconds = body.clockOffsetSeconds;
  return out;
};

const header = (req: IncomingMessage, name: string): string | undefined => {
  const value = req.headers[name];
  return Array.isArray(value) ? value.join(', ') : value;
};

/** Demo credentials, generated anew for every local run. */
export const generateClient = (label: string): SimulatorClient => ({
  clientId: `${label}-${randomBytes(4).toString('hex')}`,
  clientSecret: randomBytes(24).toString('base64url'),
});
