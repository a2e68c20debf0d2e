/**
 * Regions of a multi-Region strongly consistent (MRSC) DynamoDB global table, emulated in front
 * of one dynalite (issue 26): one proxy per region, each region's containers reach the one
 * table through it. No emulator supports MRSC, so the three things in which MRSC differs from
 * one region are added here, per request, from the `x-amz-target` operation and its body:
 *
 * - **Latency.** A write (`PutItem`, `UpdateItem`, `DeleteItem`) and a strongly consistent read
 *   (`GetItem` with `ConsistentRead`) return only after another region has it: each is held
 *   for its region's `latencyMs` plus up to `jitterMs`, then forwarded, so it takes effect at
 *   the end of that time (its linearisation point) and is answered at once. Eventually
 *   consistent reads, and everything else (`CreateTable`, ...), pass at local speed.
 * - **Conflicts.** Two writes to one item from different regions **race** when they are in
 *   flight at the same time: the later one arrived at its proxy while the earlier one was still
 *   held there (not yet applied). With conflicts on, the later one is answered
 *   `ReplicatedWriteConflictException` (HTTP 400) once its own latency has passed, and is never
 *   applied: MRSC's "not applied, retry-safe". The earlier one goes through. The body is what
 *   the SDK reads (`@smithy/core` `loadJsonRpcErrorCode`: `__type`, after its `#`), in the shape
 *   DynamoDB answers every JSON error with; the message text is ours.
 * - **Isolation.** A region cut off from the others cannot reach a quorum: its writes and strong
 *   reads hang (never forwarded, never answered: the SDK's request timeout fires) or fail
 *   (HTTP 500 `InternalServerError` after its latency), whichever `isolate` is given. Its
 *   eventually consistent reads still answer, from the one table: "may answer stale" is not
 *   modelled (the broker makes none).
 */
import type { IncomingHttpHeaders } from 'node:http';
import {
  type FaultProxy,
  type ProxiedRequest,
  type ProxiedResponse,
  type RequestFault,
  startFaultProxy,
} from './proxy.js';
import { trackedSleep } from './tracked-sleep.js';

export interface RegionSpec {
  readonly name: string;
  /** Added to every write and strongly consistent read of this region (ms). */
  readonly latencyMs: number;
}

/** Three regions of one MRSC region set, with the latencies of the simulation. */
export const THREE_REGIONS: readonly RegionSpec[] = [
  { name: 'us-east-1', latencyMs: 25 },
  { name: 'us-east-2', latencyMs: 70 },
  { name: 'us-west-2', latencyMs: 95 },
];

export type Isolation = 'hang' | 'fail';

export interface RegionStats {
  writes: number;
  strongReads: number;
  /** Writes answered ReplicatedWriteConflictException (not applied). */
  conflicts: number;
  /** Writes and strong reads that hung or failed while the region was isolated. */
  isolated: number;
}

export interface RegionLink {
  readonly name: string;
  /** The region's endpoint: what its containers use as `AWS_ENDPOINT_URL_DYNAMODB`. */
  readonly url: string;
  readonly proxy: FaultProxy;
  isolate(how?: Isolation): void;
  heal(): void;
  isolated(): boolean;
  stats(): RegionStats;
}

export interface RegionWorld {
  readonly regions: readonly RegionLink[];
  /** Whether racing writes are answered with a conflict (on by default). */
  setConflicts(on: boolean): void;
  /** Conflicts answered, all regions. */
  conflicts(): number;
  close(): Promise<void>;
}

export interface RegionWorldOptions {
  /** Base URL of the one table's endpoint (dynalite). */
  readonly target: string;
  readonly regions: readonly RegionSpec[];
  readonly conflicts?: boolean;
  /** Uniform extra latency per request, 0..jitterMs (default 10). */
  readonly jitterMs?: number;
  readonly random?: () => number;
}

const WRITES = new Set(['PutItem', 'UpdateItem', 'DeleteItem']);

export const CONFLICT_TYPE = 'com.amazonaws.dynamodb.v20120810#ReplicatedWriteConflictException';

const jsonAnswer = (status: number, body: unknown): ProxiedResponse => {
  const headers: IncomingHttpHeaders = {
    'content-type': 'application/x-amz-json-1.0',
    'x-amzn-requestid': `chaos-${Math.random().toString(36).slice(2)}`,
  };
  return { status, headers, body: Buffer.from(JSON.stringify(body)) };
};

