/** How the client reaches the broker: Lambda invoke, or HTTP signed with SigV4. */
import { InvokeCommand, type InvokeCommandOutput, LambdaClient } from '@aws-sdk/client-lambda';
import { defaultProvider } from '@aws-sdk/credential-provider-node';
import { Hash } from '@smithy/hash-node';
import { SignatureV4 } from '@smithy/signature-v4';
import type { AwsCredentialIdentity, AwsCredentialIdentityProvider } from '@smithy/types';
import {
  ClientConfigError,
  ClientErrorCode,
  fromFunctionError,
  fromHttpError,
  TokenBrokerError,
  TransportError,
} from './errors.js';
import { arnRegion } from './failover.js';

/** One broker operation, as both transports express it. */
export type Operation =
  | { readonly action: 'getToken'; readonly connection: string; readonly minValidity?: number }
  | { readonly action: 'invalidate'; readonly connection: string; readonly accessToken: string }
  | { readonly action: 'status' }
  | { readonly action: 'warmUp' }
  | { readonly action: 'ready' };

export interface SendOptions {
  /** Aborts the request: the call's timeout and the caller's own signal. */
  readonly signal: AbortSignal;
}

/** A way to reach the broker. Failures must be {@link TokenBrokerError}s. */
export interface Transport {
  send(operation: Operation, options: SendOptions): Promise<unknown>;
  /** What messages call this broker (a failover warning); default its place in the list. */
  readonly label?: string;
}

export interface LambdaTransportOptions {
  readonly type: 'lambda';
  /** Function name or ARN, e.g. `token-broker-prod-broker`. */
  readonly functionName: string;
  /** Default: the SDK's (AWS_REGION, your profile's). */
  readonly region?: string;
  /** A Lambda endpoint other than AWS's, e.g. `http://127.0.0.1:3000` for `npm start`. */
  readonly endpoint?: string;
  /** Your own client (its credentials, retries, …); the other options are then ignored. */
  readonly client?: LambdaClient;
}

export interface HttpTransportOptions {
  readonly type: 'http';
  /** The Function URL (or API base URL), e.g. `https://abc.lambda-url.eu-west-1.on.aws`. */
  readonly url: string;
  /** Region used in the SigV4 signature; default the Function URL's, else AWS_REGION or your profile's. */
  readonly region?: string;
  /** Credentials to sign with; default the standard chain (env, profile, role, …). */
  readonly credentials?: AwsCredentialIdentity | AwsCredentialIdentityProvider;
  readonly fetch?: typeof fetch;
}

export type TransportOptions = LambdaTransportOptions | HttpTransportOptions;

export interface TransportContext {
  /** Told once when a loopback target gets the local defaults. */
  readonly warn: (message: string) => void;
}

/** Region and credentials a broker on this machine (`npm start`) gets when none are configured. */
export const LOCAL_DEFAULTS = {
  region: 'us-east-1',
  credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
} as const;

/** What to set, per transport: only the http transport takes `credentials`; lambda, a `client`. */
const WHAT_TO_SET = {
  region: () => 'set AWS_REGION (or the "region" option, --region for the CLI)',
  credentials: (transport: 'lambda' | 'http') =>
    `set AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or run where a role provides them (or pass ${
      transport === 'http' ? '"credentials"' : '"client": a LambdaClient built with them'
    }, --profile for the CLI)`,
} as const;

/** localhost, 127.0.0.0/8 and ::1: a broker on this machine, never AWS. */
export const isLoopback = (url: URL): boolean => {
  const host = url.hostname.replace(/^\[|\]$/g, '');
  return host === 'localhost' || host === '::1' || /^127(\.\d{1,3}){3}$/.test(host);
};

const parseUrl = (value: string, what: string): URL => {
  try {
    const url = new URL(value);
    if (url.protocol === 'http:' || url.protocol === 'https:') return url;
  } catch {
    // reported below
  }
  throw new ClientConfigError(`${what} must be an http:// or https:// URL, got '${value}'`);
};

/** What the SDK's own chains find: the region and credentials, or which of them are missing. */
const probe = async (client: LambdaClient) => {
  const missing: ('region' | 'credentials')[] = [];
  const causes: unknown[] = [];
  await client.config.region().catch((error: unknown) => {
    missing.push('region');
    causes.push(error);
  });
  await client.config.credentials().catch((error: unknown) => {
    missing.push('credentials');
    causes.push(error);
  });
  return { missing, cause: causes[0] };
};

