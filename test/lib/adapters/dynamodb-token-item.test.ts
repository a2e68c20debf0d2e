/**
 * The numbers of a DynamoDB item are checked when read (docs/protocol.md, "The item: TTL and
 * what a read believes"): a value this protocol never writes is read in the direction that keeps I1 and
 * I2, never trusted. Found in issue 24: an item with `recheckMs: 1e12` made every holder count
 * down for ever, and 9 of 9 callers were refused "Not enough time left to replace the token
 * safely".
 */
import { describe, expect, it } from 'vitest';
import { fromItem, type Item } from '../../../lib/adapters/dynamodb-token-item.js';
import { countdownFor } from '../../../lib/broker/timing/bounds.js';
import {
  ABSURD_LEASE_DURATION_MS,
  DEFAULT_TIMING,
  leaseNeedsMs,
  MAX_COUNTDOWN,
  MAX_MEMORY_RECHECK_MS,
} from '../../../lib/broker/timing/index.js';
import { MAX_LEASE_DURATION_MS } from '../../../lib/broker/timing/protocol-timing.js';
import { tokenDigest } from '../../../lib/broker/types.js';

const now = Date.now();
const DAY = 86_400_000;

/** A well-formed item holding a token issued a minute ago for a day, and `extra` attributes. */
const item = (extra: Item = {}): Item => ({
  pk: { S: 'token#sandbox' },
  connection: { S: 'sandbox' },
  accessToken: { S: 'tok' },
  tokenDigest: { S: tokenDigest('tok') },
  issuedAt: { N: String(now - 60_000) },
  expiresAt: { N: String(now - 60_000 + DAY) },
  ...extra,
});

/** The same item with a lease whose numbers are `lease`'s. */
const leased = (lease: { durationMs?: string; countdown?: string; expiresAt?: string }) =>
  item({
    leaseHolder: { S: 'other:1' },
    leaseVersion: { S: 'v1' },
    leaseExpiresAt: { N: lease.expiresAt ?? String(now + 3_000) },
    leaseDurationMs: { N: lease.durationMs ?? '3000' },
    leaseCountdown: { N: lease.countdown ?? '5' },
  });

const read = (raw: Item) => fromItem(raw, undefined);
const settings = { refreshWindowMs: 600_000, memoryRecheckMs: 5_000, timing: DEFAULT_TIMING };

