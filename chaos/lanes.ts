/**
 * Which scenarios run side by side (`npm run chaos`, two lanes by default). Each run has its own
 * stack, proxies and containers, so two runs share nothing but the machine's cores; what must
 * not share them is two busy fleets (callers 20–60 ms apart, four containers each), whose load
 * would add event-loop and scheduling delays to each other's timing. So every busy scenario runs
 * in the first lane, one after the other, as before; the mostly idle fleets (a request every
 * 0.45–1.35 s per container: issue 17's, and issue 26's three regions) run beside them in the
 * other lanes. Timing stays real in all. `--lanes 3` splits the idle fleets over two lanes (the
 * suite then lasts about its busy lane), at the price of a third fleet on two cores.
 */
import { DEFAULT_SETTINGS, type Scenario } from './harness.js';

/** A fleet whose callers pause this long or more between requests is mostly idle. */
export const IDLE_THINK_MS = 500;

/** Whether a scenario's callers keep its containers busy. */
export const isBusy = (scenario: Scenario): boolean =>
  (scenario.settings?.thinkMs ?? DEFAULT_SETTINGS.thinkMs) < IDLE_THINK_MS;

/** How many runs a scenario gets: `--runs` if given, else its own, else one. */
export const runsOf = (scenario: Scenario, runs: number | undefined): number =>
  runs ?? scenario.runs ?? 1;

/** Its run time in all (ms): what the lanes are balanced on. */
export const estimateMs = (scenario: Scenario, runs: number | undefined): number =>
  (scenario.settings?.durationMs ?? DEFAULT_SETTINGS.durationMs) * runsOf(scenario, runs);

/**
 * Splits `scenarios` into at most `lanes` lanes, each run one scenario after the other: every
 * busy scenario in the first lane, in the given order; the idle ones, longest first, each into
 * the lane with the least run time so far. Empty lanes are dropped; one lane is the given order.
 */
export const planLanes = (
  scenarios: readonly Scenario[],
  runs: number | undefined,
  lanes: number,
): Scenario[][] => {
  if (lanes <= 1) return scenarios.length > 0 ? [[...scenarios]] : [];
  const plan: Scenario[][] = Array.from({ length: lanes }, () => []);
  const totals = plan.map(() => 0);
  const first = plan[0] as Scenario[];
  for (const scenario of scenarios.filter(isBusy)) {
    first.push(scenario);
    totals[0] = (totals[0] ?? 0) + estimateMs(scenario, runs);
  }
  const idle = scenarios
    .filter((s) => !isBusy(s))
    .toSorted((a, b) => estimateMs(b, runs) - estimateMs(a, runs));
  for (const scenario of idle) {
    const lane = totals.indexOf(Math.min(...totals));
    plan[lane]?.push(scenario);
    totals[lane] = (totals[lane] ?? 0) + estimateMs(scenario, runs);
  }
  return plan.filter((lane) => lane.length > 0);
};
