/**
 * `ProtocolTiming` (lib/broker/timing/protocol-timing.ts): the protocol's
 * constants as one injected value, whose relations are validated once. The oracle below states
 * each relation again, from docs/protocol.md's safety argument, apart from the code.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { TokenBroker } from '../../../lib/broker/index.js';
import { countingLeaseMs, staleMarginMs } from '../../../lib/broker/timing/bounds.js';
import { XFETCH_BETA } from '../../../lib/broker/timing/estimates.js';
import {
  cutOverRereadMs,
  DEFAULT_TIMING,
  leaseHeartbeatMs,
  MAX_COUNTDOWN,
  maxMemoryRecheckMs,
  type ProtocolTiming,
  pollBaseMs,
  pollCapMs,
  postSendWindowMs,
  protocolTiming,
  scaledTiming,
  storeReserveMs,
  validateTiming,
} from '../../../lib/broker/timing/index.js';
import {
  readReserveFloorMs,
  reuseMarginMs,
  TimingRelationError,
} from '../../../lib/broker/timing/protocol-timing.js';
import { loadConfig } from '../../../lib/config.js';
import { ConfigError } from '../../../lib/errors.js';
import { validTimings } from '../../support/timing-arbitraries.js';

/** Every relation, written out again over the independent constants: what the argument needs. */
const oracle = (t: ProtocolTiming): boolean =>
  Object.values(t).every((v) => Number.isFinite(v) && v >= 0) &&
  t.leaseMs <= 180_000 && // I1.2: a reader believes durations up to the fence's: 3 upstream timeouts
  t.minPostMs >= 1 && // I1.3
  t.skewToleranceMs < 60_000 && // I1.5: TTL_MARGIN_SECONDS
  t.countdownStepMs >= 1 && // I2.2
  t.proofMarginMs * 1000 <= 100_000 && // I2.2: the stored re-check cap
  Math.ceil((t.proofMarginMs * 1000 + t.proofMarginMs) / t.countdownStepMs) <= 401 && // I2.2
  t.proofMarginMs >= 1 && // I2.3: A2
  t.storeRoundTripMs >= 1 && // I3: the reserves
  3 * (t.countdownStepMs + t.storeRoundTripMs) <= t.leaseMs; // liveness: steps as often as beats

/** The relations between derived values, which hold by their derivation in every valid timing. */
const derivedRelationsHold = (t: ProtocolTiming): boolean =>
  reuseMarginMs(t) * 1000 >= maxMemoryRecheckMs(t) && // I2.5
  t.proofMarginMs * 1000 >= maxMemoryRecheckMs(t) && // I2.6
  storeReserveMs(t) >= 1 &&
  readReserveFloorMs(t) >= 1 && // I3
  2 * leaseHeartbeatMs(t) <= t.leaseMs &&
  t.countdownStepMs + t.storeRoundTripMs <= leaseHeartbeatMs(t) &&
  pollBaseMs(t) <= pollCapMs(t);

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

