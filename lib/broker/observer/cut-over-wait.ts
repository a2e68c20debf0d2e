/**
 * The observer's wait at a cut-over: when what a read proved has run out near the end of an
 * announced countdown, the first read waits for the successor (within the deadline) rather than
 * reading once per step. Further than two steps and the POST out, it reads now.
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
  // A countdown that did not move between two reads announces nothing to wait for.
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
  // Further than two steps and the POST: a read proves the old token for a step more.
  if (now < entry.checkedAt + (entry.lease.countdown - 2) * stepMs) return 0;
  // I3. Wake with time left for the read.
  const reserve = readReserveMs(view.readMs(name), timing);
  const wait = Math.min(successorAt - now, deadline.leftMs() - reserve);
  if (wait <= 0) return 0;
  await clock.sleep(wait);
  return Math.round(wait);
};
