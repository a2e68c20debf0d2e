import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../lib/config.js';
import { ConfigError } from '../../lib/errors.js';

const good = {
  BROKER_TABLE_NAME: 'tokens',
  BROKER_CONNECTIONS: JSON.stringify({
    sandbox: {
      variant: 'v3',
      baseUrl: 'https://sandbox.example.com/',
      secretId: 'open-api/sandbox',
    },
    production: {
      variant: 'legacy',
      baseUrl: 'https://api.example.com/gateway',
      secretId: 'arn:aws:secretsmanager:eu-west-1:123456789012:secret:open-api/prod-AbCdEf',
      callers: ['arn:aws:sts::123456789012:assumed-role/orders-*/*'],
    },
  }),
};

const withConnection = (settings: unknown) => ({
  BROKER_TABLE_NAME: 'tokens',
  BROKER_CONNECTIONS: JSON.stringify({ sandbox: settings }),
});

const failure = (env: Record<string, string | undefined>) => {
  try {
    loadConfig(env);
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as ConfigError).code).toBe('CONFIG_INVALID');
    return (error as Error).message;
  }
  throw new Error('expected loadConfig to throw');
};

describe('Function: loadConfig', () => {
  it('names a typo in a required field as the typo, with the field it resembles', () => {
    expect(
      failure(withConnection({ variant: 'v3', baseUrl: 'https://a.example.com', secretID: 's' })),
    ).toBe(
      'BROKER_CONNECTIONS: connection "sandbox", field "secretID": unknown field (did you mean "secretId"?); known: variant, baseUrl, secretId, callers, forceCallers, codeField, revokesOnReissue, signing, probe',
    );
    expect(
      failure(
        withConnection({
          variant: 'v3',
          baseUrl: 'https://a.example.com',
          secretId: 's',
          caller: ['arn:aws:iam::1:role/x'],
        }),
      ),
    ).toContain('field "caller": unknown field (did you mean "callers"?)');
    // Nothing like any field: no guess, the list of known ones.
    expect(
      failure(
        withConnection({ variant: 'v3', baseUrl: 'https://a.example.com', secretId: 's', zzz: 1 }),
      ),
    ).toBe(
      'BROKER_CONNECTIONS: connection "sandbox", field "zzz": unknown field; known: variant, baseUrl, secretId, callers, forceCallers, codeField, revokesOnReissue, signing, probe',
    );
  });

  it('returns a frozen config with normalised connections and defaults', () => {
    const config = loadConfig(good);
    expect(Object.isFrozen(config)).toBe(true);
    expect(config.tableName).toBe('tokens');
    expect(config.connections.get('sandbox')).toEqual({
      name: 'sandbox',
      variant: 'v3',
      baseUrl: 'https://sandbox.example.com',
      secretId: 'open-api/sandbox',
      callers: undefined,
      codeField: 'code',
      revokesOnReissue: true,
      signing: { stringToSign: '{params}', encoding: 'hex' },
    });
    expect(config.connections.get('production')?.signing).toBe(false);
    expect(config.connections.get('production')?.baseUrl).toBe('https://api.example.com/gateway');
    expect(config.connections.get('production')?.callers).toEqual([
      'arn:aws:sts::123456789012:assumed-role/orders-*/*',
    ]);
    expect(config.refreshWindowSeconds).toBe(600);
    expect(config.defaultMinValiditySeconds).toBe(60);
    expect(config.maxTokenLifetimeSeconds).toBe(30 * 86_400);
  });

  it('reads the tuning variables', () => {
    const config = loadConfig({
      ...good,
      BROKER_REFRESH_WINDOW_SECONDS: '120',
      BROKER_MEMORY_RECHECK_SECONDS: '0',
      BROKER_UPSTREAM_TIMEOUT_MS: '2500',
      // Not the broker's: only BROKER_* variables are checked by name.
      CODE_FIELD: 'ignored',
    });
    expect(config.refreshWindowSeconds).toBe(120);
    expect(config.memoryRecheckSeconds).toBe(0);
    expect(config.upstreamTimeoutMs).toBe(2500);
  });

  it('reads who may force a replacement: unset is everyone, [] nobody; a blank pattern is refused', () => {
    const base = { variant: 'v3', baseUrl: 'https://a.example', secretId: 's' };
    expect(loadConfig(withConnection(base)).connections.get('sandbox')?.forceCallers).toBe(
      undefined,
    );
    expect(
      loadConfig(withConnection({ ...base, forceCallers: [] })).connections.get('sandbox')
        ?.forceCallers,
    ).toEqual([]);
    const listed = ['arn:aws:iam::123456789012:role/ops-*'];
    expect(
      loadConfig(withConnection({ ...base, forceCallers: listed })).connections.get('sandbox')
        ?.forceCallers,
    ).toEqual(listed);
    expect(failure(withConnection({ ...base, forceCallers: [' '] }))).toContain(
      'field "forceCallers.0"',
    );
  });

  it('reads the forced-token age: unset means the refresh window; out of range is refused', () => {
    expect(loadConfig(good).forcedMinAgeSeconds).toBeUndefined();
    expect(loadConfig({ ...good, BROKER_FORCED_MIN_AGE_SECONDS: '30' }).forcedMinAgeSeconds).toBe(
      30,
    );
    expect(failure({ ...good, BROKER_FORCED_MIN_AGE_SECONDS: '-1' })).toContain(
      'BROKER_FORCED_MIN_AGE_SECONDS must be a whole number',
    );
  });

  it('reads revokesOnReissue, and refuses a non-boolean', () => {
    const config = loadConfig(
      withConnection({
        variant: 'v3',
        baseUrl: 'https://a.example',
        secretId: 's',
        revokesOnReissue: false,
      }),
    );
    expect(config.connections.get('sandbox')?.revokesOnReissue).toBe(false);
    expect(
      failure(
        withConnection({
          variant: 'v3',
          baseUrl: 'https://a.example',
          secretId: 's',
          revokesOnReissue: 'no',
        }),
      ),
    ).toContain('field "revokesOnReissue"');
  });

  it('accepts a custom v3 code field', () => {
    const config = loadConfig(
      withConnection({
        variant: 'v3',
        baseUrl: 'https://a.example',
        secretId: 's',
        codeField: 'authCode',
      }),
    );
    expect(config.connections.get('sandbox')?.codeField).toBe('authCode');
  });

  describe('probe (verified reports)', () => {
    const v3 = { variant: 'v3', baseUrl: 'https://a.example', secretId: 's' };
    const probeOf = (probe: unknown) =>
      loadConfig(withConnection({ ...v3, probe })).connections.get('sandbox')?.probe;

    it('is off unless configured, and takes a path with a reuse interval of 5 s by default', () => {
      expect(loadConfig(withConnection(v3)).connections.get('sandbox')?.probe).toBeUndefined();
      expect(probeOf({ path: '/open-api/v3/ping' })).toEqual({
        path: '/open-api/v3/ping',
        intervalSeconds: 5,
      });
      expect(probeOf({ path: '/open-api/v3/orders?limit=1', intervalSeconds: 30 })).toEqual({
        path: '/open-api/v3/orders?limit=1',
        intervalSeconds: 30,
      });
      // Any variant: the business API is the same host.
      expect(
        loadConfig(
          withConnection({
            variant: 'legacy',
            baseUrl: 'https://a.example',
            secretId: 's',
            probe: { path: '/open-api/ping' },
          }),
        ).connections.get('sandbox')?.probe?.path,
      ).toBe('/open-api/ping');
    });

    it.each([
      [{ ...v3, prob: { path: '/p' } }, 'field "prob": unknown field (did you mean "probe"?)'],
      ['/open-api/v3/ping', 'field "probe": must be an object { "path", "intervalSeconds"? }'],
      [{}, 'field "probe.path": must be a path starting with "/"'],
      [{ path: 'open-api/v3/ping' }, 'field "probe.path": must be a path starting with "/"'],
      [{ path: 'https://evil.example/ping' }, 'field "probe.path": must be a path starting'],
      [{ path: '//evil.example/ping' }, 'field "probe.path": must be a path starting'],
      [{ path: '/ping#x' }, 'field "probe.path": must be a path starting'],
      [{ path: '/a b' }, 'field "probe.path": must be a path starting'],
      [{ path: '/open-api/../admin' }, 'field "probe.path": must not contain ".." segments'],
      [
        { path: '/ping', intervalSecond: 5 },
        'field "probe.intervalSecond": unknown field (did you mean "intervalSeconds"?); known: path, intervalSeconds',
      ],
      [{ Path: '/ping' }, 'field "probe.Path": unknown field (did you mean "path"?)'],
      [{ path: '/ping', intervalSeconds: 0 }, 'field "probe.intervalSeconds": must be a whole'],
      [{ path: '/ping', intervalSeconds: 61 }, 'from 1 to 60'],
      [{ path: '/ping', intervalSeconds: 1.5 }, 'field "probe.intervalSeconds"'],
      [{ path: '/ping', intervalSeconds: '5' }, 'field "probe.intervalSeconds"'],
    ])('rejects the probe %j, naming the field', (probe, message) => {
      const settings =
        typeof probe === 'object' && probe !== null && 'prob' in probe ? probe : { ...v3, probe };
      const text = failure(withConnection(settings));
      expect(text).toContain('BROKER_CONNECTIONS: connection "sandbox", ');
      expect(text).toContain(message);
    });
  });

  describe('signing (Strict Access Token Mode)', () => {
    const v3 = { variant: 'v3', baseUrl: 'https://a.example', secretId: 's' };
    const signingOf = (signing: unknown) =>
      loadConfig(withConnection({ ...v3, signing })).connections.get('sandbox')?.signing;

    it('signs v3 by default with {params} in hex, and takes false to turn it off', () => {
      expect(loadConfig(withConnection(v3)).connections.get('sandbox')?.signing).toEqual({
        stringToSign: '{params}',
        encoding: 'hex',
      });
      expect(signingOf(false)).toBe(false);
    });

    it('fills the fields an object leaves out with the defaults', () => {
      expect(signingOf({})).toEqual({ stringToSign: '{params}', encoding: 'hex' });
      expect(signingOf({ encoding: 'base64' })).toEqual({
        stringToSign: '{params}',
        encoding: 'base64',
      });
      expect(signingOf({ stringToSign: '{params}&timestamp={timestamp}' })).toEqual({
        stringToSign: '{params}&timestamp={timestamp}',
        encoding: 'hex',
      });
      expect(signingOf({ stringToSign: '{body}', encoding: 'base64' })).toEqual({
        stringToSign: '{body}',
        encoding: 'base64',
      });
    });

    it.each([
      [
        { ...v3, signing: true },
        'field "signing": must be false (no signing) or an object { "stringToSign"?, "encoding"? }',
      ],
      [
        { ...v3, signing: 'hex' },
        'field "signing": must be false (no signing) or an object { "stringToSign"?, "encoding"? }',
      ],
      [
        { ...v3, signing: { stringToSign: '{param}' } },
        'field "signing.stringToSign": unknown placeholder "{param}" (known: {params}, {timestamp}, {body})',
      ],
      [{ ...v3, signing: { stringToSign: '' } }, 'field "signing.stringToSign": must not be empty'],
      [
        { ...v3, signing: { stringToSign: 42 } },
        'field "signing.stringToSign": must be a string template',
      ],
      [
        { ...v3, signing: { encoding: 'HEX' } },
        'field "signing.encoding": must be "hex" or "base64"',
      ],
      [
        { ...v3, signing: { encodng: 'hex' } },
        'field "signing.encodng": unknown field (known: stringToSign, encoding)',
      ],
      [
        { variant: 'legacy', baseUrl: 'https://a.example', secretId: 's', signing: false },
        'field "signing": only applies to variant "v3"',
      ],
      [
        { variant: 'legacy', baseUrl: 'https://a.example', secretId: 's', signing: {} },
        'field "signing": only applies to variant "v3"',
      ],
    ])('refuses %j, naming the variable, the connection and the field', (settings, message) => {
      expect(failure(withConnection(settings))).toBe(
        `BROKER_CONNECTIONS: connection "sandbox", ${message}`,
      );
    });
  });

  it.each([
    ['http://127.0.0.1:8080', 'http://127.0.0.1:8080'],
    ['http://localhost:3000/', 'http://localhost:3000'],
    ['http://[::1]:9000', 'http://[::1]:9000'],
  ])('accepts plain http for the loopback host %s', (baseUrl, expected) => {
    const config = loadConfig(withConnection({ variant: 'v3', baseUrl, secretId: 's' }));
    expect(config.connections.get('sandbox')?.baseUrl).toBe(expected);
  });

  it.each([
    [{}, 'BROKER_TABLE_NAME is required'],
    [{ BROKER_TABLE_NAME: 'x' }, 'BROKER_TABLE_NAME is not a valid DynamoDB table name'],
    [{ BROKER_TABLE_NAME: 'tokens' }, 'BROKER_CONNECTIONS is required'],
    [
      { BROKER_TABLE_NAME: 'tokens', BROKER_CONNECTIONS: '{"a":' },
      'BROKER_CONNECTIONS is not valid JSON at line 1, column 6 (offset 5): expected a value, but the text ends',
    ],
    // Issue 38: where it breaks, never what is there (the parser's own message quotes it).
    [
      {
        BROKER_TABLE_NAME: 'tokens',
        BROKER_CONNECTIONS: '{\n  "a": {"variant": "v3",},\n  "b": {}\n}',
      },
      'BROKER_CONNECTIONS is not valid JSON at line 2, column 25 (offset 26): expected a property name in double quotes',
    ],
    [
      { BROKER_TABLE_NAME: 'tokens', BROKER_CONNECTIONS: '[]' },
      'BROKER_CONNECTIONS must be a JSON object',
    ],
    [{ BROKER_TABLE_NAME: 'tokens', BROKER_CONNECTIONS: '{}' }, 'at least one connection'],
  ])('rejects %j with a message naming the variable', (env, message) => {
    expect(failure(env)).toContain(message);
  });

  it.each([
    [{ variant: 'v2', baseUrl: 'https://a.example', secretId: 's' }, 'field "variant"'],
    [
      { variant: 'v3', baseUrl: 'http://api.example.com', secretId: 's' },
      'field "baseUrl": must use https://',
    ],
    [
      { variant: 'v3', baseUrl: 'http://10.0.0.1', secretId: 's' },
      'field "baseUrl": must use https://',
    ],
    [
      { variant: 'v3', baseUrl: 'not a url', secretId: 's' },
      'field "baseUrl": must be an absolute URL',
    ],
    [
      { variant: 'v3', baseUrl: 'https://u:p@a.example', secretId: 's' },
      'field "baseUrl": must not carry credentials',
    ],
    [{ variant: 'v3', baseUrl: 'https://a.example' }, 'field "secretId"'],
    [{ variant: 'v3', baseUrl: 'https://a.example', secretId: '  ' }, 'field "secretId"'],
    [
      { variant: 'v3', baseUrl: 'https://a.example', secretId: 's', callers: [] },
      'field "callers"',
    ],
    [
      { variant: 'v3', baseUrl: 'https://a.example', secretId: 's', callers: [''] },
      'field "callers.0"',
    ],
    [
      { variant: 'legacy', baseUrl: 'https://a.example', secretId: 's', codeField: 'x' },
      'field "codeField": only applies to variant "v3"',
    ],
    [{ variant: 'v3', baseUrl: 'https://a.example', secretId: 's', secretID: 'typo' }, 'secretID'],
  ])('rejects connection settings %j, naming the connection and the field', (settings, message) => {
    const text = failure(withConnection(settings));
    expect(text).toContain('BROKER_CONNECTIONS: connection "sandbox"');
    expect(text).toContain(message);
  });

  it('rejects a connection name that cannot be a URL path segment', () => {
    const env = {
      BROKER_TABLE_NAME: 'tokens',
      BROKER_CONNECTIONS: JSON.stringify({
        'a/b': { variant: 'v3', baseUrl: 'https://a.example', secretId: 's' },
      }),
    };
    expect(failure(env)).toContain('connection "a/b": the name must be');
  });

  it.each([
    ['BROKER_REFRESH_WINDOW_SECONDS', '-1'],
    ['BROKER_UPSTREAM_TIMEOUT_MS', 'fast'],
    ['BROKER_MEMORY_RECHECK_SECONDS', '1.5'],
    ['BROKER_MEMORY_RECHECK_SECONDS', '101'],
  ])('rejects %s=%s', (variable, value) => {
    expect(failure({ ...good, [variable]: value })).toContain(`${variable} must be a whole number`);
  });

  it('reads BROKER_KMS_KEY_ID as a key id, key ARN or alias, and refuses anything else', () => {
    expect(loadConfig(good).kmsKeyId).toBeUndefined();
    for (const id of [
      '1234abcd-12ab-34cd-56ef-1234567890ab',
      'arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab',
      'alias/token-broker',
      'arn:aws:kms:eu-west-1:123456789012:alias/token-broker',
    ]) {
      expect(loadConfig({ ...good, BROKER_KMS_KEY_ID: id }).kmsKeyId).toBe(id);
    }
    expect(failure({ ...good, BROKER_KMS_KEY_ID: 'my key' })).toContain(
      'BROKER_KMS_KEY_ID must be',
    );
  });

  it('reads BROKER_OPERATOR_CALLERS as comma-separated IAM ARN patterns, and refuses one that names none', () => {
    expect(loadConfig(good).operatorCallers).toBeUndefined();
    expect(
      loadConfig({
        ...good,
        BROKER_OPERATOR_CALLERS:
          ' arn:aws:iam::123456789012:role/ops , arn:aws:sts::123456789012:assumed-role/oncall-*/* ,',
      }).operatorCallers,
    ).toEqual([
      'arn:aws:iam::123456789012:role/ops',
      'arn:aws:sts::123456789012:assumed-role/oncall-*/*',
    ]);
    expect(loadConfig({ ...good, BROKER_OPERATOR_CALLERS: ' ' }).operatorCallers).toBeUndefined();
    for (const value of [',', ' , ']) {
      expect(failure({ ...good, BROKER_OPERATOR_CALLERS: value })).toContain(
        'BROKER_OPERATOR_CALLERS must name at least one IAM ARN pattern',
      );
    }
  });

  it('reads BROKER_URL_QUALIFIER as an alias name, and refuses $LATEST, a version or other characters', () => {
    expect(loadConfig(good).urlQualifier).toBeUndefined();
    expect(loadConfig({ ...good, BROKER_URL_QUALIFIER: ' ' }).urlQualifier).toBeUndefined();
    for (const alias of ['url', 'url-2', 'Url_alias', 'v1', 'a'.repeat(128)]) {
      expect(loadConfig({ ...good, BROKER_URL_QUALIFIER: alias }).urlQualifier).toBe(alias);
    }
    for (const value of ['$LATEST', '12', 'url:live', 'u r l', 'a'.repeat(129)]) {
      expect(failure({ ...good, BROKER_URL_QUALIFIER: value }), value).toContain(
        'BROKER_URL_QUALIFIER must be the name of the alias the Function URL serves',
      );
    }
  });

  it('refuses a refresh window that is not shorter than the maximum lifetime', () => {
    const env = {
      ...good,
      BROKER_REFRESH_WINDOW_SECONDS: '3600',
      BROKER_MAX_TOKEN_LIFETIME_SECONDS: '3600',
    };
    expect(failure(env)).toContain('BROKER_REFRESH_WINDOW_SECONDS must be shorter');
  });

  it('refuses a refresh window at or below the default minValidity, naming both (issue 24)', () => {
    for (const window of ['60', '30']) {
      expect(failure({ ...good, BROKER_REFRESH_WINDOW_SECONDS: window })).toBe(
        `BROKER_REFRESH_WINDOW_SECONDS (${window}) must be longer than BROKER_DEFAULT_MIN_VALIDITY_SECONDS (60): otherwise every routine refresh is a caller's forced replacement`,
      );
    }
    expect(
      loadConfig({
        ...good,
        BROKER_REFRESH_WINDOW_SECONDS: '30',
        BROKER_DEFAULT_MIN_VALIDITY_SECONDS: '29',
      }).refreshWindowSeconds,
    ).toBe(30);
  });

  it('refuses a misspelt BROKER_* variable, naming the one it most likely means (issue 24)', () => {
    expect(failure({ ...good, BROKER_REFRESH_WINDOW: '300' })).toBe(
      'BROKER_REFRESH_WINDOW is not a variable the broker reads (did you mean BROKER_REFRESH_WINDOW_SECONDS?); see docs/configuration.md',
    );
    expect(failure({ ...good, BROKER_LOCAL_SCHEDULE: '5' })).toContain(
      '(did you mean BROKER_LOCAL_SCHEDULE_SECONDS?)',
    );
    expect(failure({ ...good, BROKER_STORE_OUTAGE_GRACE_SECOND: '5' })).toContain(
      '(did you mean BROKER_STORE_OUTAGE_GRACE_SECONDS?)',
    );
    expect(failure({ ...good, BROKER_SOMETHING_ELSE_ENTIRELY: '1' })).toBe(
      'BROKER_SOMETHING_ELSE_ENTIRELY is not a variable the broker reads; see docs/configuration.md',
    );
  });

  it("accepts every BROKER_* variable the repository reads, the local runtime's included", () => {
    const env = {
      ...good,
      BROKER_LOCAL_SCHEDULE_SECONDS: '5',
      BROKER_LOCAL_TIMEOUT_MS: '10000',
      BROKER_LOCAL_EXPIRES_IN: '60',
      BROKER_LOCAL_SECRETS_FILE: 'secrets.json',
      BROKER_LOCAL_MAX_ENVIRONMENTS: '2',
      BROKER_LOCAL_IDLE_SHUTDOWN_SECONDS: '60',
      BROKER_LOCAL_FREEZE: 'false',
      BROKER_LAMBDA_EXTENSION: 'off',
      BROKER_CONNECTIONS_PARAMETER: '',
    };
    expect(loadConfig(env).tableName).toBe('tokens');
  });
});
