/**
 * The guarantees across rolling changes (a setting, a KMS key, a release rolled out to part of
 * the fleet), a slow Secrets Manager and a rotated secret. Each was found by the third
 * adversarial review of issue 18 (after the restructuring into observer / holder / view /
 * timing), failed on the code it reviewed (38dea12), and passes since the fix.
 */
import { describe, expect, it } from 'vitest';
import { fromItem, toItem } from '../../../../lib/adapters/dynamodb-token-item.js';
import { issueWith } from '../../../../lib/broker/issuance/issue-flow.js';
import { Deadline } from '../../../../lib/clock.js';
import { UpstreamRejectedError } from '../../../../lib/errors.js';
import type {
  ClientCredentials,
  LeaseAttempt,
  SecretSource,
  TokenIssuer,
  TokenRecord,
  TokenStore,
} from '../../../../lib/ports.js';
import { sealCode } from '../../../../lib/upstream/authorization-code.js';
import { FakeSecretSource, InMemoryTokenStore, ManualClock } from '../../../support/fakes.js';
import {
  fleetBroker,
  issuerFor,
  sandbox,
  seed,
  Upstream,
  keyless as withoutTheKey,
  wrap,
} from '../../../support/fleet-model.js';
import { Sim } from '../../../support/sim.js';
import { issuance, simAsk, simBroker, T0 } from '../setup.js';

/** Tokens live 120 s: a 60 s refresh window. */
const LIFE_S = 120;

/** A token as a container without its key reads it: all but its value. */

/** A token as a DynamoDB read hands it back: through the adapter's own item mapping. */
const throughItem = async (token: TokenRecord | undefined): Promise<TokenRecord | undefined> =>
  token && (await fromItem(await toItem(token, undefined), undefined)).token;

/**
 * `store` as the DynamoDB adapter shows it: every token a read (or a lost acquisition) returns
 * went through `toItem` then `fromItem`, the mapping `DynamoDBTokenStore` applies.
 */
const asDynamo = (store: InMemoryTokenStore): TokenStore =>
  wrap(store, {
    read: async (n) => {
      const state = await store.read(n);
      return { ...state, token: await throughItem(state.token) };
    },
    acquireLease: async (n, r): Promise<LeaseAttempt> => {
      const attempt = await store.acquireLease(n, r);
      return attempt.acquired
        ? attempt
        : {
            ...attempt,
            state: { ...attempt.state, token: await throughItem(attempt.state.token) },
          };
    },
  });

/** Two containers on one manual timeline, over `storeFor(store)` each, with their own re-checks. */
const twoContainers = (
  recheck: { a: number; b: number },
  storeFor: { a: (s: InMemoryTokenStore) => TokenStore; b: (s: InMemoryTokenStore) => TokenStore },
) => {
  const clock = new ManualClock(T0);
  const store = new InMemoryTokenStore();
  const up = new Upstream();
  const options = { window: 60, floor: 2 };
  const a = fleetBroker(storeFor.a(store), clock, up, {
    ...options,
    recheck: recheck.a,
    issuer: issuerFor(up, clock, LIFE_S),
  });
  const b = fleetBroker(storeFor.b(store), clock, up, {
    ...options,
    recheck: recheck.b,
    issuer: issuerFor(up, clock, LIFE_S),
  });
  return { clock, store, up, a, b };
};

/** Polls `b` every 50 ms while `work` runs; every answer judged the moment it is served. */
const pollWhile = async (
  clock: ManualClock,
  b: ReturnType<typeof fleetBroker>,
  up: Upstream,
  rounds: number,
) => {
  const revoked: { at: number; token: string; source: string }[] = [];
  for (let i = 0; i < rounds; i += 1) {
    await clock.advance(50);
    const answer = await b.getToken('sandbox', { deadline: Deadline.in(clock, 8_000) });
    if (up.revoked.has(answer.record.accessToken)) {
      revoked.push({
        at: clock.now() - T0,
        token: answer.record.accessToken,
        source: answer.source,
      });
    }
  }
  return revoked;
};

