/**
 * The client's stale-if-error grant when answers for one connection arrive out of order, found
 * by adversarial reviews (2026-11-26; each test failed before its fix). Two requests of one
 * connection with different `minValidity` are two flights:
 * - an older answer arriving after a newer one must not make the client hand out, stale, a token
 *   it has already seen replaced (the newer answer carried its successor);
 * - and the order in which they were sent says nothing of which token is newer: a broker may
 *   answer a request sent earlier with the successor (it waited for the cut-over, or the request
 *   failed over to another region's broker after a timeout), and one sent later with the token
 *   it replaced (read before the cut-over, delivered after).
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { createTokenClient, TransportError } from '../client/src/index.js';
import { caught } from './support/errors.js';
import { scripted } from './support/scripted-transport.js';

const T0 = new Date('2026-11-24T12:00:00Z').getTime();

const body = (accessToken: string) => ({
  connection: 'sandbox',
  accessToken,
  expiresAt: new Date(Date.now() + 3_600_000).toISOString(),
  expiresIn: 3_600,
  maxAgeMs: 5_000,
  staleIfErrorSeconds: 600,
});

const down = () =>
  new TransportError('Could not reach the broker: fetch failed', 'TRANSPORT_FAILED');

const flush = () => vi.advanceTimersByTimeAsync(0);

/** Past the reuse time, no broker answers: what the client hands out (a token or an error). */
const inOutage = async (
  client: ReturnType<typeof createTokenClient>,
  brokers: ReturnType<typeof scripted>[],
) => {
  await vi.advanceTimersByTimeAsync(6_000);
  const before = brokers.map((b) => b.sent.length);
  const call = client.getToken('sandbox').then((t) => t, caught);
  for (let round = 0; round < brokers.length; round += 1) {
    await flush();
    brokers.forEach((b, i) => {
      if (b.sent.length > (before[i] ?? 0)) b.sent.at(-1)?.fail(down());
      before[i] = b.sent.length;
    });
  }
  return (await call) as { accessToken?: string; stale?: true };
};

describe('Client: overlapping requests and the stale grant (review 3)', () => {
  beforeEach(() => {
    vi.useFakeTimers().setSystemTime(T0);
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it("I2 (stale grant): the successor answering the earlier-sent request, last, ends the old token's grant", async () => {
    const { sent, transport } = scripted();
    const client = createTokenClient({ transport, onWarning: () => undefined });
    // Sent first, with a minValidity the old token cannot give: the broker waits for the successor.
    const forcing = client.getToken('sandbox', { minValidity: 3_000 });
    await flush();
    await vi.advanceTimersByTimeAsync(10);
    // Sent second, answered at once by a container whose read still proves the old token.
    const plain = client.getToken('sandbox');
    await flush();
    expect(sent).toHaveLength(2);
    sent[1]?.answer(body('at_old'));
    expect((await plain).accessToken).toBe('at_old');
    sent[0]?.answer(body('at_new'));
    expect((await forcing).accessToken).toBe('at_new');

    const stale = await inOutage(client, [{ sent, transport }]);
    expect(stale.accessToken).not.toBe('at_old');
  });

  it('I2 (stale grant): the old token answering the later-sent request, last, gets no grant over its successor', async () => {
    const { sent, transport } = scripted();
    const client = createTokenClient({ transport, onWarning: () => undefined });
    const forcing = client.getToken('sandbox', { minValidity: 3_000 });
    await flush();
    await vi.advanceTimersByTimeAsync(10);
    const plain = client.getToken('sandbox');
    await flush();
    // The successor arrives first; the old token, read before the cut-over, is delivered after.
    sent[0]?.answer(body('at_new'));
    expect((await forcing).accessToken).toBe('at_new');
    sent[1]?.answer(body('at_old'));
    expect((await plain).accessToken).toBe('at_old');

    const stale = await inOutage(client, [{ sent, transport }]);
    expect(stale.accessToken).not.toBe('at_old');
  });

  it('I2 (stale grant): a request that failed over to the second broker brings the successor; an overlapping one, the old token', async () => {
    const a = scripted();
    const b = scripted();
    const client = createTokenClient({
      brokers: [a.transport, b.transport],
      timeoutMs: 10_000,
      onWarning: () => undefined,
    });
    // Sent first: region A's broker hangs for its share (5 s), then B is asked.
    const first = client.getToken('sandbox');
    await flush();
    await vi.advanceTimersByTimeAsync(1_000);
    // Sent second (another minValidity), to A too; A still hangs, so it fails over to B as well.
    const second = client.getToken('sandbox', { minValidity: 120, timeoutMs: 2_000 });
    await flush();
    expect(a.sent).toHaveLength(2);
    await vi.advanceTimersByTimeAsync(1_000);
    // The second request's share of A ran out first: B answers it with the token of then.
    expect(b.sent).toHaveLength(1);
    b.sent[0]?.answer(body('at_old'));
    expect((await second).accessToken).toBe('at_old');
    // Then B replaces the token; the first request reaches B after that, and gets the successor.
    await vi.advanceTimersByTimeAsync(3_000);
    expect(b.sent).toHaveLength(2);
    b.sent[1]?.answer(body('at_new'));
    expect((await first).accessToken).toBe('at_new');

    const stale = await inOutage(client, [a, b]);
    expect(stale.accessToken).not.toBe('at_old');
  });

  it('keeps the grant when the answers are in a known order (one sent after the other came back)', async () => {
    const { sent, transport } = scripted();
    const client = createTokenClient({ transport, onWarning: () => undefined });
    const one = client.getToken('sandbox', { minValidity: 120 });
    await flush();
    sent[0]?.answer(body('at_old'));
    await one;
    await vi.advanceTimersByTimeAsync(1);
    const two = client.getToken('sandbox', { forceRefresh: true });
    await flush();
    sent[1]?.answer(body('at_new'));
    await two;
    const stale = await inOutage(client, [{ sent, transport }]);
    expect(stale).toMatchObject({ accessToken: 'at_new', stale: true });
  });
});

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
    sent.at(-1)?.fail(down());
    const stale = await call;
    expect((stale as { accessToken?: string }).accessToken).not.toBe('at_old');
  });
});
