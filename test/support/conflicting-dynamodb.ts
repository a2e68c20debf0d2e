/**
 * A DynamoDB endpoint in front of another (dynalite) that answers every write with MRSC's
 * `ReplicatedWriteConflictException` a set number of times before it lets it through (issue 26):
 * the store's contract must hold when every conditional write conflicts. A write is known by
 * its body: the SDK's retry and the store's own retry send the same one. With the production
 * client's two attempts, two conflicts on a write exercise both: the SDK's retry absorbs the
 * first, the store's retry the second. How many conflicts each new write gets cycles through
 * `pattern` (by default 2, 1, 0: both retries, the SDK's alone, none), so that every kind of write
 * in a suite meets every path while the SDK's backoff (0–24 ms a retry) stays a small cost.
 */
import { createHash } from 'node:crypto';
import { startFaultProxy } from '../../chaos/proxy.js';
import { classifyRequest, conflictAnswer } from '../../chaos/regions.js';

export interface ConflictingEndpoint {
  readonly url: string;
  /** Conflicts answered so far. */
  conflicts(): number;
  close(): Promise<void>;
}

export const startConflictingEndpoint = async (
  target: string,
  { pattern = [2, 1, 0] }: { pattern?: readonly number[] } = {},
): Promise<ConflictingEndpoint> => {
  /** Conflicts still to answer, per write (by body). */
  const owed = new Map<string, number>();
  let writes = 0;
  let conflicts = 0;
  const proxy = await startFaultProxy({
    target,
    label: 'conflicting-dynamodb',
    hooks: {
      onRequest: (request) => {
        if (classifyRequest(request).kind !== 'write') return undefined;
        const write = createHash('sha256').update(request.body).digest('hex');
        if (!owed.has(write)) {
          owed.set(write, pattern[writes % pattern.length] ?? 0);
          writes += 1;
        }
        const left = owed.get(write) ?? 0;
        if (left === 0) {
          owed.delete(write);
          return undefined;
        }
        owed.set(write, left - 1);
        conflicts += 1;
        return { kind: 'answer', response: conflictAnswer() };
      },
    },
  });
  return { url: proxy.url, conflicts: () => conflicts, close: () => proxy.close() };
};
