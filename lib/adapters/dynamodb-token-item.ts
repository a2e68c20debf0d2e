/**
 * The DynamoDB item of one connection, both ways: a token record and a lease to attributes, and
 * attributes back to what a read shows (the table's attributes are listed in
 * `dynamodb-token-store.ts`). A malformed token counts as absent, so the next issuance replaces it.
 */
import type { AttributeValue } from '@aws-sdk/client-dynamodb';
import {
  ABSURD_LEASE_DURATION_MS,
  MAX_COUNTDOWN,
  MAX_MEMORY_RECHECK_MS,
  MAX_TOKEN_LIFETIME_MS,
  TTL_MARGIN_SECONDS,
} from '../broker/timing/index.js';
import { tokenDigest } from '../broker/types.js';
import { systemClock } from '../clock.js';
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

/** The lease's attributes: a release removes them all, the token write too. */
export const LEASE_ATTRIBUTES = [
  'leaseHolder',
  'leaseVersion',
  'leaseExpiresAt',
  'leaseDurationMs',
  'leaseCountdown',
  'leaseForced',
  'leaseStepMs',
  'leaseStepAt',
] as const;

/**
 * Every attribute of the item this release knows, but its key and the copies' bookkeeping
 * (`seq`, `epoch`, `copies`, `copiesRetiring`: `dynamodb-token-copies.ts`). The token write
 * removes every one it does not set, as the `PutItem` it was before copies replaced the whole
 * item (and kept none of the bookkeeping, which it now must).
 */
export const ITEM_ATTRIBUTES = [
  'connection',
  'accessToken',
  'tokenCiphertext',
  'tokenDataKey',
  'tokenDigest',
  'issuedAt',
  'expiresAt',
  'ttl',
  'forced',
  'recheckMs',
  ...LEASE_ATTRIBUTES,
  'reportedDigest',
  'invalidatedAt',
] as const;

/**
 * The token write as an update of the item: `SET` every attribute of `item` (from
 * {@link toItem}) but its key, `REMOVE` every other attribute {@link ITEM_ATTRIBUTES} names.
 * Names go through placeholders (`#a0`…): `connection` and `ttl` are reserved words.
 */
export const replacingWrite = (
  item: Item,
): { set: string[]; remove: string[]; names: Record<string, string>; values: Item } => {
  const names: Record<string, string> = {};
  const values: Item = {};
  const set: string[] = [];
  const remove: string[] = [];
  ITEM_ATTRIBUTES.forEach((attribute, index) => {
    names[`#a${index}`] = attribute;
    const value = item[attribute];
    if (value === undefined) {
      remove.push(`#a${index}`);
    } else {
      values[`:a${index}`] = value;
      set.push(`#a${index} = :a${index}`);
    }
  });
  return { set, remove, names, values };
};

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

/**
 * Reads an item; a malformed token counts as absent so that the next issuance replaces it.
 * @param now the reader's wall clock (epoch ms), against which a stored `issuedAt` is checked
 */
export const fromItem = async (
  item: Item | undefined,
  cipher: TokenCipher | undefined,
  now: number = systemClock.now(),
): Promise<TokenState> => {
  const stored = storedToken(item, now);
  const accessToken = await accessTokenOf(item, cipher);
  // A token whose digest is not its value's (an item assembled from two, a hand edit) is not
  // served: the digest is what reports, invalidation and the caller bounds compare.
  const token =
    stored && accessToken && tokenDigest(accessToken) === stored.tokenDigest
      ? { ...stored, accessToken }
      : undefined;
  const holder = item?.leaseHolder?.S;
  const leaseExpiresAt = Number(item?.leaseExpiresAt?.N);
  const lease: Lease | undefined =
    holder && Number.isFinite(leaseExpiresAt)
      ? {
          holder,
          // Leases written by releases before versions were recorded: holder and expiry told
          // their writes apart (see LEGACY_VERSION).
          version: item?.leaseVersion?.S ?? LEGACY_VERSION,
          expiresAt: leaseExpiresAt,
          ...leaseNumbersOf(item),
          ...(item?.leaseForced?.BOOL === true ? { forced: true } : {}),
        }
      : undefined;
  // Only names an issuance's cause: a stamp no clock writes (negative, fractional) is dropped.
  const invalidatedAt = Number(item?.invalidatedAt?.N);
  return {
    token,
    lease,
    ...(isStamp(invalidatedAt) && !token ? { invalidatedAt } : {}),
    // A report about an earlier token (the attribute outlived it) says nothing of this one.
    ...(token && item?.reportedDigest?.S === token.tokenDigest ? { reported: true } : {}),
    ...(!token ? unreadableOf(item, stored) : {}),
  };
};

