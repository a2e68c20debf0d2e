/**
 * Holder states and events for the reducer's tests (`holder-state.test.ts`, the table in
 * `holder-table.test.ts`, the properties in `holder-properties.test.ts`). Instants are monotonic
 * ms from 0; the caller's deadline is 10 s away, the upstream timeout 2 s.
 */
import {
  type HolderEvent,
  type HolderName,
  type HolderState,
  initialState,
  type LeaseWrite,
  type PostAnswer,
} from '../../../lib/broker/holder/state.js';
import { DEFAULT_TIMING, type ProtocolTiming } from '../../../lib/broker/timing/index.js';

export const DEADLINE_AT = 10_000;
export const TIMEOUT_MS = 2_000;

/** A holder that took its lease at 0 with `countdown`, replacing a valid token. */
export const started = (
  countdown = 21,
  o: { suspect?: boolean; timing?: ProtocolTiming } = {},
): HolderState =>
  initialState(
    {
      deadlineAt: DEADLINE_AT,
      upstreamTimeoutMs: TIMEOUT_MS,
      replacesToken: true,
      suspect: !!o.suspect,
      timing: o.timing ?? DEFAULT_TIMING,
    },
    { version: 'v0', countdown, leasedAt: 0, answeredAt: 0 },
  );

export const holder = (name: HolderName, fields: Partial<HolderState> = {}): HolderState => ({
  ...started(name === 'counting' ? 5 : 0),
  name,
  ...(name === 'written' || name === 'superseded' || name === 'outcome-unknown' || name === 'failed'
    ? { finished: true }
    : {}),
  ...fields,
});

export const inFlight = (
  write: LeaseWrite['write'],
  countdown: number,
  sentAt = 0,
): LeaseWrite => ({
  write,
  countdown,
  // The fence's: its budget (a timeout) and A1's bound after it (two).
  durationMs: write === 'fence' ? 3 * TIMEOUT_MS : 3_000,
  sentAt,
  ...(write === 'fence' ? { budget: TIMEOUT_MS, expiresAt: 1_000_000 } : {}),
});

export const ev = <T extends HolderEvent['type']>(
  type: T,
  at = 100,
  fields?: Omit<Extract<HolderEvent, { type: T }>, 'type' | 'at'>,
): HolderEvent => ({ type, at, ...fields }) as HolderEvent;

export const answered = (outcome: PostAnswer, at = 100): HolderEvent =>
  ev('answered', at, { outcome });
