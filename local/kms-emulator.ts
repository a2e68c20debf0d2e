/**
 * A loopback endpoint that speaks the KMS JSON protocol for GenerateDataKey and Decrypt, so the
 * real `@aws-sdk/client-kms` (through AWS_ENDPOINT_URL_KMS) can be used in local runs and
 * tests. Data keys are really encrypted, under a master key that never leaves this process,
 * and bound to the encryption context, as KMS does. Signatures are not checked.
 */
import { createCipheriv, createDecipheriv, randomBytes, randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { readBody, sendAwsJson, serve } from './loopback.js';

export interface KmsEmulator {
  readonly url: string;
  readonly keyArn: string;
  /** Calls served, by operation. */
  calls(): Readonly<Record<string, number>>;
  failNext(times: number, errorType: string): void;
  /** Drops failures queued by failNext that were not used. */
  clearFailures(): void;
  close(): Promise<void>;
}

const context = (value: unknown) =>
  JSON.stringify(Object.entries((value ?? {}) as Record<string, string>).sort());

export const startKmsEmulator = async ({
  host = '127.0.0.1',
  port = 0,
} = {}): Promise<KmsEmulator> => {
  const keyId = randomUUID();
  const keyArn = `arn:aws:kms:us-east-1:000000000000:key/${keyId}`;
  const master = randomBytes(32);
  const counts: Record<string, number> = {};
  const failures: { left: number; errorType: string }[] = [];

  const reply = sendAwsJson;
  const error = (res: ServerResponse, type: string, message: string) =>
    reply(res, 400, { __type: type, message });

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const raw = await readBody(req);
    const operation = String(req.headers['x-amz-target'] ?? '').replace('TrentService.', '');
    counts[operation] = (counts[operation] ?? 0) + 1;
    const failure = failures.find((f) => f.left > 0);
    if (failure) {
      failure.left -= 1;
      return error(res, failure.errorType, 'Injected failure');
    }
    const body = JSON.parse(raw || '{}') as Record<string, unknown>;
    if (operation === 'GenerateDataKey') {
      if (body.KeyId !== keyArn && body.KeyId !== keyId)
        return error(res, 'NotFoundException', 'Key not found');
      const plaintext = randomBytes(32);
      const iv = randomBytes(12);
      const cipher = createCipheriv('aes-256-gcm', master, iv);
      cipher.setAAD(Buffer.from(context(body.EncryptionContext)));
      const sealed = Buffer.concat([
        iv,
        cipher.update(plaintext),
        cipher.final(),
        cipher.getAuthTag(),
      ]);
      return reply(res, 200, {
        KeyId: keyArn,
        Plaintext: plaintext.toString('base64'),
        CiphertextBlob: sealed.toString('base64'),
      });
    }
    if (operation === 'Decrypt') {
      try {
        const sealed = Buffer.from(String(body.CiphertextBlob), 'base64');
        const decipher = createDecipheriv('aes-256-gcm', master, sealed.subarray(0, 12));
        decipher.setAAD(Buffer.from(context(body.EncryptionContext)));
        decipher.setAuthTag(sealed.subarray(sealed.length - 16));
        const plaintext = Buffer.concat([
          decipher.update(sealed.subarray(12, sealed.length - 16)),
          decipher.final(),
        ]);
        return reply(res, 200, {
          KeyId: keyArn,
          Plaintext: plaintext.toString('base64'),
          EncryptionAlgorithm: 'SYMMETRIC_DEFAULT',
        });
      } catch {
        return error(
          res,
          'InvalidCiphertextException',
          'The ciphertext or its encryption context is invalid',
        );
      }
    }
    return error(res, 'UnsupportedOperationException', `Unsupported operation ${operation}`);
  };

  const server = await serve(handle, {
    host,
    port,
    onError: (res) => error(res, 'KMSInternalException', 'emulator error'),
  });
  return {
    url: server.url,
    keyArn,
    calls: () => ({ ...counts }),
    clearFailures: () => {
      failures.length = 0;
    },
    failNext: (times, errorType) => failures.push({ left: times, errorType }),
    close: server.close,
  };
};
