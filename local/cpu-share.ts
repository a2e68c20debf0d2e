/**
 * Lambda's CPU share for a local execution environment (issue 35). Lambda gives a function CPU
 * in proportion to its memory, 1,769 MB being one vCPU: the stack's 512 MB gets about 0.29 of a
 * core. Here each environment's process goes into a cgroup v1 `cpu` group of its own,
 * `/sys/fs/cgroup/cpu/token-broker/<pid>-<environment>/`, whose CFS quota is that share of a
 * 100 ms period (`cpu.cfs_quota_us` = round(100,000 × memoryMb / 1,769)), its PID written to
 * `cgroup.procs` right after the spawn; the group is removed when the environment ends.
 *
 * On by default where the controller is writable (root, cgroup v1). Elsewhere (cgroup v2 only,
 * not root, another OS) or with `BROKER_LOCAL_CPU_SHARE=off`, environments run on whole cores,
 * and `describeCpuShare` says which and why: `npm start`'s banner and the chaos table print it.
 */
import {
  accessSync,
  constants,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmdirSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

/** Lambda's rule: this many MB of memory give one vCPU. */
export const MB_PER_VCPU = 1769;
/** The CFS period every group gets, µs (the kernel's default). */
export const CFS_PERIOD_US = 100_000;
/** The stack's memory (serverless.yml, `provider.memorySize`; test/local-cpu-share.test.ts checks it). */
export const STACK_MEMORY_MB = 512;
/** Where cgroup v1 mounts its `cpu` controller. */
export const CPU_CONTROLLER = '/sys/fs/cgroup/cpu';
/** The parent group of every environment's group. */
export const GROUP_PARENT = 'token-broker';
/** The variable that turns the share off (`off`) for debugging; `on` or unset: on where writable. */
export const CPU_SHARE_VARIABLE = 'BROKER_LOCAL_CPU_SHARE';

/** The share of one core `memoryMb` gets in Lambda. */
export const cpuShareOf = (memoryMb: number): number => memoryMb / MB_PER_VCPU;

/** `cpu.cfs_quota_us` for `memoryMb` over a period of `periodUs`: the memory's share of it. */
export const cpuQuotaUs = (memoryMb: number, periodUs = CFS_PERIOD_US): number => {
  if (!Number.isFinite(memoryMb) || memoryMb < 128) {
    throw new RangeError(`memoryMb must be at least 128 (Lambda's least), not ${memoryMb}`);
  }
  // The kernel refuses a quota under 1 ms.
  return Math.max(1_000, Math.round((periodUs * memoryMb) / MB_PER_VCPU));
};

/** Whether environments get their memory's share, and where their groups go; or why not. */
export type CpuPolicy =
  | { readonly kind: 'quota'; readonly controller: string }
  | { readonly kind: 'whole-cores'; readonly reason: string; readonly off?: true };

/** One line for a banner or a table header, e.g. `CPU: 0.29 core per environment (512 MB, cgroup cpu quota)`. */
export const describeCpuShare = (policy: CpuPolicy, memoryMb: number): string =>
  policy.kind === 'quota'
    ? `CPU: ${cpuShareOf(memoryMb).toFixed(2)} core per environment (${memoryMb} MB, cgroup cpu quota)`
    : policy.off
      ? `CPU: whole cores (${policy.reason})`
      : `CPU: whole cores (cgroup cpu not writable: ${policy.reason})`;

const codeOf = (error: unknown): string =>
  (error as NodeJS.ErrnoException | null)?.code ?? (error as Error | null)?.message ?? 'unknown';

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return codeOf(error) === 'EPERM';
  }
};

const tasksOf = (group: string): number[] => {
  try {
    return readFileSync(join(group, 'cgroup.procs'), 'utf8')
      .split('\n')
      .filter((line) => line.trim() !== '')
      .map(Number);
  } catch {
    return [];
  }
};

/**
 * Groups left by a process that died without removing them (SIGKILL): named after its PID,
 * empty. Best effort; a group that still holds a process is left alone.
 */
