import { describe, expect, it } from 'vitest';
import { isCredentialRejection } from '../../../lib/broker/credential-rotation.js';
import {
  UpstreamBadResponseError,
  UpstreamRejectedError,
  UpstreamUnavailableError,
} from '../../../lib/errors.js';
import { isStrictModeRefusal } from '../../../lib/upstream/rejections.js';

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

describe('Patterns: refusals that point at strict mode', () => {
  it.each([
    ['INVALID_SIGN', 'invalid request'],
    ['SIGN_ERROR', 'sign_check_fail'],
    ['40001', '签名错误'],
    ['100413', 'signature verification failed'],
  ])('re-reads the secret for a refused signature: %s %s', (upstreamCode, upstreamMessage) => {
    const error = new UpstreamRejectedError('x', { upstreamCode, upstreamMessage });
    expect(isCredentialRejection(error)).toBe(true);
    expect(isStrictModeRefusal(`${upstreamCode} ${upstreamMessage}`)).toBe(true);
  });

  it.each([
    ['100412', 'timestamp expired or invalid'],
    ['40002', '时间戳过期'],
  ])('does not for a refused timestamp, a clock problem: %s %s', (upstreamCode, upstreamMessage) => {
    const error = new UpstreamRejectedError('x', { upstreamCode, upstreamMessage });
    expect(isCredentialRejection(error)).toBe(false);
    expect(isStrictModeRefusal(`${upstreamCode} ${upstreamMessage}`)).toBe(true);
  });

  it.each([
    'designated',
    'assignment',
    'consignee',
  ])('does not read "%s" as a signature', (word) => {
    expect(isStrictModeRefusal(word)).toBe(false);
  });
});
