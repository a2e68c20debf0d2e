/**
 * The observer's wait at a cut-over: a token whose announced countdown this container read has
 * just run out. Its successor comes one access-token request after the countdown's last step;
 * reading before then would only find the countdown ending, so the first read waits for it
 * (within the deadline): at a cut-over a busy container reads about once, not once per step.
 */
import type { Clock, Deadline } from '../../clock.js';
import { cutOverExpectedAt, readReserveMs } from '../timing/index.js';
import type { ConnectionView } from '../view/index.js';

export const awaitCutOver = async (
  { clock, view }: { readonly clock: Clock; readonly view: ConnectionView },
  name: string,
  by: Deadline,
  measured: { readonly issuanceMs: number; readonly lastReadMs: number | undefined },
): Promise<void> => {
  const entry = view.entry(name);
  if (!entry?.lease) return;
  // A countdown that did not move between two reads (its holder gone or starved) announces
  // nothing to wait for.
  const { timing } = view;
  const since = view.leaseFirstSeen(name, entry.lease);
  if (since === undefined || since < entry.checkedAt - timing.countdownStepMs) return;
  const now = clock.now();
  const expected = cutOverExpectedAt(
    entry.checkedAt,
    entry.lease.countdown,
    measured.issuanceMs,
    measured.lastReadMs,
    timing,
  );
  if (now < entry.until || now >= expected) return;
  // I3. Wake with time left for the read: a caller whose deadline comes first reads what the
  // store holds then (the successor, often), or is told it timed out waiting (R3).
  const wait = Math.min(expected - now, by.leftMs() - readReserveMs(measured.lastReadMs, timing));
  if (wait > 0) await clock.sleep(wait);
};
