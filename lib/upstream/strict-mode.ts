/**
 * Rejections of a v3 access-token request that point at Strict Access Token Mode, restated for
 * the operator: what the connection signs with (settings, never a value) and what to check.
 */
import type { ConnectionConfig } from '../config.js';
import { UpstreamRejectedError } from '../errors.js';
import { isStrictModeRefusal } from './rejections.js';
import { describeSigning, type SigningConfig } from './signing.js';

/**
 * A rejection of an access-token request that points at strict mode: an upstream code or
 * message about the signature or the timestamp, or, when the request was signed, HTTP 401/403.
 */
export const isSignatureRejection = (
  error: unknown,
  signed: boolean,
): error is UpstreamRejectedError => {
  if (!(error instanceof UpstreamRejectedError)) return false;
  const status = error.upstreamStatus;
  if (signed && (status === 401 || status === 403)) return true;
  return isStrictModeRefusal(`${error.upstreamCode ?? ''} ${error.upstreamMessage ?? ''}`);
};

/**
 * Restates a strict-mode rejection for the operator: what the connection signs with (settings,
 * never a value) and what to check. Code, message and status of the upstream are kept.
 */
export const signatureRejection = (
  error: UpstreamRejectedError,
  connection: ConnectionConfig,
  signing: SigningConfig | undefined,
): UpstreamRejectedError => {
  const said = [
    error.upstreamCode !== undefined && `code ${error.upstreamCode}`,
    error.upstreamMessage,
  ]
    .filter(Boolean)
    .join(': ');
  const status = error.upstreamStatus;
  const upstream = [status !== undefined && `HTTP ${status}`, said].filter(Boolean).join(', ');
  const advice = signing
    ? `Connection '${connection.name}' signs with ${describeSigning(signing)} (connection field "signing"): ` +
      'confirm the string-to-sign and encoding with the provider, check that the client secret is current, ' +
      'and that this clock is within 5 minutes of theirs'
    : `Connection '${connection.name}' has signing turned off ("signing": false): the provider runs this client in ` +
      'strict mode, so remove that setting (the default signs) or set the scheme the provider confirms';
  return new UpstreamRejectedError(
    `Open API rejected the ${signing ? 'signed ' : ''}access-token request (Strict Access Token Mode)${upstream ? `: ${upstream}` : ''}. ${advice}`,
    {
      upstreamStatus: error.upstreamStatus,
      upstreamCode: error.upstreamCode,
      upstreamMessage: error.upstreamMessage,
      details: error.details,
      cause: error,
    },
  );
};
