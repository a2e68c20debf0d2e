/**
 * What a runtime process needs of the Runtime API (`AWS_LAMBDA_RUNTIME_API`): one call per
 * connection over node:http, with no timeout (the `next` long poll may wait for minutes), and
 * errors said as the Node.js runtime says them. Used by the Managed Instances runtime
 * (managed-bootstrap.ts); bootstrap.ts keeps its own copy.
 */
import { type IncomingHttpHeaders, request } from 'node:http';

export interface Reply {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
}

/** A caller of the Runtime API at `api` (`host:port`): each call on a new connection. */
export const runtimeCall = (api: string) => {
  const endpoint = new URL(`http://${api}`);
  return (
    method: 'GET' | 'POST',
    path: string,
    body?: string,
    headers: Record<string, string> = {},
  ): Promise<Reply> =>
    new Promise((resolve, reject) => {
      const req = request(
        {
          host: endpoint.hostname,
          port: endpoint.port,
          method,
          path,
          agent: false,
          headers: {
            ...headers,
            ...(body === undefined ? {} : { 'content-type': 'application/json' }),
          },
        },
        (res) => {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (chunk: string) => {
            text += chunk;
          });
          res.on('end', () =>
            resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text }),
          );
          res.on('error', reject);
        },
      );
      req.on('error', reject);
      req.end(body);
    });
};

export const oneHeader = (value: string | string[] | undefined): string =>
  (Array.isArray(value) ? value[0] : value) ?? '';

/** How the Node.js runtime reports an error: its name as `errorType`, the stack as `trace`. */
export const describeError = (error: unknown, errorType?: string) => {
  const isError = error instanceof Error;
  return {
    errorType: errorType ?? (isError ? error.name : 'Error'),
    errorMessage: isError ? error.message : String(error),
    trace: isError ? (error.stack ?? '').split('\n') : [],
  };
};

/** The Node.js runtime's init error types for a module that cannot load. */
export const initErrorType = (error: unknown): string | undefined => {
  if (error instanceof SyntaxError) return 'Runtime.UserCodeSyntaxError';
  if ((error as { code?: unknown } | null)?.code === 'ERR_MODULE_NOT_FOUND') {
    return 'Runtime.ImportModuleError';
  }
  return undefined;
};
