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

/**
 * Why the local runtime could not listen, and what to do about it. With the user's own
 * connections (`ownConnections`), another port is no way out if the port's holder is another
 * npm start with the same ones: each issues its own tokens, which revoke the other's.
 */
export const listenFailure = (
  host: string,
  port: number,
  error: NodeJS.ErrnoException | undefined,
  ownConnections = false,
): string =>
  error?.code === 'EADDRINUSE'
    ? `Port ${port} on ${host} is in use (another npm start?): set PORT to a free one (PORT=3001 npm start), or PORT=0 for any.${
        ownConnections
          ? " If it is another npm start with the same BROKER_CONNECTIONS, use that one instead: a second broker for the same client IDs issues tokens of its own, which revoke the first one's."
          : ''
      }`
    : `The local runtime could not listen on ${host}:${port}: ${error?.message ?? String(error)}`;

/**
 * What went wrong, in words that carry no value: the system's code and call
 * (`ECONNREFUSED (connect)`), else the error's name. Messages are left out: a parser's quotes
 * its input, and an SDK's may repeat a request.
 */
export const failureReason = (error: unknown): string => {
  const { code, syscall, name } = (error ?? {}) as {
    code?: unknown;
    syscall?: unknown;
    name?: unknown;
  };
  const word = (value: unknown) =>
    typeof value === 'string' && /^[\w.-]{1,60}$/.test(value) ? value : undefined;
  const coded = word(code);
  if (coded) return word(syscall) ? `${coded} (${word(syscall)})` : coded;
  return word(name) ?? 'unknown error';
};

/** A URL as far as its port: no credentials, path or query. */
export const originOf = (url: string): string => {
  try {
    return new URL(url).origin;
  } catch {
    return 'an endpoint that is not a URL';
  }
};

/**
 * The banner's AWS CLI example, and why it may fail: `--cli-binary-format` is AWS CLI v2's
 * (v2 reads `--payload` as base64 without it), and v1 refuses it as an unknown option.
 */
export const awsCliExample = (url: string, functionName: string, connection: string): string[] => [
  `  aws lambda invoke --endpoint-url ${url} --function-name ${functionName} --cli-binary-format raw-in-base64-out --payload '{"action":"getToken","connection":"${connection}"}' /dev/stdout`,
  '    # AWS CLI v2; v1 has no --cli-binary-format (it sends --payload as is): leave that option out. Any region and credentials do.',
];