// Found by the third review: the item mapping dropped a recorded re-check of 0.
describe('I2: a re-check of 0 travels with the token through DynamoDB as through the fake', () => {
  // BROKER_MEMORY_RECHECK_SECONDS accepts 0 (lib/config.ts). A container with 0 writes
  // `recheckMs: 0` on its tokens; `toItem` stores N "0", but `fromItem`'s `recheckOf` keeps only
  // a positive value, so every DynamoDB reader sees *no* recorded re-check and applies its own
  // (5 s) instead of the shorter recorded one. The 0 s holder counts down max(0, none) = 1 step.
  // InMemoryTokenStore keeps the 0, so the same fleet over the fake is safe (the control).
  for (const via of ['dynamo', 'fake'] as const) {
    it(`I2 [${via}]: during a rolling change of the re-check to 0 s, the 5 s container never serves the token the 0 s container's warm-up replaced`, async () => {
      const mapped = via === 'dynamo' ? asDynamo : (s: InMemoryTokenStore) => s;
      const {
        clock,
        up,
        a: zero,
        b: five,
      } = twoContainers({ a: 0, b: 5 }, { a: mapped, b: mapped });
      // The 0 s container writes the first token (recheckMs: 0).
      const old = (await zero.getToken('sandbox', { deadline: Deadline.in(clock, 8_000) })).record
        .accessToken;
      await clock.advance(61_000); // inside the 60 s window
      expect(
        (await five.getToken('sandbox', { deadline: Deadline.in(clock, 8_000) })).record
          .accessToken,
      ).toBe(old);
      const warm = zero.warmUp(Deadline.in(clock, 30_000));
      const revoked = await pollWhile(clock, five, up, 120);
      expect((await warm).issued).toBe(1);
      expect(up.revoked.has(old)).toBe(true);
      expect(revoked, `${revoked.length} answers served a revoked token`).toEqual([]);
    });
  }
});

// Found by the third review: a key-less container issued with no countdown.
describe('I2: a container that cannot read the stored token (BROKER_KMS_KEY_ID rolled out to part of the fleet) announces its replacement', () => {
  // A container without the KMS key reads a sealed item as "no token" with `unreadable` (all but its value)
  // (dynamodb-token-item.ts: "Sealed by a deployment with a key: without one now, it cannot be
  // read (a new one is issued)"). The observer then takes the lease with countdown 0
  // (`leaseCountdown` has no token to announce a replacement on) and replaces exactly that
  // digest at once, while the containers that hold the key serve the same token from memory for
  // up to a re-check: the upstream revoked it the moment the key-less container POSTed.
  it('I2: the key-less container issues with no countdown, and a container with the key serves the token it revoked', async () => {
    const {
      clock,
      store,
      up,
      a: keyed,
      b: keyless,
    } = twoContainers({ a: 5, b: 5 }, { a: (s) => s, b: withoutTheKey });
    // A sealed token, written by a container with the key, 60 s into a 120 s life (not due).
    const t0 = seed(store, up, T0 - 30_000, LIFE_S * 1000);
    expect(
      (await keyed.getToken('sandbox', { deadline: Deadline.in(clock, 8_000) })).record.accessToken,
    ).toBe(t0.accessToken);
    // A caller of the key-less container: it finds "no token" and issues at once.
    const fromKeyless = keyless.getToken('sandbox', { deadline: Deadline.in(clock, 8_000) });
    const revoked = await pollWhile(clock, keyed, up, 60);
    await fromKeyless;
    expect(up.revoked.has(t0.accessToken)).toBe(true);
    expect(revoked, `${revoked.length} answers served a revoked token`).toEqual([]);
  });
});

