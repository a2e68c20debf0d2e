/**
 * A loopback endpoint that speaks the Systems Manager JSON protocol for GetParameter, so the
 * real `@aws-sdk/client-ssm` (through AWS_ENDPOINT_URL_SSM) reads connections from a parameter
 * in tests. Signatures are not checked; SecureString values are returned as stored.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { readBody, sendAwsJson, serve } from './loopback.js';

export interface SsmEmulator {
  readonly url: string;
  setParameter(name: string, value: string, type?: 'String' | 'SecureString'): void;
  /** GetParameter calls served so far. */
  calls(): number;
  close(): Promise<void>;
}

export const startSsmEmulator = async ({
  host = '127.0.0.1',
  port = 0,
} = {}): Promise<SsmEmulator> => {
  const parameters = new Map<string, { value: string; type: string }>();
  let calls = 0;
  const reply = sendAwsJson;
  const error = (res: ServerResponse, type: string, message: string) =>
    reply(res, 400, { __type: type, message });

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const raw = await readBody(req);
    const target = String(req.headers['x-amz-target'] ?? '');
    if (target !== 'AmazonSSM.GetParameter') {
      return error(res, 'ValidationException', `Unsupported operation ${target}`);
    }
    calls += 1;
    let name = '';
    try {
      name = String(JSON.parse(raw).Name ?? '');
    } catch {
      return error(res, 'ValidationException', 'Body is not JSON');
    }
    const parameter = parameters.get(name);
    if (!parameter) return error(res, 'ParameterNotFound', '');
    return reply(res, 200, {
      Parameter: {
        Name: name,
        Type: parameter.type,
        Value: parameter.value,
        Version: 1,
        ARN: `arn:aws:ssm:us-east-1:000000000000:parameter${name.startsWith('/') ? '' : '/'}${name}`,
        DataType: 'text',
      },
    });
  };

  const server = await serve(handle, {
    host,
    port,
    onError: (res) => error(res, 'InternalServerError', 'emulator error'),
  });
  return {
    url: server.url,
    setParameter: (name, value, type = 'SecureString') => parameters.set(name, { value, type }),
    calls: () => calls,
    close: server.close,
  };
};
