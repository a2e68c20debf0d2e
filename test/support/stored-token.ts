/**
 * A token written to a real store the way a holder writes it: the lease taken, then the token
 * put under it. For tests that need a token in the table and are about something else.
 */
import { tokenDigest } from '../../lib/broker/index.js';
import type { TokenRecord, TokenStore } from '../../lib/ports.js';

export const storeToken = async (
  store: TokenStore,
  connection: string,
  accessToken: string,
  { now = Date.now(), lifetimeMs = 3_600_000 } = {},
): Promise<TokenRecord> => {
  await store.acquireLease(connection, {
    holder: 'seed:1',
    version: 'v-seed:1',
    leaseExpiresAt: now + 10_000,
    durationMs: 10_000,
    countdown: 0,
    replacesDigest: undefined,
  });
  const record: TokenRecord = {
    connection,
    accessToken,
    tokenDigest: tokenDigest(accessToken),
    issuedAt: now,
    expiresAt: now + lifetimeMs,
  };
  if (!(await store.putToken(record, { holder: 'seed:1', version: 'v-seed:1' }))) {
    throw new Error(`the seed token of ${connection} was not written`);
  }
  return record;
};
