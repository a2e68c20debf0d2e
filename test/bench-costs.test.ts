/**
 * The benchmark's cost per refresh is stated for the function the stack deploys: its memory
 * and architecture are read from serverless.yml, and priced at that architecture's rate.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  ARCHITECTURE,
  afterResponseCost,
  deployedFunction,
  MEMORY_MB,
  PRICE_PER_GB_SECOND_USD,
} from '../bench/execution-model.js';
import type { HotKeyResult } from '../bench/hot-key.js';
import { root } from './support/build.js';

describe('Benchmark: the cost of the work after the response', () => {
  it('is priced for the memory and architecture serverless.yml deploys (512 MB, arm64)', () => {
    const yml = readFileSync(join(root, 'serverless.yml'), 'utf8');
    const provider = yml.slice(yml.indexOf('\nprovider:'));
    expect(provider).toMatch(/\n {2}memorySize: 512\n/);
    expect(provider).toMatch(/\n {2}architecture: arm64\n/);
    expect({ MEMORY_MB, ARCHITECTURE, PRICE_PER_GB_SECOND_USD }).toEqual({
      MEMORY_MB: 512,
      ARCHITECTURE: 'arm64',
      PRICE_PER_GB_SECOND_USD: 0.0000133334,
    });
    // The run in docs/benchmarks.md: 17,051.7 ms billed after the response over 3 refreshes.
    const run = {
      billing: { invocations: 397, billedMs: 22_565, durationMs: 5_513.3, keptThawed: 3 },
      refreshes: 3,
    } as unknown as HotKeyResult;
    expect(afterResponseCost(run).perRefreshUsd).toBeCloseTo(0.0000379, 7);
  });

  it('reads the provider block only, with Lambda’s defaults where it sets nothing', () => {
    const yml = (provider: string) =>
      `params:\n  dev:\n    memorySize: 64\nprovider:\n  name: aws\n${provider}\nfunctions:\n  f:\n    memorySize: 2048\n`;
    expect(deployedFunction(yml('  memorySize: 256\n  architecture: x86_64'))).toEqual({
      memoryMb: 256,
      architecture: 'x86_64',
    });
    expect(deployedFunction(yml('  runtime: nodejs24.x'))).toEqual({
      memoryMb: 1024,
      architecture: 'x86_64',
    });
    expect(() => deployedFunction(yml('  architecture: sparc'))).toThrow(
      "serverless.yml: unknown architecture 'sparc'",
    );
  });
});