/**
 * Every number of an item is checked when read (a value this protocol never writes: a bug, a
 * hand edit, a corrupted restore), and read in the direction that keeps I1 and I2 rather than
 * trusted:
 *
 * - `recheckMs`: readers apply the shorter of theirs and this, holders count down the longer.
 *   Outside [0, 100 s] it reads as 0: readers re-read the store on every request, holders count
 *   down their own. Clamping it to 100 s instead would be as safe but make every holder count
 *   down 100 s, which no caller's deadline fits: every replacement refused (issue 24).
 * - `leaseCountdown`: readers serve the old token for (r - 1) steps, a takeover goes on from r.
 *   Not an integer in [0, MAX_COUNTDOWN]: read as 0, a countdown that has ended (the token is
 *   suspect, nobody serves it, a takeover POSTs at once). Read the same by every reader.
 * - `leaseDurationMs`: how long a waiter watches a version before taking it over. Outside
 *   [0, ABSURD_LEASE_DURATION_MS] (ten times the longest the protocol writes): read as that.
 *   Never shorter than written within it: a shorter one could take a live lease over and start
 *   a second POST (I1); no holder counts on more than it wrote.
 * - `leaseExpiresAt`: read as stored. A takeover's condition names the stored value, so it
 *   cannot be rewritten on read; a stamp far ahead only delays "stale at first sight" (the
 *   lease is judged by watching), one far behind reads as a holder whose own clock says its
 *   lease is over, as the protocol already allows.
 * - `issuedAt`, `expiresAt`: not stamps, a lifetime outside (0, MAX_TOKEN_LIFETIME_MS], or an
 *   issuance more than ISSUED_AHEAD_MAX_MS ahead of the reader's clock: the token is malformed
 *   (see `storedToken`), replaced by its digest, never clamped into one that is served. Every
 *   reader of this release refuses it alike, so none serves it while it is replaced.
 * - `invalidatedAt`: names a cause only; not a stamp, it is dropped.
 * - `leaseStepMs`: when readers read at a cut-over, never what they serve. Outside
 *   (0, MAX_ANNOUNCED_STEP_MS], or with a `leaseStepAt` that is not the lease's expiry (an older
 *   release wrote the lease over ours): not announced (0 is how a write says so).
 */
const isStamp = (value: number): boolean =>
  Number.isFinite(value) && value >= 0 && value <= Number.MAX_SAFE_INTEGER;

/**
 * How far ahead of the reader's clock a token's `issuedAt` may be: far past the skew allowed
 * (10 s), so a clock off by more than the protocol allows does not set off a replacement storm,
 * yet a token stamped in another year is not served for a lifetime past its real one.
 */
const ISSUED_AHEAD_MAX_MS = 3_600_000;

/** The writer's re-check, when it recorded one (ms; see above). */
const recheckOf = (item: Item | undefined): { recheckMs?: number } => {
  if (item?.recheckMs?.N === undefined) return {};
  const recheckMs = Number(item.recheckMs.N);
  // 0 is a re-check too (BROKER_MEMORY_RECHECK_SECONDS=0): readers must apply it (I2).
  return { recheckMs: recheckMs >= 0 && recheckMs <= MAX_MEMORY_RECHECK_MS ? recheckMs : 0 };
};

/** The longest countdown step a reader believes a holder announced (ms): a step and 10 s. */
const MAX_ANNOUNCED_STEP_MS = 10_250;

/** A lease's numbers, each checked (see above). */
const leaseNumbersOf = (
  item: Item | undefined,
): Pick<Lease, 'durationMs' | 'countdown' | 'stepMs'> => {
  // Only the write that set this expiry announced it (see LEASE_FIELDS): an older release's
  // lease write over ours keeps our step.
  const stepMs =
    item?.leaseStepAt?.N !== undefined && item.leaseStepAt.N === item.leaseExpiresAt?.N
      ? Number(item.leaseStepMs?.N ?? 0)
      : 0;
  // Leases written before durations were recorded lasted 3 s.
  const durationMs = Number(item?.leaseDurationMs?.N ?? LEGACY_LEASE_MS);
  // Leases written before countdowns were recorded announced nothing: 0, a request may be out.
  const countdown = Number(item?.leaseCountdown?.N ?? 0);
  return {
    durationMs:
      durationMs >= 0 && durationMs <= ABSURD_LEASE_DURATION_MS
        ? durationMs
        : ABSURD_LEASE_DURATION_MS,
    countdown:
      Number.isInteger(countdown) && countdown >= 0 && countdown <= MAX_COUNTDOWN ? countdown : 0,
    ...(stepMs > 0 && stepMs <= MAX_ANNOUNCED_STEP_MS ? { stepMs } : {}),
  };
};

/** The connection an item's key names: `token#<c>`, or a read copy's `copy#<i>#token#<c>`. */
const connectionOfKey = (pk: string | undefined): string | undefined =>
  pk === undefined ? undefined : /^(?:copy#\d+#)?token#(.+)$/s.exec(pk)?.[1];

/** What an item says of its token, all but the value: undefined when malformed. */
const storedToken = (
  item: Item | undefined,
  now: number,
): Omit<TokenRecord, 'accessToken'> | undefined => {
  const connection = item?.connection?.S;
  // An item under another connection's key (copied there whole) holds no token of this one:
  // the connection it names is also what a sealed token is bound to (its AAD).
  const keyed = connectionOfKey(item?.pk?.S);
  if (item?.pk !== undefined && keyed !== connection) return undefined;
  const tokenDigest = item?.tokenDigest?.S;
  const issuedAt = Number(item?.issuedAt?.N);
  const expiresAt = Number(item?.expiresAt?.N);
  const lifetime = expiresAt - issuedAt;
  if (
    !connection ||
    !tokenDigest ||
    !isStamp(issuedAt) ||
    !isStamp(expiresAt) ||
    !(lifetime > 0 && lifetime <= MAX_TOKEN_LIFETIME_MS) ||
    issuedAt > now + ISSUED_AHEAD_MAX_MS
  ) {
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
