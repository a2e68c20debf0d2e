/**
 * A caller's request is recognised without the schema library when it is valid (issue 25): the
 * plain check and the zod schema must give the same request whenever the plain one answers,
 * and the refusals (from the schema, loaded then) keep their messages.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { judgeRequest } from '../../functions/broker/request-schema.js';
import { parseInvokeRequest, plainRequest } from '../../functions/broker/requests.js';
import { BadRequestError } from '../../lib/errors.js';

const value = fc.oneof(
  fc.constantFrom('', 'sandbox', 'x'.repeat(200), 'x'.repeat(201), 0, -1, 1.5, 60, 1e9, 1e9 + 1),
  fc.string({ maxLength: 4 }),
  fc.integer(),
  fc.double(),
  fc.boolean(),
  fc.constant(null),
);
const request = fc.oneof(
  fc.record(
    {
      action: fc.constantFrom('getToken', 'invalidate', 'status', 'warmUp', 'ready', 'other'),
      connection: value,
      minValidity: value,
      accessToken: value,
      extra: value,
    },
    { requiredKeys: [] },
  ),
  value,
);

describe('Function: plainRequest (a request recognised without the schema)', () => {
  it('gives the request the schema gives, whenever it answers', () => {
    fc.assert(
      fc.property(request, (candidate) => {
        const plain = plainRequest(candidate);
        if (plain === undefined) return;
        expect(judgeRequest(candidate)).toEqual({ data: plain });
      }),
      { numRuns: 5_000, seed: 25 },
    );
  });

  it('recognises every valid request of each action', () => {
    for (const candidate of [
      { action: 'getToken', connection: 'sandbox' },
      { action: 'getToken', connection: 'sandbox', minValidity: 0 },
      { action: 'getToken', connection: 'x'.repeat(200), minValidity: 1_000_000_000 },
      { action: 'invalidate', connection: 'sandbox', accessToken: 't' },
      { action: 'status' },
      { action: 'warmUp' },
      { action: 'ready' },
    ]) {
      expect(plainRequest(candidate)).toEqual(candidate);
      expect(judgeRequest(candidate)).toEqual({ data: candidate });
    }
  });
});

describe('Function: parseInvokeRequest', () => {
  it('refuses what the plain check does not recognise with the schema’s issue, named', async () => {
    for (const [candidate, message] of [
      [
        { action: 'getToken', connection: 'sandbox', minvalidity: 5 },
        'Invalid direct invoke: unknown field "minvalidity"',
      ],
      [
        { action: 'getToken', connection: 'sandbox', minValidity: 1.5 },
        'Invalid direct invoke: "minValidity": must be a whole number of seconds from 0 to 1000000000',
      ],
      [
        { action: 'invalidate', connection: 'sandbox' },
        'Invalid direct invoke: "accessToken": must be a string of 1 to 8192 characters',
      ],
      [
        { action: 'nope' },
        'Invalid direct invoke: "action": must be "getToken", "invalidate", "status", "warmUp" or "ready"',
      ],
    ] as const) {
      await expect(parseInvokeRequest(candidate)).rejects.toThrow(BadRequestError);
      await expect(parseInvokeRequest(candidate)).rejects.toThrow(message);
    }
  });
});