const missingError = (
  missing: readonly ('region' | 'credentials')[],
  target: string,
  cause: unknown,
  transport: 'lambda' | 'http',
) =>
  new ClientConfigError(
    `No AWS ${missing.join(' and no AWS ')} to call the broker at ${target}: ${missing
      .map((what) => WHAT_TO_SET[what](transport))
      .join('; ')}`,
    { cause },
  );

const localNotice = (missing: readonly string[], target: string) =>
  `The broker at ${target} is on this machine and no AWS ${missing.join(' or ')} ${missing.length > 1 ? 'are' : 'is'} configured: using ${[
    missing.includes('region') ? `region ${LOCAL_DEFAULTS.region}` : '',
    missing.includes('credentials') ? 'placeholder credentials' : '',
  ]
    .filter(Boolean)
    .join(
      ' and ',
    )}, which the local runtime accepts. Set your own to sign with them; a non-loopback target never gets these defaults.`;

/** Turns an abort into the caller's typed error; anything else into a TransportError. */
const failure = (error: unknown, signal: AbortSignal, what: string): TokenBrokerError => {
  if (error instanceof TokenBrokerError) return error;
  if (signal.aborted) {
    const reason = signal.reason as { name?: unknown } | undefined;
    return reason?.name === 'TimeoutError'
      ? new TransportError(`${what}: no answer in time`, ClientErrorCode.TIMEOUT, {
          cause: signal.reason,
        })
      : new TransportError(`${what}: aborted`, ClientErrorCode.ABORTED, { cause: signal.reason });
  }
  // An AWS service error (Lambda's AccessDeniedException, TooManyRequestsException, …) has its
  // HTTP status: a 403 is a denial, a 429 or 5xx an outage, as over HTTP.
  const status = (error as { $metadata?: { httpStatusCode?: unknown } } | null)?.$metadata
    ?.httpStatusCode;
  return new TransportError(
    `${what}: ${(error as Error)?.message ?? String(error)}`,
    ClientErrorCode.TRANSPORT_FAILED,
    { cause: error, ...(typeof status === 'number' && status >= 400 ? { status } : {}) },
  );
};

const TRANSPORT_OPTIONS = {
  lambda: new Set(['type', 'functionName', 'region', 'endpoint', 'client']),
  http: new Set(['type', 'url', 'region', 'credentials', 'fetch']),
} as const;

export const createTransport = (
  options: TransportOptions,
  context: TransportContext = { warn: () => undefined },
): Transport => {
  const type: unknown = options?.type;
  if (type !== 'lambda' && type !== 'http') {
    throw new ClientConfigError('transport: "type" must be "lambda" or "http"');
  }
  // From plain JavaScript, a typo (`regoin`) must be refused, not ignored.
  const unknown = Object.keys(options).find((key) => !TRANSPORT_OPTIONS[type].has(key));
  if (unknown !== undefined) throw new ClientConfigError(`transport: unknown option "${unknown}"`);
  return options.type === 'lambda'
    ? lambdaTransport(options, context)
    : httpTransport(options, context);
};

