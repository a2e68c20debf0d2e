/**
 * Rotated credentials, through the broker: a rejection of the credentials re-reads the secret
 * bypassing every cache, and the flow runs once more only if it changed. The rule for what
 * counts as such a rejection is unit-tested in credential-rotation.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { UpstreamRejectedError } from '../../../lib/errors.js';
import { caught, unexpected } from '../../support/errors.js';
import { deadline, setup, useFakeTime } from './setup.js';

describe('Rotated credentials: a rejection of the credentials re-reads the secret', () => {
  useFakeTime();

  // Forced reads of the secret are counted exactly: one per rejection is the behaviour under
  // test (none would miss a rotation, a second would be a retry loop). Issuances too (I1).

  const rejected = () =>
    new UpstreamRejectedError(
      'Open API rejected the access-token request: HTTP 401, code invalid_client',
      {
        upstreamStatus: 401,
        upstreamCode: 'invalid_client',
        upstreamMessage: 'client authentication failed',
      },
    );

  it('re-reads the secret bypassing the cache when the upstream rejects the credentials, and retries once', async () => {
    const { broker, issuer, secrets } = setup();
    secrets.stored = { clientId: 'client-1', clientSecret: 'rotated' };
    const requestToken = issuer.requestToken.bind(issuer);
    issuer.requestToken = async (conn, credentials, code, options) => {
      if (credentials.clientSecret !== 'rotated') throw rejected();
      return requestToken(conn, credentials, code, options);
    };
    const served = await broker.getToken('sandbox', { deadline: deadline(5_000) });
    expect(served.source).toBe('upstream');
    expect(secrets.forcedFetches).toBe(1);
  });

  it('does not retry when the secret did not change, and reports the rejection', async () => {
    const { broker, issuer, secrets } = setup();
    issuer.failWith = rejected();
    await expect(broker.getToken('sandbox', { deadline: deadline(5_000) })).rejects.toBeInstanceOf(
      UpstreamRejectedError,
    );
    expect(secrets.forcedFetches).toBe(1);
    expect(issuer.issued).toBe(0);
  });

  it('re-reads the secret when a strict-mode signature is refused, and retries only if it changed', async () => {
    // The simulator's answer to a v3 signature made with an old secret: an envelope, HTTP 200.
    const signatureRefused = () =>
      new UpstreamRejectedError(
        'Open API rejected the signed access-token request (Strict Access Token Mode): code 100413: signature verification failed. …',
        { upstreamCode: '100413', upstreamMessage: 'signature verification failed' },
      );
    const unchanged = setup();
    unchanged.issuer.failWith = signatureRefused();
    const error = await unchanged.broker
      .getToken('sandbox', { deadline: deadline(5_000) })
      .then(unexpected, caught);
    expect(error.upstreamCode).toBe('100413');
    expect(unchanged.secrets.forcedFetches).toBe(1);
    expect(unchanged.issuer.issued).toBe(0);

    const rotated = setup();
    rotated.secrets.stored = { clientId: 'client-1', clientSecret: 'rotated' };
    const requestToken = rotated.issuer.requestToken.bind(rotated.issuer);
    rotated.issuer.requestToken = async (conn, credentials, code, options) => {
      if (credentials.clientSecret !== 'rotated') throw signatureRefused();
      return requestToken(conn, credentials, code, options);
    };
    const served = await rotated.broker.getToken('sandbox', { deadline: deadline(5_000) });
    expect(served.source).toBe('upstream');
    expect(rotated.secrets.forcedFetches).toBe(1);
  });

  it('does not re-read the secret for a refused timestamp (a clock problem, not a secret)', async () => {
    const { broker, issuer, secrets } = setup();
    issuer.failWith = new UpstreamRejectedError(
      'Open API rejected the signed access-token request (Strict Access Token Mode): code 100412: timestamp expired or invalid. …',
      { upstreamCode: '100412', upstreamMessage: 'timestamp expired or invalid' },
    );
    await expect(broker.getToken('sandbox', { deadline: deadline(5_000) })).rejects.toBeInstanceOf(
      UpstreamRejectedError,
    );
    expect(secrets.forcedFetches).toBe(0);
  });

  it('does not re-read the secret for other rejections', async () => {
    const { broker, issuer, secrets } = setup();
    issuer.failWith = new UpstreamRejectedError('code 200001: rate limited', {
      upstreamCode: '200001',
      upstreamMessage: 'rate limited',
    });
    await expect(broker.getToken('sandbox', { deadline: deadline(5_000) })).rejects.toBeInstanceOf(
      UpstreamRejectedError,
    );
    expect(secrets.forcedFetches).toBe(0);
  });
});
