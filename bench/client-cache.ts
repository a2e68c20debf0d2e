/**
 * The guarantee where the token is used: a busy service process with the client's default
 * options, against one broker container, with the warm-up on and another caller forcing a
 * replacement now and then. Every token `provider()` hands out goes to the Open API's protected
 * ping; the figure is how many of those uses the upstream refused.
 *
 * `before` is the 0.4.0 client's cache policy, reproduced by a transport that tells the client
 * it may reuse each token until it expires (0.4.0 kept a token until `marginSeconds` before
 * its expiry, whatever the broker did); `after` is the client as shipped.
 */
import { createTokenClient, type Transport } from '../client/src/index.js';
import { createTransport } from '../client/src/transports.js';
import { startLambdaContainer } from '../local/lambda-container.js';
import { scheduledEvent } from '../local/lambda-events.js';
import type { Stack } from '../local/stack.js';

export interface ClientCacheSettings {
  readonly mode: 'before' | 'after';
  readonly bundle: string;
  readonly runner: string;
  readonly env: Record<string, string>;
  readonly durationMs: number;
  /** Concurrent loops in the one service process, each using a token every `thinkMs`. */
  readonly loops: number;
  readonly thinkMs: number;
  readonly warmUpEveryMs: number;
  /** Another caller asks for `forceMinValidity` this often: a replacement each time. */
  readonly forceEveryMs: number;
  readonly forceMinValidity: number;
}

export interface ClientCacheResult {
  readonly mode: 'before' | 'after';
  readonly uses: number;
  readonly refused: number;
  readonly refusedPerThousand: number;
  /** Tokens the upstream issued during the run: each one revoked its predecessor. */
  readonly issuances: number;
  readonly getTokenCalls: number;
  readonly brokerCalls: number;
  readonly brokerCallsPerMinute: number;
  /** Share of `getToken` calls the client's cache answered. */
  readonly cacheHitShare: number;
  readonly errors: number;
}

export const measureClientCache = async (
  stack: Stack,
  settings: ClientCacheSettings,
): Promise<ClientCacheResult> => {
  // Always running, as this run was measured: it measures the client's cache, not Lambda's.
  const container = await startLambdaContainer({
    execution: 'always-running',
    runner: settings.runner,
    bundle: settings.bundle,
    env: settings.env,
  });
  const issuedBefore = stack.simulator.stats().issuances;
  const inner = createTransport({ type: 'http', url: container.url }, { warn: () => undefined });
  let brokerCalls = 0;
  const transport: Transport = {
    async send(operation, options) {
      if (operation.action === 'getToken') brokerCalls += 1;
      const body = (await inner.send(operation, options)) as Record<string, unknown>;
      if (settings.mode === 'after' || typeof body?.expiresAt !== 'string') return body;
      return { ...body, maxAgeMs: Date.parse(body.expiresAt) - Date.now() };
    },
  };
  const client = createTokenClient({ transport, onWarning: () => undefined });
  const provide = client.provider('sandbox');
  let uses = 0;
  let refused = 0;
  let getTokenCalls = 0;
  let errors = 0;
  const end = Date.now() + settings.durationMs;
  const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

  const loop = async () => {
    while (Date.now() < end) {
      try {
        getTokenCalls += 1;
        const token = await provide();
        const response = await fetch(`${stack.simulator.url}/open-api/v3/ping`, {
          headers: { 'x-access-token': token },
        });
        await response.body?.cancel();
        uses += 1;
        if (response.status === 401) refused += 1;
      } catch {
        errors += 1;
      }
      await sleep(settings.thinkMs);
    }
  };
  const every = (ms: number, tick: () => Promise<unknown>) => {
    const timer = setInterval(() => void tick().catch(() => undefined), ms);
    return () => clearInterval(timer);
  };
  const stopWarmUp = every(settings.warmUpEveryMs, () => container.invoke(scheduledEvent()));
  const stopForcing = every(settings.forceEveryMs, () =>
    container.invoke({
      action: 'getToken',
      connection: 'sandbox',
      minValidity: settings.forceMinValidity,
    }),
  );
  try {
    await container.invoke(scheduledEvent());
    await Promise.all(Array.from({ length: settings.loops }, loop));
  } finally {
    stopWarmUp();
    stopForcing();
    await container.close();
  }
  return {
    mode: settings.mode,
    uses,
    refused,
    refusedPerThousand: uses === 0 ? 0 : (1000 * refused) / uses,
    issuances: stack.simulator.stats().issuances - issuedBefore,
    getTokenCalls,
    brokerCalls,
    brokerCallsPerMinute: brokerCalls / (settings.durationMs / 60_000),
    cacheHitShare: getTokenCalls === 0 ? 0 : 1 - brokerCalls / getTokenCalls,
    errors,
  };
};
