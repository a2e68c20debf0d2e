/**
 * local/loop-delay.ts: an environment's event-loop delays net of the spans it was meant to be
 * stopped (its freezes, a pause the chaos harness injected). The sampler itself runs in
 * test/lambda-container.test.ts, in a real environment.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { covered, netDelays, readGaps, union } from '../local/loop-delay.js';

describe('Function: union and covered', () => {
  it('merges overlapping spans and measures what they cover of another', () => {
    const spans = union([
      { from: 50, to: 60 },
      { from: 0, to: 10 },
      { from: 5, to: 20 },
      { from: 30, to: 30 },
    ]);
    expect(spans).toEqual([
      { from: 0, to: 20 },
      { from: 50, to: 60 },
    ]);
    expect(covered({ from: 10, to: 55 }, spans)).toBe(15);
    expect(covered({ from: 20, to: 50 }, spans)).toBe(0);
  });
});

describe('Function: netDelays', () => {
  it('counts a gap less the timer interval and less the excluded spans; the worst first', () => {
    const gaps = [
      { from: 0, to: 110 }, // 100 ms late, none excluded
      { from: 200, to: 1_230 }, // a 1 s freeze inside: 20 ms late outside it
      { from: 2_000, to: 2_012 }, // 2 ms late: under the floor
    ];
    const delays = netDelays(gaps, [{ from: 210, to: 1_210 }]);
    expect(delays.map((d) => Math.round(d.delayMs))).toEqual([100, 20]);
  });

  it('reads the gaps a sampler wrote, skipping lines that are not two times', () => {
    const dir = mkdtempSync(join(tmpdir(), 'loop-delay-'));
    try {
      const file = join(dir, 'gaps');
      writeFileSync(file, '10.5 40.5\nnonsense\n50 45\n60 90.25\n');
      expect(readGaps(file)).toEqual([
        { from: 10.5, to: 40.5 },
        { from: 60, to: 90.25 },
      ]);
      expect(readGaps(join(dir, 'none'))).toEqual([]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