// Found by the third review: the first secret read was not bounded.
describe('I3: the secret read at the start of a holder’s flow is cut to the caller’s deadline', () => {
  // withCredentialRotation awaits `secrets.getCredentials(secretId)` with no deadline (only the
  // forced re-read after a rejection is bounded). The first caller of a single flight is not
  // bounded either (only joiners are), and the holder's `stopLastCall` aborts a signal the
  // secret read does not take. A slow Secrets Manager (cold start, cache expired, throttled
  // and retried by the SDK) keeps the caller past its deadline.
  it('I3: a caller with a 1 s deadline whose container must issue is answered by its deadline even when Secrets Manager takes 3 s', async () => {
    const sim = new Sim(T0);
    const store = new InMemoryTokenStore();
    const up = new Upstream();
    const clock = sim.clock('a');
    const slowSecrets: SecretSource = {
      getCredentials: async (): Promise<ClientCredentials> => {
        await clock.sleep(3_000);
        return { clientId: 'client-1', clientSecret: 'secret-1' };
      },
    };
    const a = simBroker(store, clock, up, { secrets: slowSecrets });
    const outcome = await simAsk(sim, a, up, { budget: 1_000 });
    expect(outcome.error).toBeDefined(); // a 503 is the right answer: by the deadline
    expect(outcome.late, `answered ${outcome.late} ms after the deadline`).toBeLessThanOrEqual(0);
  });
});

// Found by the third review: the second fence found the holder posting and let the lease go.
describe('A credential rotation rejected at the token request goes on under its lease', () => {
  // docs/protocol.md: "a rejection of the credentials, at either step, re-reads the secret
  // bypassing caches and, if it changed, runs the flow once more (a new code, the fence again)".
  // With the real HeldLease the second `fence()` finds the holder in `posting` (the first
  // fence moved it there), not `fenced`, and it throws LeaseLost('Lease confirmation is
  // stale'): the rotated request is never sent under that lease; the lease is released and
  // the flow reported as "lost before the access-token request; nothing was sent" (it was).
  // credential-rotation.test.ts only checks this with a fence that always resolves.
  it('after a 401 at the token request with a rotated secret, the second token request is sent under the same lease', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const up = new Upstream();
    const secrets = new FakeSecretSource();
    secrets.stored = { clientId: 'client-1', clientSecret: 'rotated' };
    const sent: string[] = [];
    const rotating: TokenIssuer = {
      authorize: async (_c, credentials) => sealCode(`code-${credentials.clientSecret}`),
      requestToken: async (_c, credentials, _code, o) => {
        o.signal?.throwIfAborted();
        sent.push(credentials.clientSecret);
        if (credentials.clientSecret === 'secret-1') {
          throw new UpstreamRejectedError('Open API access-token answered HTTP 401', {
            upstreamStatus: 401,
          });
        }
        return up.post(clock.now(), LIFE_S);
      },
    };
    const a = fleetBroker(store, clock, up, { secrets, issuer: rotating });
    const served = await a.getToken('sandbox', { deadline: Deadline.in(clock, 8_000) });
    expect(served.record.accessToken).toBe('tok-1');
    // One lease for one issuance: the rotated request went out under the lease that was taken.
    expect(sent).toEqual(['secret-1', 'rotated']);
    expect(store.calls.acquire).toBe(1);
  });
});