/** DynamoDB's answer to a write that raced one from another region (HTTP 400, not applied). */
export const conflictAnswer = (): ProxiedResponse =>
  jsonAnswer(400, {
    __type: CONFLICT_TYPE,
    message:
      'Replicated write conflict: a concurrent write to this item from another Region was in flight (chaos proxy)',
  });

const isolatedAnswer = (): ProxiedResponse =>
  jsonAnswer(500, {
    __type: 'com.amazonaws.dynamodb.v20120810#InternalServerError',
    message: 'Region isolated: no quorum (chaos proxy)',
  });

/** What a DynamoDB request is, for the region model. */
export const classifyRequest = (
  request: Pick<ProxiedRequest, 'headers' | 'body'>,
): { kind: 'write'; item: string } | { kind: 'strong-read' } | { kind: 'other' } => {
  const target = String(request.headers['x-amz-target'] ?? '');
  const operation = target.slice(target.indexOf('.') + 1);
  let body: Record<string, unknown> = {};
  try {
    body = JSON.parse(request.body.toString('utf8')) as Record<string, unknown>;
  } catch {
    return { kind: 'other' };
  }
  if (WRITES.has(operation)) {
    const key = (body.Key ?? { pk: (body.Item as Record<string, unknown> | undefined)?.pk }) as
      | Record<string, unknown>
      | undefined;
    return { kind: 'write', item: `${String(body.TableName)}/${JSON.stringify(key)}` };
  }
  if (operation === 'GetItem' && body.ConsistentRead === true) return { kind: 'strong-read' };
  return { kind: 'other' };
};

export const startRegionWorld = async (options: RegionWorldOptions): Promise<RegionWorld> => {
  const random = options.random ?? Math.random;
  const jitterMs = options.jitterMs ?? 10;
  let conflictsOn = options.conflicts ?? true;
  let closed = false;
  const timers = new Set<NodeJS.Timeout>();
  /** Writes held at a proxy (in flight, not yet applied), per item: their regions. */
  const inFlight = new Map<string, Map<number, string>>();
  let sequence = 0;
  const sleep = trackedSleep(timers);

  const regions: RegionLink[] = [];
  for (const spec of options.regions) {
    const stats: RegionStats = { writes: 0, strongReads: 0, conflicts: 0, isolated: 0 };
    let isolation: Isolation | undefined;
    const delay = () => sleep(spec.latencyMs + random() * jitterMs);
    const onRequest = async (request: ProxiedRequest): Promise<RequestFault | undefined> => {
      const what = classifyRequest(request);
      if (what.kind === 'other') return undefined;
      if (what.kind === 'strong-read') stats.strongReads += 1;
      else stats.writes += 1;
      if (isolation) {
        stats.isolated += 1;
        if (isolation === 'hang') return { kind: 'drop' };
        await delay();
        return { kind: 'answer', response: isolatedAnswer() };
      }
      if (what.kind === 'strong-read') {
        await delay();
        return undefined;
      }
      sequence += 1;
      const id = sequence;
      const racing = inFlight.get(what.item) ?? new Map<number, string>();
      inFlight.set(what.item, racing);
      const conflicting = conflictsOn && [...racing.values()].some((r) => r !== spec.name);
      racing.set(id, spec.name);
      try {
        await delay();
      } finally {
        racing.delete(id);
        if (racing.size === 0) inFlight.delete(what.item);
      }
      if (closed) return { kind: 'drop' };
      if (conflicting) {
        stats.conflicts += 1;
        return { kind: 'answer', response: conflictAnswer() };
      }
      return undefined;
    };
    const proxy = await startFaultProxy({
      target: options.target,
      label: `region-${spec.name}`,
      hooks: { onRequest },
    });
    regions.push({
      name: spec.name,
      url: proxy.url,
      proxy,
      isolate: (how = 'hang') => {
        isolation = how;
      },
      heal: () => {
        isolation = undefined;
      },
      isolated: () => isolation !== undefined,
      stats: () => ({ ...stats }),
    });
  }

  return {
    regions,
    setConflicts: (on) => {
      conflictsOn = on;
    },
    conflicts: () => regions.reduce((n, r) => n + r.stats().conflicts, 0),
    close: async () => {
      closed = true;
      for (const timer of timers) clearTimeout(timer);
      timers.clear();
      await Promise.all(regions.map((r) => r.proxy.close()));
    },
  };
};
