/**
 * A loopback endpoint that speaks the Secrets Manager JSON protocol for GetSecretValue, so the
 * real `@aws-sdk/client-secrets-manager` (through AWS_ENDPOINT_URL_SECRETS_MANAGER) can be used
 * in local runs and tests. Signatures are not checked.
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { readBody, sendAwsJson, serve } from './loopback.js';

export interface SecretsEmulator {
  readonly url: string;
  setSecret(name: string, secretString: string): void;
  deleteSecret(name: string): void;
  /** GetSecretValue calls served so far. */
  calls(): number;
  /** Answers the next `times` calls with this AWS error (e.g. ThrottlingException). */
  failNext(times: number, errorType: string, status?: number): void;
  /** Drops failures queued by failNext that were not used. */
  clearFailures(): void;
  close(): Promise<void>;
}

const REGION = 'us-east-1';
const ACCOUNT = '000000000000';

export const secretArn = (name: string) =>
  `arn:aws:secretsmanager:${REGION}:${ACCOUNT}:secret:${name}`;

export const startSecretsEmulator = async (
  initial: Record<string, string> = {},
  { host = '127.0.0.1', port = 0 } = {},
): Promise<SecretsEmulator> => {
  const secrets = new Map(Object.entries(initial));
  const failures: { left: number; errorType: string; status: number }[] = [];
  let calls = 0;

  const reply = sendAwsJson;
  const error = (res: ServerResponse, status: number, type: string, message: string) =>
    reply(res, status, { __type: `com.amazonaws.secretsmanager#${type}`, message });

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const raw = await readBody(req);
    const target = String(req.headers['x-amz-target'] ?? '');
    if (target !== 'secretsmanager.GetSecretValue') {
      return error(res, 400, 'InvalidRequestException', `Unsupported operation ${target}`);
    }
    calls += 1;
    const failure = failures.find((f) => f.left > 0);
    if (failure) {
      failure.left -= 1;
      return error(res, failure.status, failure.errorType, 'Injected failure');
    }
    let secretId = '';
    try {
      secretId = String(JSON.parse(raw).SecretId ?? '');
    } catch {
      return error(res, 400, 'InvalidRequestException', 'Body is not JSON');
    }
    const name = secretId.startsWith('arn:') ? (secretId.split(':secret:')[1] ?? '') : secretId;
    const value = secrets.get(name);
    if (value === undefined) {
      return error(
        res,
        400,
        'ResourceNotFoundException',
        "Secrets Manager can't find the specified secret.",
      );
    }
    return reply(res, 200, {
      ARN: secretArn(name),
      Name: name,
      SecretString: value,
      VersionId: randomUUID(),
      VersionStages: ['AWSCURRENT'],
      CreatedDate: Math.floor(Date.now() / 1000),
    });
  };

  const server = await serve(handle, {
    host,
    port,
    onError: (res) => error(res, 500, 'InternalServiceError', 'emulator error'),
  });
  return {
    url: server.url,
    setSecret: (name, secretString) => secrets.set(name, secretString),
    deleteSecret: (name) => secrets.delete(name),
    calls: () => calls,
    clearFailures: () => {
      failures.length = 0;
    },
    failNext: (times, errorType, status = 400) => failures.push({ left: times, errorType, status }),
    close: server.close,
  };
};
