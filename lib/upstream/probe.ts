/**
 * The probe of a reported token (`ConnectionConfig.probe`): one authenticated GET of the
 * business API, whose status alone is the verdict. The token goes only into the
 * `x-access-token` header; what a failed probe says names a status code or a network
 * failure's code, never the token, and the body is never read into a message.
 */
import type { ConnectionConfig } from '../config.js';
import type { ProbeVerdict, StepOptions } from '../ports.js';
import { networkReason } from './attempt.js';

const USER_AGENT = 'open-api-token-broker/0.1';

/** The probe request of `connection` (which must have a `probe`) for `accessToken`. */
export const probeRequest = (connection: ConnectionConfig, accessToken: string): Request => {
  if (!connection.probe) throw new TypeError(`Connection '${connection.name}' has no probe`);
  return new Request(`${connection.baseUrl}${connection.probe.path}`, {
    method: 'GET',
    // A redirect is not followed: fetch would send x-access-token to wherever it points (it
    // drops only authorization and cookie across origins). A 3xx proves nothing.
    redirect: 'manual',
    headers: {
      accept: 'application/json',
      'user-agent': USER_AGENT,
      'x-access-token': accessToken,
    },
  });
};

/** What a probe's HTTP status says of the token: only 2xx and 401 say anything. */
export const probeVerdict = (status: number): ProbeVerdict => {
  if (status >= 200 && status < 300) return { verdict: 'valid' };
  if (status === 401) return { verdict: 'revoked' };
  return { verdict: 'unknown', reason: `HTTP ${status}` };
};

export interface ProbeContext {
  readonly fetch: typeof fetch;
  /** The upstream's per-request limit; the caller's deadline may shorten it. */
  readonly timeoutMs: number;
}

/** Sends the probe once, bounded by the time limit, the deadline and the signal. */
export const probeToken = async (
  { fetch, timeoutMs }: ProbeContext,
  connection: ConnectionConfig,
  accessToken: string,
  { deadline, signal: outer }: StepOptions,
): Promise<ProbeVerdict> => {
  // Whole ms: AbortSignal.timeout refuses anything else (the monotonic clock has fractions).
  const budget = Math.min(timeoutMs, deadline.wholeMsLeft());
  if (budget <= 0) return { verdict: 'unknown', reason: 'no time left' };
  const timeout = AbortSignal.timeout(budget);
  const signal = outer ? AbortSignal.any([timeout, outer]) : timeout;
  try {
    const response = await fetch(probeRequest(connection, accessToken), { signal });
    // The status is the answer; the body (which may echo the token) is not read.
    await response.body?.cancel().catch(() => undefined);
    return probeVerdict(response.status);
  } catch (error) {
    return {
      verdict: 'unknown',
      reason: signal.aborted ? `timed out after ${budget} ms` : networkReason(error),
    };
  }
};
