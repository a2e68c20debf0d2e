/**
 * `ProtocolTiming` (lib/broker/timing/protocol-timing.ts, relations.ts): the protocol's
 * constants as one injected value, whose relations are validated once. The oracle below states
 * each relation again, from docs/protocol.md's safety argument, apart from the code.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { TokenBroker } from '../../../lib/broker/index.js';
import {
  countingLeaseMs,
  DEFAULT_TIMING,
  DURATION_FIELDS,
  MAX_COUNTDOWN,
  type ProtocolTiming,
  protocolTiming,
  scaledTiming,
  TimingRelationError,
  timingOf,
  validateTiming,
} from '../../../lib/broker/timing/index.js';
import { loadConfig } from '../../../lib/config.js';
import { ConfigError } from '../../../lib/errors.js';
import { validTimings } from '../../support/timing-arbitraries.js';

/** Every relation, written out again: what the safety argument needs of a timing. */
const oracle = (t: ProtocolTiming): boolean =>
  Object.entries(t).every(
    ([k, v]) => Number.isFinite(v) && (k === 'xfetchBeta' ? v > 0 : v >= 0),
  ) &&
  t.leaseMs <= 180_000 && // I1.2: a reader believes durations up to the fence's: 3 upstream timeouts
  t.minPostMs >= 1 && // I1.3
  t.skewToleranceMs < 60_000 && // I1.5: TTL_MARGIN_SECONDS
  t.countdownStepMs >= 1 && // I2.2
  t.maxMemoryRecheckMs <= 100_000 && // I2.2: the stored re-check cap
  Math.ceil((t.maxMemoryRecheckMs + t.proofMarginMs) / t.countdownStepMs) <= 401 && // I2.2
  t.reuseMarginMs * 1000 >= t.maxMemoryRecheckMs && // I2.5
  t.proofMarginMs * 1000 >= t.maxMemoryRecheckMs && // I2.6
  t.storeReserveMs >= 1 &&
  t.readReserveMs >= 1 && // I3
  2 * t.leaseHeartbeatMs <= t.leaseMs &&
  t.countdownStepMs + t.stepWriteAllowanceMs <= t.leaseHeartbeatMs &&
  t.maxStepWriteMs <= t.stepWriteAllowanceMs &&
  t.pollBaseMs >= 1 &&
  t.pollBaseMs <= t.pollCapMs;

/** Overrides of a few fields, each anywhere from 0 to three times its default. */
const overrides = fc
  .subarray(Object.keys(DEFAULT_TIMING) as (keyof ProtocolTiming)[], { minLength: 1 })
  .chain((fields) =>
    fc.tuple(
      ...fields.map((field) =>
        fc.integer({ min: 0, max: 3 * DEFAULT_TIMING[field] }).map((v) => [field, v] as const),
      ),
    ),
  )
  .map((entries) => Object.fromEntries(entries) as Partial<ProtocolTiming>);