const lambdaTransport = (
  options: LambdaTransportOptions,
  { warn }: TransportContext,
): Transport => {
  const endpoint =
    options.endpoint === undefined ? undefined : parseUrl(options.endpoint, 'The Lambda endpoint');
  const target = endpoint ? `${endpoint.origin} (${options.functionName})` : options.functionName;
  let ready: Promise<LambdaClient> | undefined;

  const resolveClient = async (): Promise<LambdaClient> => {
    if (options.client) return options.client;
    // A function ARN names its region: Lambda answers an ARN of another region with an error.
    const region = options.region ?? arnRegion(options.functionName);
    const settings = {
      ...(region ? { region } : {}),
      ...(options.endpoint ? { endpoint: options.endpoint } : {}),
    };
    const client = new LambdaClient(settings);
    const { missing, cause } = await probe(client);
    if (missing.length === 0) return client;
    client.destroy();
    if (!endpoint || !isLoopback(endpoint)) throw missingError(missing, target, cause, 'lambda');
    warn(localNotice(missing, endpoint.origin));
    return new LambdaClient({
      ...settings,
      ...(missing.includes('region') ? { region: LOCAL_DEFAULTS.region } : {}),
      ...(missing.includes('credentials') ? { credentials: LOCAL_DEFAULTS.credentials } : {}),
    });
  };

  return {
    async send(operation, { signal }) {
      // A failed resolution is not kept: the next call looks again (a profile may appear).
      ready ??= resolveClient().catch((error: unknown) => {
        ready = undefined;
        throw error;
      });
      let response: InvokeCommandOutput;
      try {
        const client = await ready;
        response = await client.send(
          new InvokeCommand({
            FunctionName: options.functionName,
            Payload: JSON.stringify(operation),
          }),
          { abortSignal: signal },
        );
      } catch (error) {
        throw failure(error, signal, `Could not invoke ${target}`);
      }
      const text = response.Payload ? Buffer.from(response.Payload).toString('utf8') : 'null';
      let body: Record<string, unknown>;
      try {
        body = JSON.parse(text) as Record<string, unknown>;
      } catch {
        // Not the parse error as cause: it quotes what it could not parse.
        throw new TransportError(
          'The broker answered something that is not JSON',
          ClientErrorCode.TRANSPORT_FAILED,
        );
      }
      if (response.FunctionError) {
        throw fromFunctionError(
          String(body?.errorType ?? 'Error'),
          String(body?.errorMessage ?? 'Function error'),
        );
      }
      return body;
    },
  };
};

const AWS_MESSAGE_LENGTH = 200;

/**
 * The `Message` (Function URL) or `message` (API Gateway) of an error body AWS answered in front
 * of the broker, on one line and capped. Those bodies never carry a token.
 */
const awsMessage = (json: unknown): string | undefined => {
  const body = json as { Message?: unknown; message?: unknown } | null | undefined;
  const raw = typeof body?.Message === 'string' ? body.Message : body?.message;
  if (typeof raw !== 'string') return undefined;
  const line = raw.replace(/[\p{Cc}\s]+/gu, ' ').trim();
  if (line === '') return undefined;
  return line.length > AWS_MESSAGE_LENGTH ? `${line.slice(0, AWS_MESSAGE_LENGTH)}…` : line;
};

/** `https://<id>.lambda-url.<region>.on.aws` carries its region. */
const functionUrlRegion = (url: URL): string | undefined =>
  /\.lambda-url\.([a-z0-9-]+)\.on\.aws$/.exec(url.hostname)?.[1];

