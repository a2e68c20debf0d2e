/**
 * local/cpu-share.ts: Lambda's CPU share for a local execution environment (issue 35). The
 * quota a memory size gets, the fallback to whole cores where the cgroup v1 `cpu` controller is
 * not writable (and why), and, where it is (root on cgroup v1, as on these machines), that a
 * busy process put in a group is held near its share: its CPU time over about a second, read
 * from /proc, under half a core for the 512 MB share of 0.29 (a busy loop takes a whole core).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import {
  CFS_PERIOD_US,
  type CpuGroup,
  cpuQuotaUs,
  cpuShareOf,
  createCpuGroup,
  describeCpuShare,
  GROUP_PARENT,
  probeCpuShare,
  STACK_MEMORY_MB,
} from '../local/cpu-share.js';
import { root } from './support/build.js';

const temporary: string[] = [];
const children: ChildProcess[] = [];
const groups: CpuGroup[] = [];
afterEach(async () => {
  for (const child of children.splice(0)) child.kill('SIGKILL');
  await Promise.all(groups.splice(0).map((g) => g.remove()));
  for (const dir of temporary.splice(0)) rmSync(dir, { recursive: true, force: true });
});
const scratch = () => {
  const dir = mkdtempSync(join(tmpdir(), 'cpu-share-'));
  temporary.push(dir);
  return dir;
};

/** utime + stime of `pid` in clock ticks (fields 14 and 15 of /proc/<pid>/stat). */
const cpuTicks = (pid: number): number => {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // The command may hold spaces: the fields after it start past its closing parenthesis.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return Number(fields[11]) + Number(fields[12]);
};
/** USER_HZ: 100 on Linux everywhere Node runs (`getconf CLK_TCK`). */
const TICKS_PER_SECOND = 100;

/** How many cores `pid` used over about `ms` of wall time. */
const coresUsed = async (pid: number, ms: number): Promise<number> => {
  const ticks = cpuTicks(pid);
  const started = performance.now();
  await sleep(ms);
  const elapsed = performance.now() - started;
  return (cpuTicks(pid) - ticks) / TICKS_PER_SECOND / (elapsed / 1000);
};

const busyLoop = () => {
  const child = spawn(process.execPath, ['-e', 'for (;;) {}'], { stdio: 'ignore' });
  children.push(child);
  if (child.pid === undefined) throw new Error('no busy loop');
  return child.pid;
};

describe('Function: cpuQuotaUs', () => {
  it("gives a memory size Lambda's share of a 100 ms CFS period: 1,769 MB is one core", () => {
    expect(CFS_PERIOD_US).toBe(100_000);
    expect(cpuQuotaUs(1769)).toBe(100_000);
    expect(cpuQuotaUs(512)).toBe(28_943);
    expect(cpuQuotaUs(3538)).toBe(200_000);
    expect(cpuQuotaUs(128)).toBe(7_236);
    expect(cpuQuotaUs(1024, 50_000)).toBe(28_943);
    expect(cpuShareOf(512)).toBeCloseTo(0.2894, 4);
  });

  it("refuses a memory size under Lambda's least (128 MB)", () => {
    expect(() => cpuQuotaUs(64)).toThrow(RangeError);
    expect(() => cpuQuotaUs(Number.NaN)).toThrow(RangeError);
  });

  it("runs at the stack's memory by default: serverless.yml's memorySize", () => {
    const yml = readFileSync(join(root, 'serverless.yml'), 'utf8');
    expect(yml).toMatch(new RegExp(`\\n {2}memorySize: ${STACK_MEMORY_MB}\\n`));
  });
});