describe('ProtocolTiming: the relations, validated once', () => {
  it('accepts the default timing, today’s constants, with every relation holding', () => {
    expect(validateTiming(DEFAULT_TIMING)).toBe(DEFAULT_TIMING);
    expect(oracle(DEFAULT_TIMING)).toBe(true);
    expect(MAX_COUNTDOWN).toBe(401);
  });

  it('accepts exactly the timings that satisfy every relation, for random overrides', () => {
    fc.assert(
      fc.property(overrides, (o) => {
        const t = { ...DEFAULT_TIMING, ...o };
        let error: unknown;
        try {
          protocolTiming(o);
        } catch (e) {
          error = e;
        }
        expect(error === undefined).toBe(oracle(t));
        if (error) {
          expect(error).toBeInstanceOf(TimingRelationError);
          const { step, shortBy } = error as TimingRelationError;
          if (step !== 'field') expect(shortBy).toBeGreaterThan(0);
        }
      }),
      { numRuns: 2_000 },
    );
  });

  it('names the step a failing relation serves, and by how much it fails', () => {
    const error = (() => {
      try {
        protocolTiming({ proofMarginMs: 60 });
      } catch (e) {
        return e as TimingRelationError;
      }
      return undefined;
    })();
    expect(error).toMatchObject({ name: 'TimingRelationError', step: 'I2.6', shortBy: 40 });
    expect(error?.message).toBe(
      'ProtocolTiming breaks I2.6 (the proof margin covers the drift between two containers over a re-check): proofMarginMs * 1000 >= maxMemoryRecheckMs fails by 40',
    );
    expect(() => protocolTiming({ leaseHeartbeatMs: 2_000 })).toThrow(/liveness.*fails by 1000/);
    expect(() => protocolTiming({ countdownStepMs: Number.NaN })).toThrow(
      /countdownStepMs must be a finite number/,
    );
    expect(() => protocolTiming({ stepMs: 1 } as Partial<ProtocolTiming>)).toThrow(
      /stepMs is not a ProtocolTiming field/,
    );
  });

  // Each relation of the safety argument is checked, at its very edge: the default timing with
  // one field moved just past it fails that relation, named by its step and formula, by exactly
  // that much; just at it, the timing is accepted. (Random overrides rarely reach an edge.)
  it.each<[string, Partial<ProtocolTiming>, Partial<ProtocolTiming>, string, string, number]>([
    ['I1.2', { leaseMs: 180_001 }, { leaseMs: 180_000 }, 'I1.2', 'leaseMs <= 180000', 1],
    ['I1.3', { minPostMs: 0 }, { minPostMs: 1 }, 'I1.3', 'minPostMs >= 1', 1],
    [
      'I1.5',
      { skewToleranceMs: 60_000 },
      { skewToleranceMs: 59_999 },
      'I1.5',
      'skewToleranceMs < 60000',
      1,
    ],
    [
      'I2.2 step',
      { countdownStepMs: 0 },
      { countdownStepMs: 1, maxMemoryRecheckMs: 300, proofMarginMs: 100, reuseMarginMs: 100 },
      'I2.2',
      'countdownStepMs >= 1',
      1,
    ],
    [
      'I2.2 re-check',
      { maxMemoryRecheckMs: 100_001, proofMarginMs: 101, reuseMarginMs: 101 },
      { maxMemoryRecheckMs: 100_000 },
      'I2.2',
      'maxMemoryRecheckMs <= 100000',
      1,
    ],
    [
      'I2.2 countdown',
      { countdownStepMs: 249 },
      { countdownStepMs: 250 },
      'I2.2',
      'ceil((maxMemoryRecheckMs + proofMarginMs) / countdownStepMs) <= 401',
      2,
    ],
    [
      'I2.5',
      { reuseMarginMs: 99 },
      { reuseMarginMs: 100 },
      'I2.5',
      'reuseMarginMs * 1000 >= maxMemoryRecheckMs',
      1,
    ],
    [
      'I2.6',
      { proofMarginMs: 99 },
      { proofMarginMs: 100 },
      'I2.6',
      'proofMarginMs * 1000 >= maxMemoryRecheckMs',
      1,
    ],
    [
      'I3 store',
      { storeReserveMs: 0 },
      { storeReserveMs: 1 },
      'I3',
      'storeReserveMs >= 1 and readReserveMs >= 1',
      1,
    ],
    [
      'I3 read',
      { readReserveMs: 0 },
      { readReserveMs: 1 },
      'I3',
      'storeReserveMs >= 1 and readReserveMs >= 1',
      1,
    ],
    [
      'heartbeat',
      { leaseHeartbeatMs: 1_501 },
      { leaseHeartbeatMs: 1_500 },
      'liveness',
      '2 * leaseHeartbeatMs <= leaseMs',
      2,
    ],
    [
      'steps',
      { stepWriteAllowanceMs: 751 },
      { stepWriteAllowanceMs: 750 },
      'liveness',
      'countdownStepMs + stepWriteAllowanceMs <= leaseHeartbeatMs',
      1,
    ],
    [
      'step writes',
      { maxStepWriteMs: 51 },
      { maxStepWriteMs: 50 },
      'liveness',
      'maxStepWriteMs <= stepWriteAllowanceMs',
      1,
    ],
    [
      'poll base',
      { pollBaseMs: 0 },
      { pollBaseMs: 1 },
      'liveness',
      '1 <= pollBaseMs <= pollCapMs',
      1,
    ],
    [
      'poll cap',
      { pollCapMs: 24 },
      { pollCapMs: 25 },
      'liveness',
      '1 <= pollBaseMs <= pollCapMs',
      1,
    ],
  ])('refuses a timing just past the edge of %s, and accepts one at it', (_n, past, at, step, relation, shortBy) => {
    expect(() => protocolTiming(past)).toThrow(
      expect.objectContaining({
        name: 'TimingRelationError',
        step,
        relation: expect.stringMatching(new RegExp(`^${relation.replace(/[()*+.]/g, '\\$&')}`)),
        shortBy,
      }),
    );
    expect(() => protocolTiming(at)).not.toThrow();
  });

  it('refuses a field that is no duration (negative, not finite, not a number) or a β that is not > 0, naming the field', () => {
    for (const bad of [-1, Number.POSITIVE_INFINITY, '5' as unknown as number]) {
      expect(() => protocolTiming({ cutOverRereadMs: bad })).toThrow(
        expect.objectContaining({ step: 'field', relation: 'cutOverRereadMs' }),
      );
    }
    for (const beta of [0, -1, Number.NaN]) {
      expect(() => protocolTiming({ xfetchBeta: beta })).toThrow(
        expect.objectContaining({
          step: 'field',
          relation: 'xfetchBeta',
          message: `ProtocolTiming.xfetchBeta must be a finite number > 0, not ${beta}`,
        }),
      );
    }
    expect(() => protocolTiming({ stepMs: 1 } as Partial<ProtocolTiming>)).toThrow(
      expect.objectContaining({ step: 'field', relation: 'stepMs' }),
    );
    expect(() => scaledTiming(2)).toThrow('a timing scale must be from 0.01 to 1, not 2');
  });

  it('keeps every relation at every scale from 0.01 to 1, and refuses any other scale', () => {
    fc.assert(
      fc.property(fc.double({ min: 0.01, max: 1, noNaN: true }), (f) => {
        const t = scaledTiming(f);
        expect(oracle(t)).toBe(true);
        expect(t.countdownStepMs).toBeGreaterThanOrEqual(DEFAULT_TIMING.countdownStepMs * f);
        expect(t.leaseMs).toBeLessThanOrEqual(DEFAULT_TIMING.leaseMs);
      }),
    );
    expect(scaledTiming(1)).toBe(DEFAULT_TIMING);
    // XFetch's β has no unit: a scale moves every duration and leaves it.
    expect(scaledTiming(0.1).xfetchBeta).toBe(DEFAULT_TIMING.xfetchBeta);
    expect(DURATION_FIELDS).not.toContain('xfetchBeta');
    expect(DURATION_FIELDS).toHaveLength(Object.keys(DEFAULT_TIMING).length - 1);
    // Settings that carry no timing (or none at all) run the default.
    expect(timingOf(undefined)).toBe(DEFAULT_TIMING);
    expect(timingOf({})).toBe(DEFAULT_TIMING);
    expect(scaledTiming(0.1)).toMatchObject({
      countdownStepMs: 25,
      proofMarginMs: 10,
      leaseMs: 300,
      leaseHeartbeatMs: 100,
      maxMemoryRecheckMs: 10_000,
    });
    for (const f of [0, 0.005, 1.5, Number.NaN]) expect(() => scaledTiming(f)).toThrow(RangeError);
  });

  it('draws only valid timings for the property tests that run at random ones', () => {
    fc.assert(
      fc.property(validTimings, (t) => {
        expect(oracle(t)).toBe(true);
      }),
    );
  });
});