const httpTransport = (options: HttpTransportOptions, { warn }: TransportContext): Transport => {
  const base = parseUrl(options.url, 'The broker URL');
  const loopback = isLoopback(base);
  if (base.protocol === 'http:' && !loopback) {
    // Function URLs and API Gateway serve HTTPS only: plain HTTP to another machine is a proxy
    // or a local runtime served on the network, where the path is the caller's to trust.
    warn(
      `The broker URL ${base.origin} is plain HTTP to another machine: each signed request, and the token it returns, crosses the network in clear. Use https:// unless that network is yours alone.`,
    );
  }
  const doFetch = options.fetch ?? globalThis.fetch;
  let ready: Promise<SignatureV4> | undefined;

  const resolveSigner = async (): Promise<SignatureV4> => {
    const missing: ('region' | 'credentials')[] = [];
    const causes: unknown[] = [];
    let region = options.region ?? functionUrlRegion(base);
    if (!region) {
      const client = new LambdaClient({});
      region = await client.config.region().catch((error: unknown) => {
        missing.push('region');
        causes.push(error);
        return LOCAL_DEFAULTS.region;
      });
      client.destroy();
    }
    let credentials = options.credentials;
    if (!credentials) {
      const chain = defaultProvider();
      credentials = await chain().then(
        () => chain,
        (error: unknown) => {
          missing.push('credentials');
          causes.push(error);
          return LOCAL_DEFAULTS.credentials;
        },
      );
    }
    if (missing.length > 0) {
      if (!loopback) throw missingError(missing, base.origin, causes[0], 'http');
      warn(localNotice(missing, base.origin));
    }
    return new SignatureV4({
      service: 'lambda',
      region,
      credentials,
      sha256: Hash.bind(null, 'sha256'),
    });
  };

  const route = (
    operation: Operation,
  ): { method: string; path: string; query: Record<string, string>; body?: string } => {
    switch (operation.action) {
      case 'getToken':
        return {
          method: 'GET',
          path: `/tokens/${encodeURIComponent(operation.connection)}`,
          query:
            operation.minValidity === undefined
              ? {}
              : { minValidity: String(operation.minValidity) },
        };
      case 'invalidate':
        return {
          method: 'POST',
          path: `/tokens/${encodeURIComponent(operation.connection)}/invalidate`,
          query: {},
          body: JSON.stringify({ accessToken: operation.accessToken }),
        };
      case 'status':
        return { method: 'GET', path: '/status', query: {} };
      case 'warmUp':
        return { method: 'POST', path: '/warm', query: {} };
      case 'ready':
        return { method: 'GET', path: '/ready', query: {} };
    }
  };

  return {
    async send(operation, { signal }) {
      const { method, path, query, body } = route(operation);
      const fullPath = `${base.pathname.replace(/\/+$/, '')}${path}`;
      const url = new URL(fullPath, base);
      for (const [name, value] of Object.entries(query)) url.searchParams.set(name, value);
      let response: Response;
      let text: string;
      try {
        ready ??= resolveSigner().catch((error: unknown) => {
          ready = undefined;
          throw error;
        });
        const signer = await ready;
        const signed = await signer.sign({
          method,
          protocol: base.protocol,
          hostname: base.hostname,
          ...(base.port ? { port: Number(base.port) } : {}),
          path: fullPath,
          query,
          headers: {
            host: base.host,
            accept: 'application/json',
            ...(body ? { 'content-type': 'application/json' } : {}),
          },
          ...(body ? { body } : {}),
        });
        response = await doFetch(url, {
          method,
          headers: signed.headers as Record<string, string>,
          signal,
          // A redirect would carry the signed headers (session token included) to wherever it points.
          redirect: 'manual',
          ...(body ? { body } : {}),
        });
        if (
          response.type === 'opaqueredirect' ||
          (response.status >= 300 && response.status < 400)
        ) {
          await response.body?.cancel().catch(() => undefined);
          throw new TransportError(
            `${base.origin} answered with a redirect (HTTP ${response.status}), which the client does not follow: its signed request goes to the broker's URL only`,
            ClientErrorCode.TRANSPORT_FAILED,
            { status: response.status },
          );
        }
        text = await response.text();
      } catch (error) {
        throw failure(error, signal, `Could not reach ${base.origin}`);
      }
      let json: unknown;
      let isJson = true;
      try {
        json = JSON.parse(text);
      } catch {
        isJson = false;
      }
      const retryAfter = Number(response.headers.get('retry-after') ?? Number.NaN);
      const retryAfterSeconds = Number.isFinite(retryAfter) ? retryAfter : undefined;
      const error = (
        json as {
          error?: { code?: unknown; message?: unknown; availableMinValidity?: unknown };
        } | null
      )?.error;
      if (!response.ok && typeof error?.code === 'string') {
        throw fromHttpError(
          error.code,
          String(error.message ?? `HTTP ${response.status}`),
          response.status,
          retryAfterSeconds,
          typeof error.availableMinValidity === 'number' ? error.availableMinValidity : undefined,
        );
      }
      // `/ready` answers 503 with its report while a connection is not ready: an answer.
      if (
        operation.action === 'ready' &&
        response.status === 503 &&
        typeof (json as { ready?: unknown } | null)?.ready === 'boolean'
      ) {
        return json as Record<string, unknown>;
      }
      if (!response.ok) {
        // Not the broker's answer: AWS's own (an IAM denial, throttling, a gateway error).
        const said = awsMessage(json);
        throw new TransportError(
          `${base.origin} answered HTTP ${response.status} without the broker's error${said ? `: ${said}` : ''}`,
          ClientErrorCode.TRANSPORT_FAILED,
          { status: response.status, retryAfterSeconds },
        );
      }
      if (!isJson) {
        throw new TransportError(
          `The broker answered HTTP ${response.status} without JSON`,
          ClientErrorCode.TRANSPORT_FAILED,
          { status: response.status },
        );
      }
      return json as Record<string, unknown>;
    },
  };
};
