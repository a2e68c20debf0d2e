/**
 * Read copies of the token item (ADR 0024, issue 25's hot key): the operator sets 3 copies on
 * the item before the callers start (`setCopies`, what `npm run copies` runs), and writers are
 * stopped between the main item and its copies: the write lands on the main item, its copies'
 * puts never arrive, and the container is SIGSTOPped. A copy then lags; readers of it must never
 * be handed a token the upstream revoked (the ledger's I2), and a refused write brings the copies
 * forward.
 *
 * Imported by `scenarios.ts` (the suite's order); it uses that module's helpers only inside the
 * scenarios' functions, so the import cycle is harmless.
 */
import { DynamoDBTokenStore } from '../lib/adapters/dynamodb-token-store.js';
import { localDynamoDBClient } from '../local/dynamodb-local.js';
import type { RunSettings, Scenario, ScenarioContext } from './harness.js';
import { countdownOf, type DynamodbWrite, dynamodbWrite, trigger } from './scenarios.js';

/** How many copies the scenario sets. */
const COPIES = 3;

/**
 * A busy fleet (the suite's default callers, a request every 0–80 ms per container), 20 s tokens
 * and the 9 s window: the cold start and three refreshes in 45 s, every read of a copy.
 */
const COPIES_FLEET: Partial<RunSettings> = { durationMs: 45_000 };

/** Past the 3 s lease and a counting lease, so the writer's lease is taken over meanwhile. */
const STEP_STOP_MS = 15_000;
/** Past the confirmation's budget and grace: its lease is let go or taken over meanwhile. */
const PUT_STOP_MS = 10_000;

/** Sets the copies, as the operator's command does, on the fleet's table. */
const setCopies = async (context: ScenarioContext): Promise<void> => {
  const client = localDynamoDBClient(context.table.url);
  try {
    await new DynamoDBTokenStore(client, context.table.name).setCopies('sandbox', COPIES);
    context.inject(`npm run copies: ${COPIES} read copies of the sandbox item`);
  } finally {
    client.destroy();
  }
};

/**
 * On every container's DynamoDB link: the first copy put after a main write of kind `after`
 * (and a countdown of 3 or more, for a step) stops the writer there. Its copy puts are dropped
 * (never reach the table, never answered) while it is stopped, and it is SIGSTOPped for `ms`.
 */
const stopBeforeCopies =
  (shots: readonly { readonly after: DynamodbWrite; readonly ms: number }[]) =>
  (context: ScenarioContext) => {
    const fires = shots.map(() => trigger(context, { max: 1, cooldownMs: 0, afterMs: 5_000 }));
    let next = 0;
    for (const node of context.nodes) {
      let last: { kind: DynamodbWrite; countdown: number } | undefined;
      let droppingUntil = Number.NEGATIVE_INFINITY;
      node.dynamodb.setHooks({
        onRequest: (request) => {
          const kind = dynamodbWrite(request);
          if (kind !== 'copy') {
            if (kind !== 'other') last = { kind, countdown: countdownOf(request) };
            return undefined;
          }
          if (context.elapsed() < droppingUntil) return { kind: 'drop' };
          const shot = shots[next];
          if (
            !shot ||
            last?.kind !== shot.after ||
            (shot.after === 'heartbeat' && last.countdown < 3) ||
            !fires[next]?.()
          ) {
            return undefined;
          }
          next += 1;
          // The run's check exempts a SIGSTOPped container's callers: its fault says SIGSTOP first.
          context.inject(
            `SIGSTOP ${shot.ms} ms between the main item and its copies (${shot.after}): copy puts dropped`,
            node.index,
          );
          droppingUntil = context.elapsed() + shot.ms;
          context.pause(node.index, shot.ms);
          return { kind: 'drop' };
        },
      });
    }
  };

export const COPIES_SCENARIOS: readonly Scenario[] = [
  {
    name: 'copies-writer-stopped',
    injects: `${COPIES} read copies set before the callers; a countdown step's writer stopped after the main item, before its copies (SIGSTOP ${STEP_STOP_MS / 1000} s, its copy puts dropped), then a token writer the same way (${PUT_STOP_MS / 1000} s)`,
    settings: COPIES_FLEET,
    install: async (context) => {
      await setCopies(context);
      stopBeforeCopies([
        { after: 'heartbeat', ms: STEP_STOP_MS },
        { after: 'put', ms: PUT_STOP_MS },
      ])(context);
    },
  },
];
