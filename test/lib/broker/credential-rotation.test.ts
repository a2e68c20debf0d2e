import { describe, expect, it } from 'vitest';
import { isCredentialRejection } from '../../../lib/broker/credential-rotation.js';
import {
  UpstreamBadResponseError,
  UpstreamRejectedError,
  UpstreamUnavailableError,
} from '../../../lib/errors.js';

describe('Function: isCredentialRejection', () => {
  it.each([
    ['HTTP 401', { upstreamStatus: 401 }],
    ['HTTP 403', { upstreamStatus: 403 }],
    ['an invalid client code', { upstreamCode: 'invalid_client' }],
    ['an unknown credential message', { upstreamMessage: 'Unknown credential' }],
    ['a bad secret message', { upstreamMessage: 'bad-secret supplied' }],
    ['unauthorised', { upstreamMessage: 'Unauthorised' }],
    ['authentication failed', { upstreamMessage: 'client authentication failed' }],
  ])('counts %s as a rejection of the credentials', (_what, options) => {
    expect(isCredentialRejection(new UpstreamRejectedError('rejected', options))).toBe(true);
  });

  it.each([
    [
      'a rate limit',
      new UpstreamRejectedError('x', {
        upstreamStatus: 400,
        upstreamCode: '200001',
        upstreamMessage: 'rate limited',
      }),
    ],
    [
      'an expired code',
      new UpstreamRejectedError('x', {
        upstreamCode: '100002',
        upstreamMessage: 'authorization code expired',
      }),
    ],
    ['an outage', new UpstreamUnavailableError('x', { upstreamStatus: 503 })],
    ['a protocol error', new UpstreamBadResponseError('x')],
    ['a plain error', new Error('401 unauthorized')],
  ])('does not count %s', (_what, error) => {
    expect(isCredentialRejection(error)).toBe(false);
  });
});