const sweepStale = (parent: string) => {
  let names: string[];
  try {
    names = readdirSync(parent);
  } catch {
    return;
  }
  for (const name of names) {
    const owner = Number(/^(\d+)-/.exec(name)?.[1]);
    if (!owner || owner === process.pid || alive(owner)) continue;
    const group = join(parent, name);
    if (tasksOf(group).length > 0) continue;
    try {
      rmdirSync(group);
    } catch {
      // Another process swept it, or it is busy: leave it.
    }
  }
};

export interface ProbeOptions {
  readonly env?: Readonly<Record<string, string | undefined>>;
  /** The `cpu` controller's mount point (a test may pass a directory of its own). */
  readonly controller?: string;
  readonly platform?: NodeJS.Platform;
}

/**
 * Whether this process can give environments their share: the variable, the platform, the
 * controller, and a trial group created and removed under {@link GROUP_PARENT}.
 *
 * @throws {RangeError} when `BROKER_LOCAL_CPU_SHARE` is neither `on`, `off` nor empty.
 */
export const probeCpuShare = ({
  env = process.env,
  controller = CPU_CONTROLLER,
  platform = process.platform,
}: ProbeOptions = {}): CpuPolicy => {
  const setting = env[CPU_SHARE_VARIABLE]?.trim().toLowerCase() ?? '';
  if (setting === 'off') {
    return { kind: 'whole-cores', reason: `${CPU_SHARE_VARIABLE}=off`, off: true };
  }
  if (setting !== '' && setting !== 'on') {
    throw new RangeError(`${CPU_SHARE_VARIABLE} must be on or off`);
  }
  if (platform !== 'linux') return { kind: 'whole-cores', reason: `no cgroups on ${platform}` };
  if (!existsSync(join(controller, 'cpu.cfs_quota_us'))) {
    return {
      kind: 'whole-cores',
      reason: existsSync('/sys/fs/cgroup/cgroup.controllers')
        ? `cgroup v2 only, no v1 cpu controller at ${controller}`
        : `no cgroup v1 cpu controller at ${controller}`,
    };
  }
  const parent = join(controller, GROUP_PARENT);
  const trial = join(parent, `${process.pid}-probe`);
  try {
    accessSync(controller, constants.W_OK);
    mkdirSync(trial, { recursive: true });
    try {
      writeFileSync(join(trial, 'cpu.cfs_period_us'), String(CFS_PERIOD_US));
      writeFileSync(join(trial, 'cpu.cfs_quota_us'), String(cpuQuotaUs(512)));
    } finally {
      rmdirSync(trial);
    }
  } catch (error) {
    const uid = process.getuid?.();
    return {
      kind: 'whole-cores',
      reason: `${codeOf(error)} on ${trial}${uid !== undefined && uid !== 0 ? ` (uid ${uid}, not root)` : ''}`,
    };
  }
  sweepStale(parent);
  removeParentIfEmpty(controller);
  return { kind: 'quota', controller };
};

let cached: CpuPolicy | undefined;
/** {@link probeCpuShare} of this process's environment, probed once. */
export const defaultCpuPolicy = (): CpuPolicy => {
  cached ??= probeCpuShare();
  return cached;
};

/** What the group's `cpu.stat` counted: how often and how long the quota held its processes. */
export interface CpuThrottling {
  /** CFS periods in which a process of the group was runnable. */
  readonly periods: number;
  /** Of those, periods that ran out of quota (the group was stopped until the next period). */
  readonly throttledPeriods: number;
  /** Time the group spent stopped by its quota, ms. */
  readonly throttledMs: number;
}

export interface CpuGroup {
  readonly path: string;
  readonly quotaUs: number;
  readonly periodUs: number;
  /** Moves process `pid` (all its threads) into the group. */
  add(pid: number): void;
  /** The group's `cpu.stat` so far (undefined once removed or unreadable). */
  throttling(): CpuThrottling | undefined;
  /**
   * Removes the group once its processes are gone; one still there after `waitMs` is moved to
   * the root group first (it then runs on whole cores). The last `cpu.stat`.
   */
  remove(waitMs?: number): Promise<CpuThrottling | undefined>;
}

