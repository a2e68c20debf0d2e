/**
 * The cold start reads BROKER_CONNECTIONS without the schema library (issue 25): a plain check
 * answers for the values it is sure of, and the zod schema judges the rest. The two must give
 * the same answers, and the cold start's loader must answer as `loadConfig` does.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { loadConfigAtInit } from '../../lib/config/at-init.js';
import { schemaFields } from '../../lib/config/connection-schema.js';
import { plainFields, UnsureOfFields } from '../../lib/config/connections.js';
import { loadConfig } from '../../lib/config.js';
import { ConfigError } from '../../lib/errors.js';

const text = fc.oneof(
  fc.constantFrom('', ' ', 's', ' arn:aws:iam::1:role/x ', 'code', 'access_code', '9x', 'a b'),
  fc.string({ maxLength: 6 }),
);
const anything = fc.oneof(text, fc.integer(), fc.boolean(), fc.constant(null), fc.array(text));
const connectionValue = fc.oneof(
  fc.record(
    {
      // Mostly valid, so that the plain check is often sure and the answers are compared.
      variant: fc.oneof(
        { arbitrary: fc.constantFrom('v3', 'legacy', 'V3'), weight: 6 },
        { arbitrary: anything, weight: 1 },
      ),
      baseUrl: fc.oneof(
        {
          arbitrary: fc.constantFrom('https://api.example.com', 'https://x.example/a/'),
          weight: 4,
        },
        fc.constantFrom(
          'https://api.example.com',
          'https://api.example.com/base//',
          'http://127.0.0.1:9000',
          'http://localhost/x/',
          'http://api.example.com',
          'https://u:p@api.example.com',
          'https://api.example.com?x=1',
          'not a url',
        ),
        anything,
      ),
      secretId: fc.oneof({ arbitrary: text, weight: 4 }, { arbitrary: anything, weight: 1 }),
      callers: fc.oneof(fc.array(text, { maxLength: 3 }), anything),
      forceCallers: fc.oneof(fc.array(text, { maxLength: 3 }), anything),
      codeField: fc.oneof(text, anything),
      revokesOnReissue: anything,
      signing: anything,
      probe: anything,
    },
    { requiredKeys: [] },
  ),
  anything,
);
const likelyValid = fc.record(
  {
    variant: fc.constantFrom('v3', 'legacy'),
    baseUrl: fc.constantFrom('https://api.example.com', 'http://localhost/x/'),
    secretId: text,
    callers: fc.array(text, { maxLength: 2 }),
    forceCallers: fc.array(text, { maxLength: 2 }),
    codeField: text,
    revokesOnReissue: fc.boolean(),
  },
  { requiredKeys: ['variant', 'baseUrl', 'secretId'] },
);

/** A check's answer, or that it was unsure. */
const answer = (check: typeof plainFields, value: unknown) => {
  try {
    return check(value);
  } catch (error) {
    if (error instanceof UnsureOfFields) return 'unsure';
    throw error;
  }
};

describe('Function: plainFields (a connection checked without the schema)', () => {
  it('answers as the schema does whenever it answers, and only with fields', () => {
    fc.assert(
      fc.property(fc.oneof(connectionValue, likelyValid), (value) => {
        const plain = answer(plainFields, value);
        if (plain === 'unsure') return;
        expect(plain).toEqual(schemaFields(value));
        expect('data' in plain).toBe(true);
      }),
      { numRuns: 2_000, seed: 25 },
    );
  });

  it('is sure of the configurations a stage deploys', () => {
    for (const value of [
      { variant: 'v3', baseUrl: 'https://api.example.com/', secretId: ' open-api/v3 ' },
      {
        variant: 'v3',
        baseUrl: 'https://api.example.com',
        secretId: 'open-api/v3',
        callers: ['arn:aws:iam::123456789012:role/app-*'],
        forceCallers: [],
        codeField: 'authCode',
        revokesOnReissue: false,
        signing: { stringToSign: 'body', encoding: 'hex' },
        probe: { path: '/ping' },
      },
      { variant: 'legacy', baseUrl: 'http://127.0.0.1:8080', secretId: 'open-api/legacy' },
    ]) {
      const plain = answer(plainFields, value);
      expect(plain).not.toBe('unsure');
      expect(plain).toEqual(schemaFields(value));
    }
  });
});

describe('Function: loadConfigAtInit (the cold start’s loader)', () => {
  const env = (connections: unknown) => ({
    BROKER_TABLE_NAME: 'tokens',
    BROKER_CONNECTIONS: JSON.stringify(connections),
  });

  it('reads a valid configuration as loadConfig does', async () => {
    const valid = env({
      sandbox: { variant: 'v3', baseUrl: 'https://api.example.com/', secretId: 's' },
      legacy: { variant: 'legacy', baseUrl: 'https://legacy.example.com', secretId: 'l' },
    });
    expect(await loadConfigAtInit(valid)).toEqual(loadConfig(valid));
  });

  it('refuses an invalid field with the schema’s message, as loadConfig does', async () => {
    for (const [connection, message] of [
      [
        { variant: 'v3', baseUrl: 'http://api.example.com', secretId: 's' },
        'BROKER_CONNECTIONS: connection "production", field "baseUrl": must use https://',
      ],
      [
        { variant: 'v3', baseUrl: 'https://api.example.com', secretId: ' ' },
        'BROKER_CONNECTIONS: connection "production", field "secretId": must be a non-empty Secrets Manager id or ARN',
      ],
      [
        { variant: 'v3', baseUrl: 'https://api.example.com', secretId: 's', callers: [] },
        'BROKER_CONNECTIONS: connection "production", field "callers": must list at least one IAM ARN pattern',
      ],
    ] as const) {
      const config = env({ production: connection });
      expect(() => loadConfig(config)).toThrow(message);
      await expect(loadConfigAtInit(config)).rejects.toThrow(ConfigError);
      await expect(loadConfigAtInit(config)).rejects.toThrow(message);
    }
  });

  it('answers any configuration as loadConfig does: the same value, or the same error', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.dictionary(fc.constantFrom('a', 'b', 'bad name'), connectionValue, { maxKeys: 2 }),
        async (connections) => {
          const config = env(connections);
          let expected: unknown;
          try {
            expected = loadConfig(config);
          } catch (error) {
            expected = error;
          }
          let actual: unknown;
          try {
            actual = await loadConfigAtInit(config);
          } catch (error) {
            actual = error;
          }
          if (expected instanceof Error) {
            expect(actual).toBeInstanceOf(expected.constructor);
            expect((actual as Error).message).toBe(expected.message);
          } else {
            expect(actual).toEqual(expected);
          }
        },
      ),
      { numRuns: 500, seed: 25 },
    );
  });
});
