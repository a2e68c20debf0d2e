/**
 * The DynamoDB item of one connection, both ways: a token record and a lease to attributes, and
 * attributes back to what a read shows (the table's attributes are listed in
 * `dynamodb-token-store.ts`). A malformed token counts as absent, so the next issuance replaces it.
 */
import type { AttributeValue } from '@aws-sdk/client-dynamodb';
import { TTL_MARGIN_SECONDS } from '../broker/timing/index.js';
import type { Lease, TokenCipher, TokenRecord, TokenState } from '../ports.js';

export type Item = Record<string, AttributeValue>;

export const tokenKey = (connection: string): Item => ({ pk: { S: `token#${connection}` } });

export const toItem = async (
  record: TokenRecord,
  cipher: TokenCipher | undefined,
): Promise<Item> => ({
  ...tokenKey(record.connection),
  connection: { S: record.connection },
  ...(cipher ? await sealed(record, cipher) : { accessToken: { S: record.accessToken } }),
  tokenDigest: { S: record.tokenDigest },
  issuedAt: { N: String(record.issuedAt) },
  expiresAt: { N: String(record.expiresAt) },
  ttl: { N: String(ttlOf(record)) },
  ...(record.forced ? { forced: { BOOL: true } } : {}),
  ...(record.recheckMs === undefined ? {} : { recheckMs: { N: String(record.recheckMs) } }),
});

/**
 * The `ttl` of an item holding `record` (epoch seconds): DynamoDB may delete the item any time
 * after it. Clean-up only, never a guarantee (a table may have no TTL at all), so it is set where
 * a deletion can do no harm: `TTL_MARGIN_SECONDS` past the token's expiry, when no container's
 * clock (within the skew allowed) still serves it. Lease writes remove it (see `NO_TTL` in
 * `dynamodb-token-store.ts`).
 */
export const ttlOf = (record: Pick<TokenRecord, 'expiresAt'>): number =>
  Math.ceil(record.expiresAt / 1000) + TTL_MARGIN_SECONDS;

const sealed = async (record: TokenRecord, cipher: TokenCipher): Promise<Item> => {
  const { ciphertext, encryptedKey } = await cipher.seal(record.connection, record.accessToken);
  return { tokenCiphertext: { B: ciphertext }, tokenDataKey: { B: encryptedKey } };
};

/** The token of an item: decrypted when sealed, undefined when it does not authenticate. */
const accessTokenOf = async (item: Item | undefined, cipher: TokenCipher | undefined) => {
  const ciphertext = item?.tokenCiphertext?.B;
  const encryptedKey = item?.tokenDataKey?.B;
  const connection = item?.connection?.S;
  if (ciphertext && encryptedKey && connection) {
    // Sealed by a deployment with a key: without one now, it cannot be read (a new one is issued).
    return cipher ? cipher.open(connection, { ciphertext, encryptedKey }) : undefined;
  }
  // Written before a key was configured: still readable, replaced at the next issuance.
  return item?.accessToken?.S;
};

/** Reads an item; a malformed token counts as absent so that the next issuance replaces it. */
export const fromItem = async (
  item: Item | undefined,
  cipher: TokenCipher | undefined,
): Promise<TokenState> => {
  const stored = storedToken(item);
  const accessToken = await accessTokenOf(item, cipher);
  const token = stored && accessToken ? { ...stored, accessToken } : undefined;
  const holder = item?.leaseHolder?.S;
  const leaseExpiresAt = Number(item?.leaseExpiresAt?.N);
  // Leases written before durations were recorded lasted 3 s.
  const durationMs = Number(item?.leaseDurationMs?.N ?? LEGACY_LEASE_MS);
  // Leases written before countdowns were recorded announced nothing: 0, a request may be out.
  const countdown = Number(item?.leaseCountdown?.N ?? 0);
  const lease: Lease | undefined =
    holder &&
    Number.isFinite(leaseExpiresAt) &&
    Number.isFinite(durationMs) &&
    Number.isInteger(countdown)
      ? {
          holder,
          // Leases written by releases before versions were recorded: holder and expiry told
          // their writes apart (see LEGACY_VERSION).
          version: item?.leaseVersion?.S ?? LEGACY_VERSION,
          expiresAt: leaseExpiresAt,
          durationMs,
          countdown,
          ...(item?.leaseForced?.BOOL === true ? { forced: true } : {}),
        }
      : undefined;
  const invalidatedAt = Number(item?.invalidatedAt?.N);
  return {
    token,
    lease,
    ...(Number.isFinite(invalidatedAt) && !token ? { invalidatedAt } : {}),
    // A report about an earlier token (the attribute outlived it) says nothing of this one.
    ...(token && item?.reportedDigest?.S === token.tokenDigest ? { reported: true } : {}),
    ...(!token ? unreadableOf(item, stored) : {}),
  };
};

/** The writer's re-check, when it recorded one (a positive number of ms). */
const recheckOf = (item: Item | undefined): { recheckMs?: number } => {
  const recheckMs = Number(item?.recheckMs?.N);
  // 0 is a re-check too (BROKER_MEMORY_RECHECK_SECONDS=0): readers must apply it (I2).
  return item?.recheckMs?.N !== undefined && Number.isFinite(recheckMs) && recheckMs >= 0
    ? { recheckMs }
    : {};
};

/** What an item says of its token, all but the value: undefined when malformed. */
const storedToken = (item: Item | undefined): Omit<TokenRecord, 'accessToken'> | undefined => {
  const connection = item?.connection?.S;
  const tokenDigest = item?.tokenDigest?.S;
  const issuedAt = Number(item?.issuedAt?.N);
  const expiresAt = Number(item?.expiresAt?.N);
  if (!connection || !tokenDigest || !Number.isFinite(issuedAt) || !Number.isFinite(expiresAt)) {
    return undefined;
  }
  return {
    connection,
    tokenDigest,
    issuedAt,
    expiresAt,
    ...(item?.forced?.BOOL === true ? { forced: true } : {}),
    ...recheckOf(item),
  };
};

/** A token the item holds but that could not be read: all but its value. */
const unreadableOf = (
  item: Item | undefined,
  stored: Omit<TokenRecord, 'accessToken'> | undefined,
): Pick<TokenState, 'unreadable'> => {
  if (stored) return { unreadable: stored };
  // A digest alone still names the token for a lease (its times are unknown: none announced).
  const tokenDigest = item?.tokenDigest?.S;
  return tokenDigest
    ? {
        unreadable: {
          connection: item?.connection?.S ?? '',
          tokenDigest,
          issuedAt: 0,
          expiresAt: 0,
        },
      }
    : {};
};

/** The lease duration of items written before durations were recorded. */
const LEGACY_LEASE_MS = 3_000;

/**
 * The version of a lease written by a release that recorded none: conditions on it require the
 * attribute to be absent, with the holder and expiry that told such writes apart.
 */
export const LEGACY_VERSION = 'legacy';