/** Every group this process created and has not removed: removed at exit if still there. */
const live = new Map<string, string>();
let exitHook = false;
const removeAtExit = () => {
  if (exitHook) return;
  exitHook = true;
  process.once('exit', () => {
    for (const [group, controller] of live) {
      for (const pid of tasksOf(group)) {
        try {
          writeFileSync(join(controller, 'cgroup.procs'), String(pid));
        } catch {
          // Gone already.
        }
      }
      try {
        rmdirSync(group);
      } catch {
        // Nothing more to do at exit.
      }
      removeParentIfEmpty(controller);
    }
  });
};

/**
 * The parent group too, once no group of any process is left in it (a cgroup directory lists
 * its control files, never empty: only its subdirectories count). Another process may be using
 * it: then it stays, and a group made meanwhile retries (see `createCpuGroup`).
 */
const removeParentIfEmpty = (controller: string) => {
  const parent = join(controller, GROUP_PARENT);
  try {
    if (readdirSync(parent, { withFileTypes: true }).some((entry) => entry.isDirectory())) return;
    rmdirSync(parent);
  } catch {
    // In use, or gone already.
  }
};

const readThrottling = (group: string): CpuThrottling | undefined => {
  try {
    const stat = Object.fromEntries(
      readFileSync(join(group, 'cpu.stat'), 'utf8')
        .split('\n')
        .map((line) => line.split(' '))
        .filter((parts) => parts.length === 2)
        .map(([key, value]) => [key, Number(value)]),
    ) as Record<string, number>;
    return {
      periods: stat.nr_periods ?? 0,
      throttledPeriods: stat.nr_throttled ?? 0,
      throttledMs: (stat.throttled_time ?? 0) / 1e6,
    };
  } catch {
    return undefined;
  }
};

/**
 * A group for one environment, `<controller>/token-broker/<name>`, holding `memoryMb`'s share.
 *
 * @throws the file system's error when the group cannot be made (the caller runs the
 *   environment on whole cores and says so).
 */
export const createCpuGroup = (
  policy: Extract<CpuPolicy, { kind: 'quota' }>,
  name: string,
  memoryMb: number,
): CpuGroup => {
  const { controller } = policy;
  const path = join(controller, GROUP_PARENT, name);
  const quotaUs = cpuQuotaUs(memoryMb);
  try {
    mkdirSync(path, { recursive: true });
  } catch (error) {
    // Another process removed the empty parent between our two mkdirs: once more.
    if (codeOf(error) !== 'ENOENT') throw error;
    mkdirSync(path, { recursive: true });
  }
  live.set(path, controller);
  removeAtExit();
  try {
    writeFileSync(join(path, 'cpu.cfs_period_us'), String(CFS_PERIOD_US));
    writeFileSync(join(path, 'cpu.cfs_quota_us'), String(quotaUs));
  } catch (error) {
    live.delete(path);
    rmdirSync(path);
    throw error;
  }
  let last: CpuThrottling | undefined;
  let removed: Promise<CpuThrottling | undefined> | undefined;
  return {
    path,
    quotaUs,
    periodUs: CFS_PERIOD_US,
    add: (pid) => writeFileSync(join(path, 'cgroup.procs'), String(pid)),
    throttling: () => (removed ? last : readThrottling(path)),
    remove: (waitMs = 500) => {
      removed ??= (async () => {
        const started = Date.now();
        while (tasksOf(path).length > 0 && Date.now() - started < waitMs) await sleep(20);
        last = readThrottling(path);
        for (const pid of tasksOf(path)) {
          try {
            writeFileSync(join(controller, 'cgroup.procs'), String(pid));
          } catch {
            // Exited meanwhile.
          }
        }
        try {
          rmdirSync(path);
          live.delete(path);
        } catch {
          // Still busy: the exit hook tries again.
        }
        removeParentIfEmpty(controller);
        return last;
      })();
      return removed;
    },
  };
};