describe('Function: probeCpuShare and describeCpuShare', () => {
  it('says the share it gives, or whole cores and why', () => {
    expect(describeCpuShare({ kind: 'quota', controller: '/x' }, 512)).toBe(
      'CPU: 0.29 core per environment (512 MB, cgroup cpu quota)',
    );
    expect(describeCpuShare({ kind: 'whole-cores', reason: 'EACCES' }, 512)).toBe(
      'CPU: whole cores (cgroup cpu not writable: EACCES)',
    );
    expect(
      describeCpuShare(
        { kind: 'whole-cores', reason: 'BROKER_LOCAL_CPU_SHARE=off', off: true },
        512,
      ),
    ).toBe('CPU: whole cores (BROKER_LOCAL_CPU_SHARE=off)');
  });

  it('falls back to whole cores when turned off, on another OS, or with no v1 cpu controller', () => {
    expect(probeCpuShare({ env: { BROKER_LOCAL_CPU_SHARE: 'off' } })).toEqual({
      kind: 'whole-cores',
      reason: 'BROKER_LOCAL_CPU_SHARE=off',
      off: true,
    });
    expect(probeCpuShare({ env: {}, platform: 'darwin' })).toEqual({
      kind: 'whole-cores',
      reason: 'no cgroups on darwin',
    });
    const empty = scratch();
    expect(probeCpuShare({ env: {}, controller: empty })).toMatchObject({
      kind: 'whole-cores',
      reason: expect.stringMatching(/no cgroup v1 cpu controller at /),
    });
    expect(() => probeCpuShare({ env: { BROKER_LOCAL_CPU_SHARE: 'half' } })).toThrow(
      'BROKER_LOCAL_CPU_SHARE must be on or off',
    );
  });

  it('falls back to whole cores, naming the error, where a group cannot be made', () => {
    // A controller whose parent group is a file: mkdir fails as on a read-only mount.
    const controller = scratch();
    writeFileSync(join(controller, 'cpu.cfs_quota_us'), '-1\n');
    writeFileSync(join(controller, GROUP_PARENT), '');
    expect(probeCpuShare({ env: {}, controller })).toEqual({
      kind: 'whole-cores',
      reason: expect.stringMatching(/^(ENOTDIR|EEXIST) on .*token-broker\/\d+-probe/),
    });
  });
});

const policy = probeCpuShare({ env: {} });
const writable = policy.kind === 'quota';

describe.skipIf(!writable)(
  'Function: createCpuGroup, where the cgroup v1 cpu controller is writable',
  () => {
    it("holds a busy process near its memory's share (0.29 core for 512 MB), and is removed after it", async () => {
      if (policy.kind !== 'quota') return;
      // Prepare: a busy loop takes a whole core on its own.
      const pid = busyLoop();
      const group = createCpuGroup(policy, `${process.pid}-test-${pid}`, 512);
      groups.push(group);

      // Act
      group.add(pid);
      await sleep(200); // a period or two to settle in
      const used = await coresUsed(pid, 1_200);
      const throttling = group.throttling();

      // Assess: near 0.29 of a core (the band is loose: a shared machine may give it less).
      expect(used).toBeLessThan(0.5);
      expect(used).toBeGreaterThan(0.05);
      expect(readFileSync(join(group.path, 'cpu.cfs_quota_us'), 'utf8').trim()).toBe('28943');
      expect(readFileSync(join(group.path, 'cgroup.procs'), 'utf8').trim()).toBe(String(pid));
      expect(throttling?.throttledPeriods).toBeGreaterThan(0);

      // Act: the process ends, then the group goes.
      children.splice(0).forEach((c) => {
        c.kill('SIGKILL');
      });
      const last = await group.remove();

      // Assess
      expect(existsSync(group.path)).toBe(false);
      expect(last?.periods).toBeGreaterThan(0);
    });

    it('moves a process still there to the root group before removing its group', async () => {
      if (policy.kind !== 'quota') return;
      const pid = busyLoop();
      const group = createCpuGroup(policy, `${process.pid}-test-${pid}`, 512);
      group.add(pid);

      await group.remove(50);

      expect(existsSync(group.path)).toBe(false);
      expect(readFileSync(`/proc/${pid}/cgroup`, 'utf8')).toMatch(/^\d+:cpu(,cpuacct)?:\/$/m);
    });

    it('sweeps the empty groups of a process that died without removing them', () => {
      if (policy.kind !== 'quota') return;
      // A PID no process has (above the kernel's pid_max default of 4,194,304).
      const stale = join(policy.controller, GROUP_PARENT, '99999999-stale');
      mkdirSync(stale, { recursive: true });

      probeCpuShare({ env: {} });

      expect(existsSync(stale)).toBe(false);
    });
  },
);
