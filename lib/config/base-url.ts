/** What a connection's `baseUrl` may be, and the form it is kept in. */

const isLoopbackHost = (hostname: string): boolean =>
  hostname === 'localhost' || hostname === '[::1]' || /^127(\.\d{1,3}){3}$/.test(hostname);

/**
 * An absolute `https://` URL (plain `http://` only for loopback hosts) without credentials, a
 * query or a fragment, normalised to no trailing slash; or what is wrong with it. Plain code
 * (no schema library): the cold start checks a valid configuration with it alone
 * (`connection-schema.ts` wraps it for the messages of an invalid one).
 */
export const normaliseBaseUrl = (value: string): { url: string } | { problem: string } => {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return { problem: 'must be an absolute URL' };
  }
  if (url.protocol !== 'https:' && !(url.protocol === 'http:' && isLoopbackHost(url.hostname))) {
    return { problem: 'must use https:// (plain http:// is accepted only for loopback hosts)' };
  }
  if (url.search || url.hash || url.username || url.password) {
    return { problem: 'must not carry credentials, a query or a fragment' };
  }
  return { url: `${url.origin}${url.pathname.replace(/\/+$/, '')}` };
};
