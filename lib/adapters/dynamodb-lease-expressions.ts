/**
 * The expressions of the lease writes of {@link DynamoDBTokenStore}: which attributes a lease
 * write sets, how TTL is kept off an item under a lease, and the condition "exactly this write
 * of the lease".
 */
import type { Lease, LeaseRef, LeaseTerms } from '../ports.js';
import { type Item, LEGACY_VERSION } from './dynamodb-token-item.js';

/**
 * Every write of a lease removes the item's TTL: DynamoDB may delete an item any time after its
 * `ttl`, and the `ttl` of a token that expired overnight is past when a lease comes to replace
 * it. Deleted under the lease, the item would let another container find nothing, take a fresh
 * lease and issue, and the first POST land after it and revoke that token (I1, I2). No clock is
 * compared: the item has no `ttl` for as long as it holds a lease, whatever the lease's length or
 * the clocks' skew. The token write restores it (`toItem`); a release leaves it absent, so the
 * item of a failed flow stays until its next token (clean-up, never correctness: ADR 0014).
 */
export const NO_TTL = 'REMOVE #ttl';
export const TTL_NAME = { '#ttl': 'ttl' };

/**
 * The attributes every write of a lease sets: a new version, its times, its countdown, its step.
 * The step names the expiry it was written with (`leaseStepAt`): a release that knows neither
 * (0.1.0) keeps both when it writes a lease of its own, and readers then announce none.
 */
export const LEASE_FIELDS =
  'leaseVersion = :version, leaseExpiresAt = :leaseExpiresAt, leaseDurationMs = :durationMs, leaseCountdown = :countdown, leaseStepMs = :stepMs, leaseStepAt = :leaseExpiresAt';

export const terms = (next: LeaseTerms): Item => ({
  ':version': { S: next.version },
  ':leaseExpiresAt': { N: String(next.leaseExpiresAt) },
  ':durationMs': { N: String(next.durationMs) },
  ':countdown': { N: String(next.countdown) },
  // Set by every write, 0 when none is announced: a value left by an earlier write would speak
  // for a step it did not measure.
  ':stepMs': { N: String(Math.max(0, Math.round(next.stepMs ?? 0))) },
});

/**
 * A condition that the item holds exactly the lease write `lease` names. The holder, and for a
 * takeover the expiry, are compared too: a release that recorded no version leaves the attribute
 * behind when it writes a lease of its own, and tells its writes apart by expiry alone. A lease
 * of such a release reads as `LEGACY_VERSION`: the attribute must then be absent.
 */
export const exactly = (
  lease: LeaseRef & Partial<Pick<Lease, 'expiresAt'>>,
  prefix: string,
): { condition: string; values: Item } => {
  const legacy = lease.version === LEGACY_VERSION;
  const clauses = [
    `leaseHolder = ${prefix}Holder`,
    legacy ? 'attribute_not_exists(leaseVersion)' : `leaseVersion = ${prefix}Version`,
    ...(lease.expiresAt === undefined ? [] : [`leaseExpiresAt = ${prefix}ExpiresAt`]),
  ];
  return {
    condition: clauses.join(' AND '),
    values: {
      [`${prefix}Holder`]: { S: lease.holder },
      ...(legacy ? {} : { [`${prefix}Version`]: { S: lease.version } }),
      ...(lease.expiresAt === undefined
        ? {}
        : { [`${prefix}ExpiresAt`]: { N: String(lease.expiresAt) } }),
    },
  };
};
