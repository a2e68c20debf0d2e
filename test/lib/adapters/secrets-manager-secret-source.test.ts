import { SecretsProvider } from '@aws-lambda-powertools/parameters/secrets';
import { SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SecretsManagerSecretSource } from '../../../lib/adapters/secrets-manager-secret-source.js';
import { SecretUnavailableError } from '../../../lib/errors.js';
import { secretArn } from '../../../local/secrets-manager-emulator.js';
import { applyEnv, type Stack, startStack } from '../../../local/stack.js';
import { caught, unexpected } from '../../support/errors.js';

describe('Class: SecretsManagerSecretSource (loopback Secrets Manager, real SDK client)', () => {
  let stack: Stack;
  let client: SecretsManagerClient;
  const source = (maxAge = 300) =>
    new SecretsManagerSecretSource(new SecretsProvider({ awsSdkV3Client: client }), maxAge);

  beforeAll(async () => {
    stack = await startStack();
    applyEnv(stack.env);
    // Standard retries would stretch the throttling test; the point here is the translation.
    client = new SecretsManagerClient({ maxAttempts: 1 });
  });
  afterAll(async () => {
    client.destroy();
    await stack.close();
  });

  it('reads clientId and clientSecret by name and by ARN', async () => {
    await expect(source().getCredentials('open-api/v3')).resolves.toEqual(stack.v3Client);
    await expect(source().getCredentials(secretArn('open-api/legacy'))).resolves.toEqual(
      stack.legacyClient,
    );
  });

  it('caches a secret for its max age', async () => {
    const cached = source(300);
    const before = stack.secrets.calls();
    await cached.getCredentials('open-api/v3');
    await cached.getCredentials('open-api/v3');
    expect(stack.secrets.calls() - before).toBe(1);
  });

  it('names the secret id when it does not exist', async () => {
    const error = await source().getCredentials('open-api/missing').then(unexpected, caught);
    expect(error).toBeInstanceOf(SecretUnavailableError);
    expect(error.code).toBe('SECRET_UNAVAILABLE');
    expect(error.message).toBe("Secret 'open-api/missing' does not exist");
  });

  it('serves the last secret read while Secrets Manager fails, for a bounded time only', async () => {
    let now = Date.now();
    const stale: string[] = [];
    const source = new SecretsManagerSecretSource(
      new SecretsProvider({ awsSdkV3Client: client }),
      0,
      {
        staleMaxSeconds: 60,
        onStale: (_id, reason) => stale.push(reason),
        clock: { monotonic: () => now },
      },
    );
    await source.getCredentials('open-api/v3');
    stack.secrets.failNext(2, 'ThrottlingException');
    await expect(source.getCredentials('open-api/v3')).resolves.toEqual(stack.v3Client);
    expect(stale).toEqual(['ThrottlingException']);
    now += 61_000;
    await expect(source.getCredentials('open-api/v3')).rejects.toBeInstanceOf(
      SecretUnavailableError,
    );
  });

  it('judges the stale window on the monotonic clock: a wall clock stepped back 5 s does not stretch it', async () => {
    // 62 s pass; the wall clock, stepped back 5 s meanwhile (NTP), says 57.
    let wall = Date.now();
    let monotonic = 0;
    const clock = { now: () => wall, monotonic: () => monotonic };
    const source = new SecretsManagerSecretSource(
      new SecretsProvider({ awsSdkV3Client: client }),
      0,
      { staleMaxSeconds: 60, clock },
    );
    await source.getCredentials('open-api/v3');
    wall += 62_000 - 5_000;
    monotonic += 62_000;
    stack.secrets.failNext(1, 'ThrottlingException');
    // Before: the wall clock said 57 s, inside the 60 s window, and the secret was served 2 s
    // past it.
    await expect(source.getCredentials('open-api/v3')).rejects.toBeInstanceOf(
      SecretUnavailableError,
    );
  });

  it('bypasses its cache on a forced fetch (after a rotation)', async () => {
    const cached = source(300);
    stack.secrets.setSecret(
      'open-api/rotating',
      JSON.stringify({ clientId: 'a', clientSecret: 'old-value' }),
    );
    await cached.getCredentials('open-api/rotating');
    stack.secrets.setSecret(
      'open-api/rotating',
      JSON.stringify({ clientId: 'a', clientSecret: 'new-value' }),
    );
    expect((await cached.getCredentials('open-api/rotating')).clientSecret).toBe('old-value');
    expect(
      (await cached.getCredentials('open-api/rotating', { forceFetch: true })).clientSecret,
    ).toBe('new-value');
  });

  it('says why it could not read a secret', async () => {
    stack.secrets.failNext(1, 'ThrottlingException');
    const error = await source(0).getCredentials('open-api/v3').then(unexpected, caught);
    expect(error).toBeInstanceOf(SecretUnavailableError);
    expect(error.message).toBe("Secret 'open-api/v3' could not be read (ThrottlingException)");
  });

  it.each([
    ['client-secret-not-json', 'is not JSON'],
    [JSON.stringify({ clientId: 'id-only' }), 'lacks a non-empty string "clientSecret"'],
    [
      JSON.stringify({ clientSecret: 'hidden-value', clientId: 7 }),
      'lacks a non-empty string "clientId"',
    ],
    [JSON.stringify(['hidden-value']), 'lacks a non-empty string "clientId" and "clientSecret"'],
  ])('rejects a malformed SecretString %s without echoing it', async (secretString, message) => {
    stack.secrets.setSecret('open-api/bad', secretString);
    const error = await source(0).getCredentials('open-api/bad').then(unexpected, caught);
    expect(error).toBeInstanceOf(SecretUnavailableError);
    expect(error.message).toContain(message);
    expect(error.message).not.toContain('hidden-value');
    expect(error.message).not.toContain('client-secret-not-json');
  });
});
