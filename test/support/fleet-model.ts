/**
 * A small model of a fleet for interleaving tests of the core: an upstream that revokes every
 * earlier token on each issuance, an issuer that calls it in the real client's order, a store
 * wrapper to inject faults per container, and a broker (one container) wired to them.
 */
import { TokenBroker } from '../../lib/broker/index.js';
import { DEFAULT_TIMING, type ProtocolTiming } from '../../lib/broker/timing/index.js';
import { type BrokerLogger, tokenDigest } from '../../lib/broker/types.js';
import type { ConnectionConfig } from '../../lib/config.js';
import type {
  SecretSource,
  TokenIssuer,
  TokenRecord,
  TokenState,
  TokenStore,
} from '../../lib/ports.js';
import { sealCode } from '../../lib/upstream/authorization-code.js';
import {
  CountingMetrics,
  captureLogger,
  connection,
  FakeSecretSource,
  type InMemoryTokenStore,
} from './fakes.js';

export const sandbox = connection();

/** `store` seen through one container's link: `over` replaces the calls a fault is aimed at. */
export const wrap = (store: InMemoryTokenStore, over: Partial<TokenStore>): TokenStore => ({
  read: (n) => store.read(n),
  acquireLease: (n, r) => store.acquireLease(n, r),
  putToken: (r, l) => store.putToken(r, l),
  renewLease: (n, l, t) => store.renewLease(n, l, t),
  releaseLease: (n, l) => store.releaseLease(n, l),
  deleteIfMatches: (n, d, o) => store.deleteIfMatches(n, d, o),
  markReported: (n, d) => store.markReported(n, d),
  ...over,
});

/**
 * `store` seen by a container without the KMS key the token was sealed with: a sealed item reads
 * as "no token" with `unreadable`, all of it but the value (dynamodb-token-item.ts), in reads and
 * in the state a refused take sends back.
 */
export const keyless = (store: InMemoryTokenStore): TokenStore => {
  const hide = (state: TokenState): TokenState => {
    if (!state.token) return state;
    const { accessToken: _value, ...unreadable } = state.token;
    return { ...state, token: undefined, unreadable };
  };
  return wrap(store, {
    read: async (n) => hide(await store.read(n)),
    acquireLease: async (n, r) => {
      const attempt = await store.acquireLease(n, r);
      return attempt.acquired ? attempt : { ...attempt, state: hide(attempt.state) };
    },
  });
};

/** Upstream model: every issuance revokes every token issued before it. */
export class Upstream {
  n = 0;
  live: string | undefined;
  readonly revoked = new Set<string>();
  readonly issuedAt: number[] = [];
  post(now: number, expiresIn = 1200) {
    if (this.live) this.revoked.add(this.live);
    this.n += 1;
    this.live = `tok-${this.n}`;
    this.issuedAt.push(now);
    return { accessToken: this.live, expiresIn, upstreamTimestamp: undefined, requestedAt: now };
  }
}

/** The real client's steps: authorize, then the POST (issued when it lands); the core fences between. */
export const issuerFor = (
  up: Upstream,
  clock: { now(): number },
  expiresIn = 1200,
): TokenIssuer => ({
  authorize: async () => sealCode('code'),
  requestToken: async (_c, _cr, _code, o) => {
    o.signal?.throwIfAborted();
    return up.post(clock.now(), expiresIn);
  },
});

/** A token issued at `issuedAt` living `lifeMs`, stored as the fleet's current one. */
export const seed = (
  store: InMemoryTokenStore,
  up: Upstream,
  issuedAt: number,
  lifeMs: number,
): TokenRecord => {
  const t = up.post(issuedAt, lifeMs / 1000).accessToken;
  const r = {
    connection: 'sandbox',
    accessToken: t,
    tokenDigest: tokenDigest(t),
    issuedAt,
    expiresAt: issuedAt + lifeMs,
  };
  store.setToken(r);
  return r;
};

export interface FleetBrokerOptions {
  recheck?: number;
  window?: number;
  timeout?: number;
  floor?: number;
  issuer?: TokenIssuer;
  secrets?: SecretSource;
  conn?: ConnectionConfig;
  /** The protocol's timing (a global table's stage: `storeRoundTripMs` 150); the default's else. */
  timing?: ProtocolTiming;
  /** Where the broker logs (a model's trace); a captured logger, unread, otherwise. */
  logger?: BrokerLogger;
}

/** One container: a broker over `store`, on `clock`, issuing from `up` unless told otherwise. */
export const fleetBroker = (
  store: TokenStore,
  clock: ConstructorParameters<typeof TokenBroker>[0]['clock'] & { now(): number },
  up: Upstream,
  o: FleetBrokerOptions = {},
) => {
  const conn = o.conn ?? sandbox;
  return new TokenBroker({
    config: {
      connections: new Map([[conn.name, conn]]),
      defaultMinValiditySeconds: 1,
      refreshWindowSeconds: o.window ?? 60,
      memoryRecheckSeconds: o.recheck ?? 5,
      maxTokenLifetimeSeconds: 86_400,
      upstreamTimeoutMs: o.timeout ?? 5_000,
      invalidateMinAgeSeconds: o.floor ?? 2,
    },
    store,
    secrets: o.secrets ?? new FakeSecretSource(),
    issuer: o.issuer ?? issuerFor(up, clock),
    logger: o.logger ?? captureLogger(),
    metrics: new CountingMetrics(),
    clock,
    timing: o.timing ?? DEFAULT_TIMING,
  });
};
