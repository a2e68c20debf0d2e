import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { allowsCaller } from '../../lib/callers.js';

const role = 'arn:aws:sts::123456789012:assumed-role/orders-service/i-0abc';

describe('Function: allowsCaller', () => {
  it('allows everyone when no allowlist is configured', () => {
    expect(allowsCaller(undefined, role)).toBe(true);
    expect(allowsCaller(undefined, undefined)).toBe(true);
  });

  it('matches assumed-role ARNs with IAM-style globs', () => {
    expect(allowsCaller(['arn:aws:sts::123456789012:assumed-role/orders-service/*'], role)).toBe(
      true,
    );
    expect(allowsCaller(['arn:aws:sts::123456789012:assumed-role/orders-*/*'], role)).toBe(true);
    expect(allowsCaller(['arn:aws:sts::123456789012:assumed-role/billing/*'], role)).toBe(false);
    expect(
      allowsCaller(['arn:aws:sts::12345678901?:assumed-role/orders-service/i-0ab?'], role),
    ).toBe(true);
  });

  it('matches the whole ARN, not a prefix, and treats regex characters literally', () => {
    expect(allowsCaller(['arn:aws:sts::123456789012:assumed-role/orders-service'], role)).toBe(
      false,
    );
    expect(allowsCaller(['arn:aws:sts::123456789012:assumed-role/orders.service/*'], role)).toBe(
      false,
    );
  });

  it('refuses a caller without identity when an allowlist exists', () => {
    expect(allowsCaller(['*'], undefined)).toBe(false);
    expect(allowsCaller(['*'], '')).toBe(false);
  });

  it('a pattern equal to the ARN always matches, whatever characters it holds', () => {
    fc.assert(
      fc.property(
        fc.string({ minLength: 1 }).filter((s) => !s.includes('*') && !s.includes('?')),
        (arn) => allowsCaller([arn], arn),
      ),
    );
  });
});