describe('ProtocolTiming: injected', () => {
  const deps = (timing: ProtocolTiming) =>
    ({
      config: {
        connections: new Map(),
        defaultMinValiditySeconds: 60,
        refreshWindowSeconds: 600,
        memoryRecheckSeconds: 5,
        maxTokenLifetimeSeconds: 86_400,
        upstreamTimeoutMs: 5_000,
        invalidateMinAgeSeconds: 2,
      },
      timing,
    }) as unknown as ConstructorParameters<typeof TokenBroker>[0];

  it('is validated by the broker once, at construction: a timing that breaks a relation is refused', () => {
    expect(() => new TokenBroker(deps({ ...DEFAULT_TIMING, proofMarginMs: 0 }))).toThrow(
      TimingRelationError,
    );
    // Accepted, and run at: the broker's timing is the one injected, not the default.
    expect(new TokenBroker(deps(scaledTiming(0.1))).timing).toEqual(scaledTiming(0.1));
  });

  it('no side of the core reads a default constant: only the injected timing (timing/ aside)', () => {
    const root = resolve(import.meta.dirname, '../../../lib/broker');
    const files = (dir: string): string[] =>
      readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
        e.isDirectory()
          ? e.name === 'timing'
            ? []
            : files(join(dir, e.name))
          : [join(dir, e.name)],
      );
    const defaults =
      /\b(COUNTDOWN_STEP_MS|PROOF_MARGIN_MS|REUSE_MARGIN_MS|SKEW_TOLERANCE_MS|LEASE_MS|LEASE_HEARTBEAT_MS|STORE_RESERVE_MS|MIN_POST_MS|STALE_IF_ERROR_MARGIN_MS|POLL_BASE_MS|POLL_CAP_MS|MAX_STEP_WRITE_MS|READ_RESERVE_MS|CUT_OVER_REREAD_MS|ANSWER_MARGIN_MS|STEP_WRITE_ALLOWANCE_MS|XFETCH_BETA|DEFAULT_ISSUANCE_MS)\b/;
    const readers = files(root).filter((file) => {
      const code = readFileSync(file, 'utf8').replace(/\/\*[\s\S]*?\*\/|\/\/.*$/gm, '');
      return defaults.test(code);
    });
    expect(readers.map((f) => f.slice(root.length + 1))).toEqual([]);
  });
});