describe('Function: fromItem, the numbers of an item checked when read', () => {
  describe('recheckMs (readers take the shorter, holders count down the longer)', () => {
    it('I2: reads a re-check above the 100 s cap as 0: readers re-read the store, holders count down their own, so a replacement still fits a caller’s deadline', async () => {
      const { token } = await read(item({ recheckMs: { N: '1000000000000' } }));
      expect(token?.recheckMs).toBe(0);
      const steps = countdownFor(token as NonNullable<typeof token>, settings);
      expect(steps).toBe(
        countdownFor({ ...(token as NonNullable<typeof token>), recheckMs: undefined }, settings),
      );
      expect(leaseNeedsMs(steps, DEFAULT_TIMING)).toBeLessThan(9_000);
    });

    it('I2: reads a negative re-check as 0, the shortest, never as absent (a reader’s own could be longer than the holder’s)', async () => {
      expect((await read(item({ recheckMs: { N: '-1' } }))).token?.recheckMs).toBe(0);
    });

    it('keeps a re-check at the cap, and an absent one absent (tokens of older releases)', async () => {
      const atCap = await read(item({ recheckMs: { N: String(MAX_MEMORY_RECHECK_MS) } }));
      expect(atCap.token?.recheckMs).toBe(MAX_MEMORY_RECHECK_MS);
      expect((await read(item())).token).not.toHaveProperty('recheckMs');
    });
  });

  describe('leaseCountdown (readers serve the old token for r - 1 steps)', () => {
    it('I2: reads a countdown above the longest any holder announces as 0: ended, the token suspect', async () => {
      const { lease } = await read(leased({ countdown: String(MAX_COUNTDOWN + 1) }));
      expect(lease?.countdown).toBe(0);
    });

    it('I2: reads a negative countdown as 0', async () => {
      expect((await read(leased({ countdown: '-3' }))).lease?.countdown).toBe(0);
    });

    it('I2: reads a fractional countdown as 0, and still as a lease (not as none, which a reader would serve under and nobody could take)', async () => {
      const { lease } = await read(leased({ countdown: '2.5' }));
      expect(lease).toMatchObject({ holder: 'other:1', countdown: 0 });
    });

    it('keeps a countdown in range', async () => {
      expect((await read(leased({ countdown: String(MAX_COUNTDOWN) }))).lease?.countdown).toBe(
        MAX_COUNTDOWN,
      );
    });
  });

  describe('leaseDurationMs (how long a waiter watches a version before taking it over)', () => {
    it('reads an absurd duration (above ten times the longest lease) as that: refreshes resume', async () => {
      const { lease } = await read(leased({ durationMs: '1000000000000' }));
      expect(lease?.durationMs).toBe(ABSURD_LEASE_DURATION_MS);
    });

    it('I1: reads a duration past the longest the protocol writes as written, never shorter (review of issue 24: a grace computed across a wall clock stepped back)', async () => {
      const longer = MAX_LEASE_DURATION_MS + 15_000;
      expect((await read(leased({ durationMs: String(longer) }))).lease?.durationMs).toBe(longer);
    });

    it('I1: reads a negative duration as the absurd bound, never as one that lets a live lease be taken at once', async () => {
      expect((await read(leased({ durationMs: '-1' }))).lease?.durationMs).toBe(
        ABSURD_LEASE_DURATION_MS,
      );
    });

    it('keeps a duration in range, and 3 s for leases of releases that recorded none', async () => {
      expect((await read(leased({ durationMs: '2500.5' }))).lease?.durationMs).toBe(2500.5);
      const legacy = leased({});
      delete legacy.leaseDurationMs;
      expect((await read(legacy)).lease?.durationMs).toBe(DEFAULT_TIMING.leaseMs);
    });
  });

  describe('leaseStepMs (the holder’s measured step: when readers read at a cut-over, never what they serve)', () => {
    const stepOf = async (value: string | undefined) => {
      const raw = leased({});
      if (value !== undefined) raw.leaseStepMs = { N: value };
      // Written with this lease's expiry (see LEASE_FIELDS).
      if (raw.leaseExpiresAt) raw.leaseStepAt = raw.leaseExpiresAt;
      return (await read(raw)).lease?.stepMs;
    };
    it('keeps a step in range', async () => {
      expect(await stepOf('345')).toBe(345);
      expect(await stepOf('10250')).toBe(10_250);
    });
    it('reads 0 (none announced), none, a negative or an absurd step as none announced', async () => {
      for (const value of ['0', undefined, '-5', '10251', 'NaN']) {
        expect(await stepOf(value)).toBeUndefined();
      }
    });
  });

  describe('leaseExpiresAt (the holder’s stamp: a takeover’s condition names it)', () => {
    it('reads it as stored, far ahead or far behind', async () => {
      expect((await read(leased({ expiresAt: '99999999999999' }))).lease?.expiresAt).toBe(
        99_999_999_999_999,
      );
      expect((await read(leased({ expiresAt: '-5' }))).lease?.expiresAt).toBe(-5);
    });
  });

  describe('issuedAt and expiresAt (a token is refused, never clamped into one that is served)', () => {
    const refused = async (times: { issuedAt: number; expiresAt: number }) => {
      const state = await read(
        item({
          issuedAt: { N: String(times.issuedAt) },
          expiresAt: { N: String(times.expiresAt) },
        }),
      );
      expect(state.token).toBeUndefined();
      // Still named by its digest, so that a lease replaces it.
      expect(state.unreadable?.tokenDigest).toBe(tokenDigest('tok'));
    };

    it('I2: refuses a token that expires before it was issued', async () => {
      await refused({ issuedAt: now, expiresAt: now - 1 });
    });

    it('I2: refuses a token living longer than any BROKER_MAX_TOKEN_LIFETIME_SECONDS allows (365 days)', async () => {
      await refused({ issuedAt: now - 60_000, expiresAt: now - 60_000 + 400 * DAY });
    });

    it('I2: refuses a token issued in another year ahead of the reader’s clock', async () => {
      const year3000 = Date.UTC(3000, 0, 1);
      await refused({ issuedAt: year3000, expiresAt: year3000 + DAY });
    });

    it('refuses negative stamps', async () => {
      await refused({ issuedAt: -DAY, expiresAt: now + DAY });
    });

    it('keeps a token issued a little ahead of the reader’s clock (a clock within the skew allowed)', async () => {
      const state = await read(
        item({ issuedAt: { N: String(now + 10_000) }, expiresAt: { N: String(now + DAY) } }),
      );
      expect(state.token?.issuedAt).toBe(now + 10_000);
    });
  });

  describe('whose token it is (an item under another key, or assembled from two, serves nothing)', () => {
    it('reads a well-formed item, and the same under a read copy’s key', async () => {
      expect((await read(item())).token?.accessToken).toBe('tok');
      expect((await read(item({ pk: { S: 'copy#2#token#sandbox' } }))).token?.accessToken).toBe(
        'tok',
      );
    });

    it('I2: refuses the token of an item copied whole under another connection’s key, and names it for a lease', async () => {
      for (const pk of ['token#production', 'copy#0#token#production']) {
        const state = await read(item({ pk: { S: pk } }));
        expect(state.token, pk).toBeUndefined();
        expect(state.unreadable?.tokenDigest, pk).toBe(tokenDigest('tok'));
      }
    });

    it('I2: refuses a token whose digest is not its own (reports and invalidation compare the digest)', async () => {
      const state = await read(item({ tokenDigest: { S: tokenDigest('another') } }));
      expect(state.token).toBeUndefined();
      expect(state.unreadable?.tokenDigest).toBe(tokenDigest('another'));
    });
  });

  describe('invalidatedAt (names an issuance’s cause only)', () => {
    const dropped = (invalidatedAt: string) => ({
      pk: { S: 'token#sandbox' },
      invalidatedAt: { N: invalidatedAt },
    });

    it('drops a negative stamp', async () => {
      expect(await read(dropped('-5'))).not.toHaveProperty('invalidatedAt');
    });

    it('keeps a stamp', async () => {
      expect((await read(dropped(String(now)))).invalidatedAt).toBe(now);
    });
  });
});