describe('ProtocolTiming: at most eight independent constants, the rest derived', () => {
  it('holds only the independent constants', () => {
    expect(Object.keys(DEFAULT_TIMING).length).toBeLessThanOrEqual(8);
    expect(Object.keys(DEFAULT_TIMING).sort()).toEqual([
      'answerMarginMs',
      'countdownStepMs',
      'defaultIssuanceMs',
      'leaseMs',
      'minPostMs',
      'proofMarginMs',
      'skewToleranceMs',
      'storeRoundTripMs',
    ]);
  });

  // Each derived value at the default timing: the figure it had as a field before issue 36, or
  // (the last two) the honest derivation's, which changed it.
  const hour = { issuedAt: 0, expiresAt: 3_600_000 };
  it.each<[string, (t: ProtocolTiming) => number, number]>([
    ['reuseMarginMs = proofMarginMs', reuseMarginMs, 100],
    ['maxMemoryRecheckMs = proofMarginMs × 1000', maxMemoryRecheckMs, 100_000],
    ['leaseHeartbeatMs = leaseMs / 3', leaseHeartbeatMs, 1_000],
    ['postSendWindowMs = leaseHeartbeatMs', postSendWindowMs, 1_000],
    ['countingLeaseMs = step + 2 round trips + half a beat', countingLeaseMs, 850],
    ['cutOverRereadMs = 4 × countdownStepMs', cutOverRereadMs, 1_000],
    ['pollBaseMs = countdownStepMs / 10', pollBaseMs, 25],
    ['pollCapMs = 2 × countdownStepMs', pollCapMs, 500],
    ['readReserveFloorMs = storeRoundTripMs', readReserveFloorMs, 50],
    ['stale-if-error margin = TTL_MARGIN_SECONDS (fixed)', () => staleMarginMs(hour), 60_000],
    ['XFetch β (an algorithm constant)', () => XFETCH_BETA, 1],
    ['storeReserveMs = 2 × (storeRoundTripMs + proofMarginMs)', storeReserveMs, 300],
  ])('derives %s: %s at the default', (_name, derive, value) => {
    expect(derive(DEFAULT_TIMING)).toBe(value);
  });

  it('refuses a derived value as a field: it follows its source and cannot be set apart from it', () => {
    for (const derived of ['leaseHeartbeatMs', 'storeReserveMs', 'maxMemoryRecheckMs']) {
      const timing = { ...DEFAULT_TIMING, [derived]: 1 } as ProtocolTiming;
      expect(() => validateTiming(timing)).toThrow(`${derived} is not a ProtocolTiming field`);
      expect(() => protocolTiming({ [derived]: 1 })).toThrow(
        expect.objectContaining({ step: 'field', relation: derived }),
      );
    }
    const longer = protocolTiming({ leaseMs: 6_000, storeRoundTripMs: 150 });
    expect([leaseHeartbeatMs(longer), storeReserveMs(longer)]).toEqual([2_000, 500]);
  });
});