describe('ProtocolTiming: BROKER_TIMING_SCALE (the local runtime and tests only)', () => {
  const env = {
    BROKER_TABLE_NAME: 'tokens',
    BROKER_CONNECTIONS: JSON.stringify({
      demo: {
        variant: 'v3',
        baseUrl: 'https://api.example.com',
        secretId: 'open-api/demo',
      },
    }),
  };

  it('runs the default timing when unset', () => {
    expect(loadConfig(env).timing).toBe(DEFAULT_TIMING);
  });

  it('scales the timing, and the re-check cap with it, against a loopback store', () => {
    const local = {
      ...env,
      BROKER_TIMING_SCALE: '0.1',
      AWS_ENDPOINT_URL_DYNAMODB: 'http://127.0.0.1:8123',
    };
    const config = loadConfig(local);
    expect(config.timing).toEqual(scaledTiming(0.1));
    expect(config.memoryRecheckSeconds).toBe(5);
    expect(() => loadConfig({ ...local, BROKER_MEMORY_RECHECK_SECONDS: '11' })).toThrow(
      'BROKER_MEMORY_RECHECK_SECONDS must be a whole number from 0 to 10',
    );
    expect(loadConfig({ ...local, BROKER_TIMING_SCALE: '0.01' }).memoryRecheckSeconds).toBe(1);
  });

  it('is refused in a deployed stage (no loopback store), and outside 0.01–1', () => {
    expect(() => loadConfig({ ...env, BROKER_TIMING_SCALE: '0.1' })).toThrow(
      new ConfigError(
        'BROKER_TIMING_SCALE (0.1) is for the local runtime and tests only (a loopback AWS_ENDPOINT_URL_DYNAMODB): a deployed stage runs the protocol’s real timing',
      ),
    );
    expect(() =>
      loadConfig({
        ...env,
        BROKER_TIMING_SCALE: '0.1',
        AWS_ENDPOINT_URL_DYNAMODB: 'https://dynamodb.eu-west-1.amazonaws.com',
      }),
    ).toThrow(/local runtime and tests only/);
    expect(() => loadConfig({ ...env, BROKER_TIMING_SCALE: '2' })).toThrow(
      'BROKER_TIMING_SCALE must be a number from 0.01 to 1',
    );
    expect(loadConfig({ ...env, BROKER_TIMING_SCALE: '1' }).timing).toBe(DEFAULT_TIMING);
  });
});

describe('ProtocolTiming: BROKER_STORE_ROUND_TRIP_MS (a global table’s stages set 150)', () => {
  const env = {
    BROKER_TABLE_NAME: 'tokens',
    BROKER_CONNECTIONS: JSON.stringify({
      demo: { variant: 'v3', baseUrl: 'https://api.example.com', secretId: 'open-api/demo' },
    }),
  };

  it('is the bound a refresh budgets per countdown step, and what a counting lease lasts on', () => {
    const timing = loadConfig({ ...env, BROKER_STORE_ROUND_TRIP_MS: '150' }).timing;
    expect(timing).toMatchObject({ stepWriteAllowanceMs: 150, maxStepWriteMs: 150 });
    // One step, two cross-region round trips, half a heartbeat of scheduling slack.
    expect(countingLeaseMs(timing)).toBe(1_050);
    expect(countingLeaseMs(DEFAULT_TIMING)).toBe(850);
  });

  it('keeps three of its round trips for the token write after the POST (the item, its copies, a conflict), never less than the default', () => {
    expect(loadConfig({ ...env, BROKER_STORE_ROUND_TRIP_MS: '150' }).timing.storeReserveMs).toBe(
      450,
    );
    expect(DEFAULT_TIMING.storeReserveMs).toBe(300);
    expect(loadConfig({ ...env, BROKER_STORE_ROUND_TRIP_MS: '50' }).timing.storeReserveMs).toBe(
      300,
    );
    expect(loadConfig(env).timing.storeReserveMs).toBe(300);
  });

  it('refuses a bound outside 5-500 ms, or one the timing cannot hold, naming the relation', () => {
    expect(() => loadConfig({ ...env, BROKER_STORE_ROUND_TRIP_MS: '1000' })).toThrow(ConfigError);
    // At a tenth of the timing, a 150 ms write no longer fits between two 100 ms heartbeats.
    const local = {
      ...env,
      BROKER_TIMING_SCALE: '0.1',
      AWS_ENDPOINT_URL_DYNAMODB: 'http://127.0.0.1:8123',
      BROKER_STORE_ROUND_TRIP_MS: '150',
    };
    expect(() => loadConfig(local)).toThrow(
      /^BROKER_STORE_ROUND_TRIP_MS \(150\) does not fit the protocol's timing: .*countdownStepMs \+ stepWriteAllowanceMs <= leaseHeartbeatMs/,
    );
  });
});
