import { createHmac } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  DEFAULT_SIGNING,
  describeSigning,
  paramsString,
  type SigningConfig,
  signature,
  signingHeaders,
  stringToSign,
  templateProblem,
} from '../../../lib/upstream/signing.js';

// Known answers computed outside Node with `printf '%s' "$m" | openssl dgst -sha256 -hmac "$k"`
// (and `-binary | base64`), so that a mistake in the signer cannot be mirrored by the check.
const SECRET = 's3cr3t-ü';
const body = { code: 'c0de', clientId: 'v3-abc' };
const bodyText = JSON.stringify({ clientId: 'v3-abc', code: 'c0de' });
const input = { body, bodyText, timestamp: '1700000000' };
const scheme = (stringToSign: string, encoding: SigningConfig['encoding'] = 'hex') => ({
  stringToSign,
  encoding,
});

describe('Function: paramsString', () => {
  it('sorts the fields by key and joins key=value pairs with &', () => {
    expect(paramsString(body)).toBe('clientId=v3-abc&code=c0de');
  });

  it('sorts in UTF-8 byte order, not in UTF-16 code-unit order', () => {
    // U+FF61 is EF BD A1 in UTF-8 and U+1F600 is F0 9F 98 80: bytes put U+FF61 first, while
    // JavaScript's default sort (UTF-16 units D83D… before FF61) would put the emoji first.
    expect(paramsString({ '😀': 1, '｡': 2, B: 3, a: 4, é: 5 })).toBe('B=3&a=4&é=5&｡=2&😀=1');
  });

  it('sends values as they are: strings unquoted and not URL-encoded, others as JSON text', () => {
    expect(paramsString({ s: 'a b&c=d/é', n: 12, t: true, z: null, o: { k: 'v' } })).toBe(
      'n=12&o={"k":"v"}&s=a b&c=d/é&t=true&z=null',
    );
  });
});

describe('Function: stringToSign', () => {
  it.each([
    ['{params}', 'clientId=v3-abc&code=c0de'],
    ['{timestamp}{params}', '1700000000clientId=v3-abc&code=c0de'],
    ['{params}&timestamp={timestamp}', 'clientId=v3-abc&code=c0de&timestamp=1700000000'],
    ['{body}', '{"clientId":"v3-abc","code":"c0de"}'],
    [
      'POST\n/open-api/v3/oauth/access-token\n{timestamp}',
      'POST\n/open-api/v3/oauth/access-token\n1700000000',
    ],
  ])('fills %j', (template, expected) => {
    expect(stringToSign(template, input)).toBe(expected);
  });

  it('fills in one pass: a value that looks like a placeholder stays as it is', () => {
    expect(
      stringToSign('{params}|{timestamp}', {
        body: { code: '{timestamp}' },
        bodyText: '{"code":"{timestamp}"}',
        timestamp: '1',
      }),
    ).toBe('code={timestamp}|1');
  });
});

describe('Function: signature', () => {
  it.each([
    ['{params}', 'hex', 'cbeb20b0ca8ef55b889e4963c3f3322120d5a43d008b82691b273b8c8cfbd884'],
    ['{params}', 'base64', 'y+sgsMqO9VuInkljw/MyISDVpD0Ai4JpGyc7jIz72IQ='],
    [
      '{timestamp}{params}',
      'hex',
      '99a6e586095a45879db8e241cf13917c03d0bc8f220b9b915d4cdbe883acd975',
    ],
    [
      '{params}&timestamp={timestamp}',
      'hex',
      '0bace33a563c5ceddeb439cf9ec51789e1be9cfc90855f70f896159810aa79e9',
    ],
    ['{body}', 'base64', 'tbPAIqI/C7oQSqQ8C+WK56l+eXlGnFHfu0apMFa034M='],
  ] as const)('signs %j as %s like openssl does', (template, encoding, expected) => {
    expect(signature(SECRET, scheme(template, encoding), input)).toBe(expected);
  });

  it('defaults to {params} in lowercase hex', () => {
    expect(DEFAULT_SIGNING).toEqual({ stringToSign: '{params}', encoding: 'hex' });
    expect(signature(SECRET, DEFAULT_SIGNING, input)).toMatch(/^[0-9a-f]{64}$/);
  });

  it('is an HMAC-SHA256 of the filled template keyed with the secret, for any body', () => {
    fc.assert(
      fc.property(
        fc.dictionary(fc.string(), fc.string()),
        fc.string({ minLength: 1 }),
        (fields, secret) => {
          const text = JSON.stringify(fields);
          const filled = `${Object.keys(fields)
            .sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)))
            .map((k) => `${k}=${fields[k]}`)
            .join('&')}#${text}`;
          const expected = createHmac('sha256', secret).update(filled).digest('hex');
          expect(
            signature(secret, scheme('{params}#{body}'), {
              body: fields,
              bodyText: text,
              timestamp: '0',
            }),
          ).toBe(expected);
        },
      ),
      { numRuns: 300 },
    );
  });
});

describe('Function: signingHeaders', () => {
  it('sends Unix seconds of the given clock and the signature over them', () => {
    const headers = signingHeaders(
      SECRET,
      scheme('{timestamp}{params}'),
      { body, bodyText },
      1_700_000_000_999,
    );
    expect(headers).toEqual({
      'x-timestamp': '1700000000',
      'x-signature': '99a6e586095a45879db8e241cf13917c03d0bc8f220b9b915d4cdbe883acd975',
    });
  });
});

describe('Function: templateProblem', () => {
  it.each([
    '{params}',
    '{timestamp}{params}',
    '{params}&timestamp={timestamp}',
    '{body}',
    'literal text',
  ])('accepts %j', (template) => {
    expect(templateProblem(template)).toBeUndefined();
  });

  it.each([
    ['', 'must not be empty'],
    ['{param}', 'unknown placeholder "{param}"'],
    ['{ params }', 'unknown placeholder "{ params }"'],
    ['{params}{}', 'unknown placeholder "{}"'],
    ['{Timestamp}', 'unknown placeholder "{Timestamp}"'],
  ])('refuses %j', (template, message) => {
    expect(templateProblem(template)).toContain(message);
  });
});

describe('Function: describeSigning', () => {
  it('names the template and the encoding', () => {
    expect(describeSigning(scheme('{body}', 'base64'))).toBe(
      'stringToSign "{body}", encoding "base64"',
    );
  });
});

describe('Function: paramsString', () => {
  it('leaves out undefined fields, as the JSON body does', () => {
    expect(paramsString({ b: '2', u: undefined, a: '1' })).toBe('a=1&b=2');
  });
});
