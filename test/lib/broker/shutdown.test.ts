/**
 * An execution environment shutting down (Lambda's SIGTERM, issue 17): a lease it holds is given
 * up before its POST and released, so that no other container waits it out; a POST already out
 * is left to its answer (I1: it may still land).
 */
import { describe, expect, it, vi } from 'vitest';
import { deadline, setup, storeToken, useFakeTime } from './setup.js';

/** Waits that move only when the test moves the fake clock. */
const timerSleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

describe('Shutdown: leases held by an environment that goes away', () => {
  useFakeTime();

  it('I1: gives up a lease still counting down, releases it, and sends no access-token request', async () => {
    const { broker, store, issuer } = setup({ window: 600, sleep: timerSleep });
    storeToken(store, 299_000);
    await broker.getToken('sandbox', { deadline: deadline(5_000) });
    // The refresh ahead holds the lease and counts down (21 steps, about 5 s).
    await vi.advanceTimersByTimeAsync(1_000);
    expect(store.items.get('sandbox')?.lease).toBeDefined();
    const down = broker.shutdown(deadline(400));
    await vi.advanceTimersByTimeAsync(400);
    await down;
    expect(store.items.get('sandbox')?.lease).toBeUndefined();
    expect(store.token('sandbox')?.accessToken).toBe('current');
    expect(issuer.issued).toBe(0);
  });

  it('I1: leaves a POST already out to its answer: the lease it confirmed is not released early', async () => {
    const { broker, store, issuer } = setup({ window: 600, sleep: timerSleep });
    storeToken(store, 299_000);
    let answer: (() => void) | undefined;
    const requestToken = issuer.requestToken.bind(issuer);
    issuer.requestToken = async (...args) => {
      await new Promise<void>((resolve) => {
        answer = resolve;
      });
      return requestToken(...args);
    };
    await broker.getToken('sandbox', { deadline: deadline(5_000) });
    await vi.advanceTimersByTimeAsync(6_000); // past the countdown: the POST is out
    expect(answer).toBeDefined();
    const confirmed = store.items.get('sandbox')?.lease;
    expect(confirmed?.countdown).toBe(0);
    const down = broker.shutdown(deadline(400));
    await vi.advanceTimersByTimeAsync(400);
    await down;
    expect(store.items.get('sandbox')?.lease).toEqual(confirmed);
    answer?.();
    await broker.idle();
    expect(issuer.issued).toBe(1);
    expect(store.token('sandbox')?.accessToken).toBe('token-1');
  });
});
