/** What a connection's `baseUrl` may be, and the form it is kept in. */
import * as z from 'zod/mini';
import '../schema.js';

const isLoopbackHost = (hostname: string): boolean =>
  hostname === 'localhost' || hostname === '[::1]' || /^127(\.\d{1,3}){3}$/.test(hostname);

/**
 * An absolute `https://` URL (plain `http://` only for loopback hosts) without credentials, a
 * query or a fragment; normalised to no trailing slash.
 */
export const baseUrlSchema = z.pipe(
  z.string(),
  z.transform((value: string, ctx) => {
    const fail = (message: string) => {
      ctx.issues.push({ code: 'custom', message, input: value });
      return z.NEVER;
    };
    let url: URL;
    try {
      url = new URL(value);
    } catch {
      return fail('must be an absolute URL');
    }
    if (url.protocol !== 'https:' && !(url.protocol === 'http:' && isLoopbackHost(url.hostname))) {
      return fail('must use https:// (plain http:// is accepted only for loopback hosts)');
    }
    if (url.search || url.hash || url.username || url.password) {
      return fail('must not carry credentials, a query or a fragment');
    }
    return `${url.origin}${url.pathname.replace(/\/+$/, '')}`;
  }),
);