describe('ProtocolTiming: the relations, validated once', () => {
  it('accepts the default timing, today’s constants, with every relation holding', () => {
    expect(validateTiming(DEFAULT_TIMING)).toBe(DEFAULT_TIMING);
    expect(oracle(DEFAULT_TIMING)).toBe(true);
    expect(MAX_COUNTDOWN).toBe(401);
  });

  it('accepts exactly the timings that satisfy every relation, for random overrides; the derived relations follow', () => {
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
        if (!error) expect(derivedRelationsHold(t)).toBe(true);
        if (error) {
          expect(error).toBeInstanceOf(TimingRelationError);
          const { step, shortBy } = error as TimingRelationError;
          if (step !== 'field') expect(shortBy).toBeGreaterThan(0);
        }
      }),
      { numRuns: 2_000 },
    );
  });

  it('names the step a failing relation serves, the independent constants, and by how much it fails', () => {
    const error = (() => {
      try {
        protocolTiming({ proofMarginMs: 101 });
      } catch (e) {
        return e as TimingRelationError;
      }
      return undefined;
    })();
    expect(error).toMatchObject({ name: 'TimingRelationError', step: 'I2.2', shortBy: 1_000 });
    expect(error?.message).toBe(
      'ProtocolTiming breaks I2.2 (the longest re-check is one a reader of the item believes): proofMarginMs * 1000 <= 100000 (maxMemoryRecheckMs; a longer recorded re-check is read as 0) fails by 1000',
    );
    expect(() => protocolTiming({ storeRoundTripMs: 800 })).toThrow(/liveness.*fails by 150$/);
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
      // The shortest step that holds any margin: a 1 ms margin's 1 s re-check in 334 steps.
      { countdownStepMs: 3, proofMarginMs: 1 },
      'I2.2',
      'countdownStepMs >= 1',
      1,
    ],
    [
      'I2.2 re-check',
      { proofMarginMs: 101 },
      { proofMarginMs: 100 },
      'I2.2',
      'proofMarginMs * 1000 <= 100000',
      1_000,
    ],
    [
      'I2.2 countdown',
      { countdownStepMs: 249 },
      { countdownStepMs: 250 },
      'I2.2',
      'ceil((proofMarginMs * 1001) / countdownStepMs) <= 401',
      2,
    ],
    ['I2.3', { proofMarginMs: 0 }, { proofMarginMs: 1 }, 'I2.3', 'proofMarginMs >= 1', 1],
    ['I3', { storeRoundTripMs: 0 }, { storeRoundTripMs: 1 }, 'I3', 'storeRoundTripMs >= 1', 1],
    [
      'steps',
      { storeRoundTripMs: 751 },
      { storeRoundTripMs: 750 },
      'liveness',
      '3 * (countdownStepMs + storeRoundTripMs) <= leaseMs',
      3,
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

  it('refuses a field that is no duration (negative, not finite, not a number), naming the field', () => {
    for (const bad of [-1, Number.POSITIVE_INFINITY, '5' as unknown as number]) {
      expect(() => protocolTiming({ answerMarginMs: bad })).toThrow(
        expect.objectContaining({ step: 'field', relation: 'answerMarginMs' }),
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
        expect(derivedRelationsHold(t)).toBe(true);
        expect(t.countdownStepMs).toBeGreaterThanOrEqual(DEFAULT_TIMING.countdownStepMs * f);
        expect(t.leaseMs).toBeLessThanOrEqual(DEFAULT_TIMING.leaseMs);
      }),
    );
    expect(scaledTiming(1)).toBe(DEFAULT_TIMING);
    const tenth = scaledTiming(0.1);
    expect(tenth).toEqual({
      countdownStepMs: 25,
      proofMarginMs: 10,
      skewToleranceMs: 1_000,
      leaseMs: 300,
      storeRoundTripMs: 5,
      minPostMs: 10,
      answerMarginMs: 50,
      defaultIssuanceMs: 30,
    });
    // The derived ones follow the scaled independent ones.
    expect([leaseHeartbeatMs(tenth), maxMemoryRecheckMs(tenth), storeReserveMs(tenth)]).toEqual([
      100, 10_000, 30,
    ]);
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
    const desynchronised = { ...DEFAULT_TIMING, leaseHeartbeatMs: 5 } as ProtocolTiming;
    expect(() => new TokenBroker(deps(desynchronised))).toThrow(/leaseHeartbeatMs is not/);
    // Accepted, and run at: the broker's timing is the one injected, not the default.
    expect(new TokenBroker(deps(scaledTiming(0.1))).timing).toEqual(scaledTiming(0.1));
  });

  it('no side of the core falls back to the default timing: only the injected one (timing/ aside)', () => {
    const root = resolve(import.meta.dirname, '../../../lib/broker');
    const files = (dir: string): string[] =>
      readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
        e.isDirectory()
          ? e.name === 'timing'
            ? []
            : files(join(dir, e.name))
          : [join(dir, e.name)],
      );
    const readers = files(root).filter((file) => {
      const code = readFileSync(file, 'utf8').replace(/\/\*[\s\S]*?\*\/|\/\/.*$/gm, '');
      return /\b(DEFAULT_TIMING|timingOf)\b/.test(code);
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
    expect(timing).toMatchObject({ storeRoundTripMs: 150 });
    // One step, two cross-region round trips, half a heartbeat of scheduling slack.
    expect(countingLeaseMs(timing)).toBe(1_050);
    expect(countingLeaseMs(DEFAULT_TIMING)).toBe(850);
  });

  it('keeps two of its round trips, each after a scheduling delay, for the token write after the POST (the item, then its copies)', () => {
    const reserve = (ms?: string) =>
      storeReserveMs(loadConfig(ms ? { ...env, BROKER_STORE_ROUND_TRIP_MS: ms } : env).timing);
    expect([reserve('150'), reserve('50'), reserve()]).toEqual([500, 300, 300]);
  });

  it('refuses a bound outside 5-500 ms, or one the timing cannot hold, naming the relation', () => {
    expect(() => loadConfig({ ...env, BROKER_STORE_ROUND_TRIP_MS: '1000' })).toThrow(ConfigError);
    // At a tenth of the timing, a 25 ms step and a 150 ms write no longer fit a 100 ms heartbeat.
    const local = {
      ...env,
      BROKER_TIMING_SCALE: '0.1',
      AWS_ENDPOINT_URL_DYNAMODB: 'http://127.0.0.1:8123',
      BROKER_STORE_ROUND_TRIP_MS: '150',
    };
    expect(() => loadConfig(local)).toThrow(
      /^BROKER_STORE_ROUND_TRIP_MS \(150\) does not fit the protocol's timing: .*3 \* \(countdownStepMs \+ storeRoundTripMs\) <= leaseMs/,
    );
  });
});
