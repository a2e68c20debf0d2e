/** How the client reaches the broker: Lambda invoke, or HTTP signed with SigV4. */
import { InvokeCommand, type InvokeCommandOutput, LambdaClient } from '@aws-sdk/client-lambda';
import { defaultProvider } from '@aws-sdk/credential-provider-node';
import { Hash } from '@smithy/hash-node';
import { SignatureV4 } from '@smithy/signature-v4';
import type { AwsCredentialIdentity, AwsCredentialIdentityProvider } from '@smithy/types';
import { fromFunctionError, fromHttpError, TransportError } from './errors.js';

/** One broker operation, as both transports express it. */
export type Operation =
  | { readonly action: 'getToken'; readonly connection: string; readonly minValidity?: number }
  | { readonly action: 'invalidate'; readonly connection: string; readonly accessToken: string }
  | { readonly action: 'status' }
  | { readonly action: 'warmUp' };

export interface Transport {
  send(operation: Operation): Promise<unknown>;
}

export interface LambdaTransportOptions {
  readonly type: 'lambda';
  /** Function name or ARN, e.g. `token-broker-prod-broker`. */
  readonly functionName: string;
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
  /** Region used in the SigV4 signature; default AWS_REGION. */
  readonly region?: string;
  /** Credentials to sign with; default the standard chain (env, profile, role, …). */
  readonly credentials?: AwsCredentialIdentity | AwsCredentialIdentityProvider;
  readonly fetch?: typeof fetch;
}

export type TransportOptions = LambdaTransportOptions | HttpTransportOptions;

export const createTransport = (options: TransportOptions): Transport =>
  options.type === 'lambda' ? lambdaTransport(options) : httpTransport(options);

const lambdaTransport = (options: LambdaTransportOptions): Transport => {
  const client =
    options.client ??
    new LambdaClient({
      ...(options.region ? { region: options.region } : {}),
      ...(options.endpoint ? { endpoint: options.endpoint } : {}),
    });
  return {
    async send(operation) {
      let response: InvokeCommandOutput;
      try {
        response = await client.send(
          new InvokeCommand({
            FunctionName: options.functionName,
            Payload: JSON.stringify(operation),
          }),
        );
      } catch (error) {
        throw new TransportError(
          `Could not invoke ${options.functionName}: ${(error as Error).message}`,
          'TRANSPORT_FAILED',
        );
      }
      const text = response.Payload ? Buffer.from(response.Payload).toString('utf8') : 'null';
      let body: Record<string, unknown>;
      try {
        body = JSON.parse(text) as Record<string, unknown>;
      } catch {
        throw new TransportError(
          'The broker answered something that is not JSON',
          'TRANSPORT_FAILED',
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

const httpTransport = (options: HttpTransportOptions): Transport => {
  const base = new URL(options.url);
  const region =
    options.region ?? process.env.AWS_REGION ?? process.env.AWS_DEFAULT_REGION ?? 'us-east-1';
  const signer = new SignatureV4({
    service: 'lambda',
    region,
    credentials: options.credentials ?? defaultProvider(),
    sha256: Hash.bind(null, 'sha256'),
  });
  const doFetch = options.fetch ?? globalThis.fetch;

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
    }
  };

  return {
    async send(operation) {
      const { method, path, query, body } = route(operation);
      const fullPath = `${base.pathname.replace(/\/+$/, '')}${path}`;
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
      const url = new URL(fullPath, base);
      for (const [name, value] of Object.entries(query)) url.searchParams.set(name, value);
      let response: Response;
      try {
        response = await doFetch(url, {
          method,
          headers: signed.headers as Record<string, string>,
          ...(body ? { body } : {}),
        });
      } catch (error) {
        throw new TransportError(
          `Could not reach ${base.origin}: ${(error as Error).message}`,
          'TRANSPORT_FAILED',
        );
      }
      const text = await response.text();
      let json: Record<string, unknown>;
      try {
        json = JSON.parse(text) as Record<string, unknown>;
      } catch {
        throw new TransportError(
          `The broker answered HTTP ${response.status} without JSON`,
          'TRANSPORT_FAILED',
          response.status,
        );
      }
      if (!response.ok) {
        const error = (json.error ?? {}) as { code?: unknown; message?: unknown };
        const retryAfter = Number(response.headers.get('retry-after') ?? Number.NaN);
        throw fromHttpError(
          String(error.code ?? 'TRANSPORT_FAILED'),
          String(error.message ?? `HTTP ${response.status}`),
          response.status,
          Number.isFinite(retryAfter) ? retryAfter : undefined,
        );
      }
      return json;
    },
  };
};
