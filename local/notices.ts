/**
 * What `npm start` says about how it was started, beyond its banner: one line each, so that
 * a user sees at once what to change.
 */

/** 127.0.0.0/8, ::1 and localhost: reachable from this machine only. */
export const isLoopbackHost = (host: string): boolean =>
  host === 'localhost' || host === '::1' || /^127(\.\d{1,3}){3}$/.test(host);

/** Said when HOST is not a loopback address: nothing is authenticated locally. */
export const networkWarning = (host: string, port: number): string | undefined =>
  isLoopbackHost(host)
    ? undefined
    : `WARNING: HOST=${host} serves tokens to the network, and the local runtime checks no SigV4 signature and no caller: anyone who reaches port ${port} gets tokens. Use it only on a network you trust.`;

/** Said when the connections are the user's own, not the simulator's. */
export const upstreamNotice = (baseUrls: readonly string[]): string =>
  `Upstream: your own BROKER_CONNECTIONS, not the simulator (${[...new Set(baseUrls)].join(', ')}). Every token this broker issues revokes the ones any other system holds for the same client IDs: one client ID, one broker.`;

/** Why the local runtime could not listen, and what to do about it. */
export const listenFailure = (
  host: string,
  port: number,
  error: NodeJS.ErrnoException | undefined,
): string =>
  error?.code === 'EADDRINUSE'
    ? `Port ${port} on ${host} is in use (another npm start?): set PORT to a free one (PORT=3001 npm start), or PORT=0 for any.`
    : `The local runtime could not listen on ${host}:${port}: ${error?.message ?? String(error)}`;
