/**
 * A test file's whole handler over the local stack (local/stack.ts): before its tests, the
 * stack started and the broker's environment applied (the stack's own, `BROKER_CONNECTIONS`
 * built on the simulator's URL, and the file's settings), and everything written captured, not
 * printed (`captureOutput`); after them, all undone. Call it at the top of the file: its hooks
 * run before the file's own. Read `stack` and `output` in tests and hooks only.
 */
import { afterAll, beforeAll } from 'vitest';
import { applyEnv, type Stack, startStack } from '../../local/stack.js';
import { captureOutput } from './lambda.js';

export interface LocalStackSetup {
  /** `BROKER_CONNECTIONS`, given the simulator's URL. */
  readonly connections: (url: string) => Record<string, unknown>;
  /** The broker's other settings. */
  readonly env?: Readonly<Record<string, string>>;
  /** `startStack`'s arguments. */
  readonly start?: Parameters<typeof startStack>;
}

export const useLocalStack = (setup: LocalStackSetup) => {
  let stack: Stack | undefined;
  let output: ReturnType<typeof captureOutput> | undefined;
  beforeAll(async () => {
    stack = await startStack(...(setup.start ?? []));
    applyEnv({
      ...stack.env,
      BROKER_CONNECTIONS: JSON.stringify(setup.connections(stack.simulator.url)),
      ...setup.env,
    });
    output = captureOutput();
  });
  afterAll(async () => {
    output?.stop();
    await stack?.close();
  });
  const started = <T>(value: T | undefined): T => {
    if (value === undefined) throw new Error('useLocalStack: read in a test or a hook only');
    return value;
  };
  return {
    get stack(): Stack {
      return started(stack);
    },
    get output(): ReturnType<typeof captureOutput> {
      return started(output);
    },
  };
};
