import { describe, expect, it, vi } from 'vitest';
import {
  isCredentialRejection,
  withCredentialRotation,
} from '../../../lib/broker/issuance/issue-flow.js';
import { Deadline, systemClock } from '../../../lib/clock.js';
import {
  UpstreamBadResponseError,
  UpstreamRejectedError,
  UpstreamUnavailableError,
} from '../../../lib/errors.js';
import type {
  AuthorizationCode,
  ClientCredentials,
  IssuedToken,
  TokenIssuer,
} from '../../../lib/ports.js';
import { sealCode } from '../../../lib/upstream/authorization-code.js';
import { isStrictModeRefusal } from '../../../lib/upstream/rejections.js';
import { caught, unexpected } from '../../support/errors.js';
import { captureLogger, connection, FakeSecretSource } from '../../support/fakes.js';

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

/**
 * An issuer that writes down each step it is asked for, with the secret it was given, and
 * refuses the credentials it is told to at the step it is told to.
 */
class RecordingIssuer implements TokenIssuer {
  readonly steps: string[] = [];
  readonly codes = new Map<AuthorizationCode, string>();
  readonly used: string[] = [];
  refuse: { readonly secret: string; readonly at: 'authorize' | 'requestToken' } | undefined;

  async authorize(_c: unknown, { clientSecret }: ClientCredentials): Promise<AuthorizationCode> {
    this.steps.push(`authorize ${clientSecret}`);
    if (this.refuse?.at === 'authorize' && this.refuse.secret === clientSecret) throw rejected();
    const code = sealCode(`code-${this.codes.size + 1}`);
    this.codes.set(code, `code-${this.codes.size + 1}`);
    return code;
  }

  async requestToken(
    _c: unknown,
    { clientSecret }: ClientCredentials,
    code: AuthorizationCode,
  ): Promise<IssuedToken> {
    this.steps.push(`requestToken ${clientSecret}`);
    this.used.push(this.codes.get(code) ?? 'a code authorize never gave');
    if (this.refuse?.at === 'requestToken' && this.refuse.secret === clientSecret) {
      throw rejected();
    }
    return { accessToken: 'token', expiresIn: 3600, upstreamTimestamp: undefined, requestedAt: 0 };
  }
}

const rejected = () =>
  new UpstreamRejectedError('Open API rejected the request: HTTP 401, code invalid_client', {
    upstreamStatus: 401,
    upstreamCode: 'invalid_client',
  });

describe('Function: withCredentialRotation', () => {
  const setup = () => {
    const issuer = new RecordingIssuer();
    const secrets = new FakeSecretSource();
    const logger = captureLogger();
    const issue = withCredentialRotation({ secrets, issuer, logger });
    /** A fence that writes itself down between the issuer's steps. */
    const fence = async () => {
      issuer.steps.push('fence');
    };
    return { issuer, secrets, logger, issue, fence };
  };
  const deadline = () => Deadline.in(systemClock, 5_000);

  it('runs authorize, then the fence, then the token request with the code authorize gave', async () => {
    const { issuer, issue, fence } = setup();
    await issue(connection(), { deadline: deadline(), fence });
    expect(issuer.steps).toEqual(['authorize secret-1', 'fence', 'requestToken secret-1']);
    expect(issuer.used).toEqual(['code-1']);
  });

  it('sends no token request before the fence resolves', async () => {
    const { issuer, issue } = setup();
    let release: () => void = () => undefined;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    let fenced = false;
    const pending = issue(connection(), {
      deadline: deadline(),
      fence: async () => {
        fenced = true;
        await gate;
      },
    });
    await vi.waitFor(() => expect(fenced).toBe(true));
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(issuer.steps).toEqual(['authorize secret-1']);
    release();
    await pending;
    expect(issuer.steps).toEqual(['authorize secret-1', 'requestToken secret-1']);
  });

  it('sends no token request when the fence throws, and answers with what it threw', async () => {
    const { issuer, secrets, issue } = setup();
    const lost = new Error('lease lost');
    const error = await issue(connection(), {
      deadline: deadline(),
      fence: async () => {
        throw lost;
      },
    }).then(unexpected, caught);
    expect(error).toBe(lost);
    expect(issuer.steps).toEqual(['authorize secret-1']);
    expect(secrets.forcedFetches).toBe(0);
  });

  it('after a rotation rejected at the token request, runs the whole flow again: a new code, the fence again, then the second token request', async () => {
    const { issuer, secrets, logger, issue, fence } = setup();
    secrets.stored = { clientId: 'client-1', clientSecret: 'rotated' };
    issuer.refuse = { secret: 'secret-1', at: 'requestToken' };
    await issue(connection(), { deadline: deadline(), fence });
    expect(issuer.steps).toEqual([
      'authorize secret-1',
      'fence',
      'requestToken secret-1',
      'authorize rotated',
      'fence',
      'requestToken rotated',
    ]);
    expect(issuer.used).toEqual(['code-1', 'code-2']);
    expect(secrets.forcedFetches).toBe(1);
    expect(logger.lines.map((l) => l.message)).toEqual([
      'Credentials rejected; the secret changed, retrying once with the new one',
    ]);
  });

  it('after a rotation rejected at the authorize step, fences once, for the new code', async () => {
    const { issuer, secrets, issue, fence } = setup();
    secrets.stored = { clientId: 'client-1', clientSecret: 'rotated' };
    issuer.refuse = { secret: 'secret-1', at: 'authorize' };
    await issue(connection(), { deadline: deadline(), fence });
    expect(issuer.steps).toEqual([
      'authorize secret-1',
      'authorize rotated',
      'fence',
      'requestToken rotated',
    ]);
    expect(issuer.used).toEqual(['code-1']);
  });

  it('rethrows the rejection when the secret did not change, and runs nothing again', async () => {
    const { issuer, secrets, issue, fence } = setup();
    issuer.refuse = { secret: 'secret-1', at: 'requestToken' };
    const error = await issue(connection(), { deadline: deadline(), fence }).then(
      unexpected,
      caught,
    );
    expect(error).toBeInstanceOf(UpstreamRejectedError);
    expect(error.upstreamCode).toBe('invalid_client');
    expect(secrets.forcedFetches).toBe(1);
    expect(issuer.steps).toEqual(['authorize secret-1', 'fence', 'requestToken secret-1']);
  });
});