// Found by the third review: a late retry landed on an older release's lease.
describe('I2: rolling deploy, a lease item written by the release before lease versions', () => {
  // dynamodb-token-store.ts renewLease: `(leaseHolder = :heldHolder AND leaseVersion =
  // :heldVersion) OR leaseVersion = :version`. The second branch names no holder. The release
  // before versions (ed00c1f^) takes a stale lease over with `SET leaseHolder, leaseExpiresAt,
  // leaseDurationMs, leaseCountdown, leaseForced`, leaving `leaseVersion` behind; its renewals
  // check `leaseHolder = :holder AND leaseExpiresAt <= :new AND leaseCountdown >= :new`. So the
  // SDK's late attempt of a new-release write whose first attempt landed (the very case the
  // OR branch is for) lands on the *old* holder's lease, and raises its countdown: a new reader
  // is told the POST is seconds away while the old holder is 3 steps from it. The in-memory
  // fake has the same OR (version only), so it reproduces the DynamoDB behaviour here; the old
  // release's writes are applied by hand, as its conditions would.
  it('I2: a new-release write retried late lands on an old-release holder’s lease and raises its countdown; a reader serves the token that holder then revokes', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const up = new Upstream();
    const t0 = seed(store, up, T0 - 1_170_000, 1_200_000); // 30 s left: in the 60 s window
    let late: Parameters<TokenStore['renewLease']> | undefined;
    // H (new release): its step to 15 is applied, both SDK attempts' answers are lost; the
    // second attempt is still in the network, and H's release does not get through.
    const lossy = wrap(store, {
      renewLease: async (n, l, t) => {
        if (t.countdown === 15 && !late) {
          await store.renewLease(n, l, t);
          late = [n, l, t];
          throw new Error('socket hang up (attempt 2 of 2)');
        }
        return store.renewLease(n, l, t);
      },
      // Its release does not get through either (the link is down): the lease stays.
      releaseLease: async () => {
        throw new Error('socket hang up');
      },
    });
    const h = issuance(lossy, clock, (c, o) => issueWith(issuerFor(up, clock), c, {} as never, o));
    await h.refresh(sandbox, t0, Deadline.in(clock, 16_000)).catch(() => undefined);
    const left = store.items.get('sandbox');
    expect(left?.lease?.countdown).toBe(15); // H's last write, version X, nobody renews it
    const x = left?.lease?.version;
    // O (old release) watches it unchanged for 3 s and takes it over, the old way: holder,
    // expiry, duration, countdown set; leaseVersion left as it was.
    await clock.advance(3_100);
    const item = store.items.get('sandbox');
    if (!item?.lease || !late) throw new Error('setup');
    store.items.set('sandbox', {
      ...item,
      lease: {
        ...item.lease,
        holder: 'old-release:1',
        expiresAt: clock.now() + 3_000,
        countdown: 15,
      },
    });
    // O counts down (old renewals: holder, expiry not back, countdown not up) to 3.
    for (let c = 14; c >= 3; c -= 1) {
      await clock.advance(250);
      const i = store.items.get('sandbox');
      if (!i?.lease) throw new Error('setup');
      store.items.set('sandbox', {
        ...i,
        lease: { ...i.lease, expiresAt: clock.now() + 3_000, countdown: c },
      });
    }
    // H's second SDK attempt of the step to 15 lands now: its version X is still in the item.
    expect(store.items.get('sandbox')?.lease?.version).toBe(x);
    await store.renewLease(...late);
    const raised = store.items.get('sandbox')?.lease;
    // A new-release reader reads now.
    const reader = fleetBroker(store, clock, up);
    const seen = await reader.getToken('sandbox', { deadline: Deadline.in(clock, 8_000) });
    expect(seen.record.accessToken).toBe(t0.accessToken);
    // O goes on from where it was: 2, 1, 0 (its conditions hold: 15 >= 2, expiry moved back
    // by H's write), then its POST.
    for (let c = 2; c >= 0; c -= 1) {
      await clock.advance(250);
      const i = store.items.get('sandbox');
      if (!i?.lease) throw new Error('setup');
      store.items.set('sandbox', {
        ...i,
        lease: { ...i.lease, expiresAt: clock.now() + 3_000, countdown: c },
      });
    }
    up.post(clock.now(), LIFE_S); // O's access-token request: t0 revoked
    const revoked = await pollWhile(clock, reader, up, 40);
    expect(raised?.holder).toBe('old-release:1');
    expect(
      revoked,
      `${revoked.length} answers served a revoked token (the late write raised the old holder's countdown from 3 to ${raised?.countdown})`,
    ).toEqual([]);
  });
});
