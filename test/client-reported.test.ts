/**
 * The tokens a client reported are never handed out again while they live (RT5-C1, RT5-C1b of
 * an adversarial review, issue 37): they were forgotten after 64 reports across all connections,
 * and when the process's wall clock stepped past the token's expiry. Now they are kept per
 * connection, on the monotonic clock, until the token's own expiry.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { createTokenClient, TokenReportedError } from '../client/src/index.js';
import { MAX_REPORTED_PER_CONNECTION } from '../client/src/reported.js';
import { caught, unexpected } from './support/errors.js';
import { scripted } from './support/scripted-transport.js';

const T0 = new Date('2026-11-28T12:00:00Z').getTime();

/** The broker's answer: `accessToken`, valid for an hour, not to be reused. */
const carrying = (accessToken: string, connection = 'sandbox') => ({
  connection,
  accessToken,
  expiresAt: new Date(Date.now() + 3_600_000).toISOString(),
  expiresIn: 3_600,
  maxAgeMs: 0,
});

const flush = () => vi.advanceTimersByTimeAsync(0);

describe('Client: reported tokens', () => {
  beforeEach(() => {
    vi.useFakeTimers().setSystemTime(T0);
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  /** Reports `token` on `connection` and lets the broker accept the report. */
  const reportOn = async (
    client: ReturnType<typeof createTokenClient>,
    sent: ReturnType<typeof scripted>['sent'],
    connection: string,
    token: string,
  ) => {
    const report = client.invalidate(connection, token);
    await flush();
    sent.at(-1)?.answer({ invalidated: true });
    await report;
  };

  /** Asks for a token; the broker answers `token` to every request. */
  const askAnswering = async (
    client: ReturnType<typeof createTokenClient>,
    sent: ReturnType<typeof scripted>['sent'],
    token: string,
  ) => {
    const asked = client.getToken('sandbox').then((t) => t.accessToken, caught);
    for (let i = 0; i < 3; i += 1) {
      await flush();
      const last = sent.at(-1);
      if (last?.operation.action === 'getToken') last.answer(carrying(token));
    }
    return asked;
  };

  it('RT5-C1: reports about another connection never push a connection’s reported token out', async () => {
    const { sent, transport } = scripted();
    const client = createTokenClient({ transport });
    await reportOn(client, sent, 'sandbox', 'at_reported');
    for (let i = 0; i < MAX_REPORTED_PER_CONNECTION + 1; i += 1) {
      await reportOn(client, sent, 'other', `at_other_${i}`);
    }
    const answer = await askAnswering(client, sent, 'at_reported');
    expect(answer).toBeInstanceOf(TokenReportedError);
  });

  it('RT5-C1b: a wall clock stepped past the token’s expiry does not forget it', async () => {
    const { sent, transport } = scripted();
    let stepMs = 0;
    const client = createTokenClient({ transport, now: () => Date.now() + stepMs });
    // The client holds at_reported (valid for an hour), then reports it.
    const first = client.getToken('sandbox');
    await flush();
    sent[0]?.answer({ ...carrying('at_reported'), maxAgeMs: 60_000 });
    expect((await first).accessToken).toBe('at_reported');
    await reportOn(client, sent, 'sandbox', 'at_reported');
    // NTP steps the wall clock two hours ahead; no monotonic time has passed.
    stepMs = 2 * 3_600_000;
    const answer = await askAnswering(client, sent, 'at_reported');
    expect(answer).toBeInstanceOf(TokenReportedError);
  });

  it('forgets a reported token once it has expired, on the monotonic clock', async () => {
    const { sent, transport } = scripted();
    const client = createTokenClient({ transport });
    const first = client.getToken('sandbox');
    await flush();
    sent[0]?.answer({ ...carrying('at_reported'), maxAgeMs: 60_000 });
    await first;
    await reportOn(client, sent, 'sandbox', 'at_reported');
    await vi.advanceTimersByTimeAsync(3_600_000);
    // Past its expiry: the broker's answer of it is not refused for being reported.
    const answer = await askAnswering(client, sent, 'at_reported');
    expect(answer).toBe('at_reported');
  });

  it('a report that fails forgets the token again (nothing reached the broker)', async () => {
    const { sent, transport } = scripted();
    const client = createTokenClient({ transport });
    const report = client.invalidate('sandbox', 'at_maybe').then(unexpected, caught);
    await flush();
    sent.at(-1)?.fail(new Error('connection refused'));
    await report;
    expect(await askAnswering(client, sent, 'at_maybe')).toBe('at_maybe');
  });
});
