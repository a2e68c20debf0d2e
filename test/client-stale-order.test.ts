/**
 * Adversarial review 2 (2026-11-26): the client's stale-if-error grant and answers that arrive
 * out of order. Two requests of one connection with different `minValidity` are two flights;
 * the older one's answer, arriving last, must not make the client hand out, stale, a token it
 * has already seen replaced (the newer answer carried its successor: the upstream revoked it).
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import {
  createTokenClient,
  type Operation,
  type Transport,
  TransportError,
} from '../client/src/index.js';
import { caught } from './support/errors.js';

const T0 = new Date('2026-11-24T12:00:00Z').getTime();

interface Sent {
  readonly operation: Operation;
  readonly answer: (body: unknown) => void;
  readonly fail: (error: unknown) => void;
}

const scripted = () => {
  const sent: Sent[] = [];
  const transport: Transport = {
    send: (operation) =>
      new Promise((resolve, reject) => {
        sent.push({ operation, answer: resolve, fail: reject });
      }),
  };
  return { sent, transport };
};

const body = (accessToken: string) => ({
  connection: 'sandbox',
  accessToken,
  expiresAt: new Date(Date.now() + 3_600_000).toISOString(),
  expiresIn: 3_600,
  maxAgeMs: 5_000,
  staleIfErrorSeconds: 600,
});

const flush = () => vi.advanceTimersByTimeAsync(0);

describe('Client: an older answer arriving after a newer one', () => {
  beforeEach(() => {
    vi.useFakeTimers().setSystemTime(T0);
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('I2 (stale grant): never hands out stale a token that a later-sent answer replaced', async () => {
    const { sent, transport } = scripted();
    const client = createTokenClient({ transport, onWarning: () => undefined });
    // Sent first: the broker's container answers from memory with the old token.
    const older = client.getToken('sandbox');
    await flush();
    await vi.advanceTimersByTimeAsync(10);
    // Sent second (another minValidity: another flight), answered first with the successor.
    const newer = client.getToken('sandbox', { minValidity: 120 });
    await flush();
    expect(sent).toHaveLength(2);
    sent[1]?.answer(body('at_new'));
    expect((await newer).accessToken).toBe('at_new');
    sent[0]?.answer(body('at_old'));
    expect((await older).accessToken).toBe('at_old');

    // Past the reuse time, the broker cannot be reached: the last token, stale.
    await vi.advanceTimersByTimeAsync(6_000);
    const call = client.getToken('sandbox').then((t) => t, caught);
    await flush();
    sent
      .at(-1)
      ?.fail(new TransportError('Could not reach the broker: fetch failed', 'TRANSPORT_FAILED'));
    const stale = await call;
    expect((stale as { accessToken?: string }).accessToken).not.toBe('at_old');
  });
});
