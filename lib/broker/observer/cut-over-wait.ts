/**
 * The observer's wait at a cut-over: a token whose announced countdown this container read has
 * just run out. Its successor comes one access-token request after the countdown's last step;
 * reading before then would only find the countdown ending, so the first read waits for it
 * (within the deadline): at a cut-over a busy container reads about once, not once per step.
 *
 * Only when a read now could prove nothing: what the read proved ran out up to the countdown's
 * length in step writes (and a step) before its end, and a caller that came then would wait all
 * of it, 1.2 s on a global table (`regions-three`, 2026-11-25). More than two steps and the POST
 * before the successor is due, a read would find a countdown of two or more, which proves the
 * old token for a step more: it reads now. Closer, it waits (one read, not one per step: a busy
 * container that read at every such chance read five times as often at a cut-over).
 */
import type { Clock, Deadline } from '../../clock.js';
import { cutOverEstimate, readReserveMs } from '../timing/index.js';
import type { ConnectionView } from '../view/index.js';

/** @returns how long it waited (ms; 0 when it did not). */
export const awaitCutOver = async (
  { clock, view }: { readonly clock: Clock; readonly view: ConnectionView },
  name: string,
  deadline: Deadline,
): Promise<number> => {
  const entry = view.entry(name);
  if (!entry?.lease) return 0;
  // A countdown that did not move between two reads (its holder gone or starved) announces
  // nothing to wait for.
  const { timing } = view;
  const since = view.leaseFirstSeen(name, entry.lease);
  if (since === undefined || since < entry.checkedAt - timing.countdownStepMs) return 0;
  const now = clock.now();
  const { successorAt, stepMs } = cutOverEstimate(
    entry.checkedAt,
    entry.lease,
    view.issuanceMs(name),
    timing,
  );
  if (now < entry.until || now >= successorAt) return 0;
  // More than two steps and the POST before it: a read finds a countdown of two or more, which
  // proves the old token for a step more.
  if (now < entry.checkedAt + (entry.lease.countdown - 2) * stepMs) return 0;
  // I3. Wake with time left for the read: a caller whose deadline comes first reads what the
  // store holds then (the successor, often), or is told it timed out waiting (R3).
  const reserve = readReserveMs(view.readMs(name), timing);
  const wait = Math.min(successorAt - now, deadline.leftMs() - reserve);
  if (wait <= 0) return 0;
  await clock.sleep(wait);
  return Math.round(wait);
};
