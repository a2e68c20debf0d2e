/**
 * The cut-over figures of the benchmarks (bench/measures.ts). At a cut-over each busy container
 * has about one caller that waits for the successor (its proof ran out before the successor was
 * stored), so 4 containers and 2 cut-overs give 8 waits among about 800 callers: the p99 of all
 * callers is either the shortest of them or a caller that did not wait, by how many callers
 * came (hot-key runs of 2026-11-26: 722 callers gave 543 ms, 848 gave 21 ms, the waits alike).
 * Each container's slowest caller per cut-over does not depend on that count.
 */
import { describe, expect, it } from 'vitest';
import {
  itemLoad,
  percentile,
  slowestPerContainerAtCutOver,
  waitsAtCutOver,
} from '../bench/measures.js';

const WINDOW = { beforeMs: 1_000, afterMs: 200 };
const ISSUANCES = [0, 30_000, 60_000];

/** 4 containers, `fast` 5 ms callers each per cut-over, and one caller each that waited. */
const callsOf = (fast: number) =>
  ISSUANCES.slice(1).flatMap((issued) =>
    [0, 1, 2, 3].flatMap((container) => [
      { container, at: issued - 500, took: 550 + 10 * container },
      ...Array.from({ length: fast }, (_, i) => ({
        container,
        at: issued - 1_000 + (i * 1_200) / fast,
        took: 5,
      })),
    ]),
  );

describe('the callers at a cut-over', () => {
  it('p99 of all callers flips with their count; the slowest per container does not', () => {
    const few = callsOf(98); // 8 + 784 = 792 callers
    const many = callsOf(105); // 8 + 840 = 848 callers
    expect(percentile(waitsAtCutOver(few, ISSUANCES, WINDOW), 99)).toBe(550);
    expect(percentile(waitsAtCutOver(many, ISSUANCES, WINDOW), 99)).toBe(5);
    for (const calls of [few, many]) {
      expect(slowestPerContainerAtCutOver(calls, ISSUANCES, WINDOW)).toEqual([
        550, 560, 570, 580, 550, 560, 570, 580,
      ]);
    }
  });

  it('leaves out the first issuance, callers outside the window, and containers with none', () => {
    const calls = [
      { container: 0, at: -10, took: 900 }, // the fleet's first token
      { container: 0, at: 30_000 - 1_001, took: 800 }, // before the window
      { container: 0, at: 30_000 + 201, took: 700 }, // after it
      { container: 0, at: 30_000 + 200, took: 7 },
      { container: 1, at: 30_000 - 1_000, took: 3 },
      { container: 1, at: 30_000, took: 400 },
    ];
    expect(slowestPerContainerAtCutOver(calls, [0, 30_000], WINDOW)).toEqual([7, 400]);
  });
});

describe('one item’s load at scale (the hot key with read copies)', () => {
  it('is the main item’s reads, or the copies’ shared by their number, whichever is more', () => {
    expect(itemLoad(new Map([['token#sandbox', 12]]), 0)).toBe(12);
    // Copies read at random: 30 reads over 3 copies is 10 each at scale, however this run drew.
    const drawn = new Map([
      ['token#sandbox', 4],
      ['copy#0#token#sandbox', 16],
      ['copy#1#token#sandbox', 9],
      ['copy#2#token#sandbox', 5],
    ]);
    expect(itemLoad(drawn, 3)).toBe(10);
    // The main item is read by each container first, not at random: its reads stand alone.
    expect(itemLoad(new Map([...drawn, ['token#sandbox', 14]]), 3)).toBe(14);
  });
});
