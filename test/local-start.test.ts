/**
 * What `npm start` says when it cannot start or is started unusually: one clear line each, and
 * log lines that tell the cold start from the rest; and the execution environments it runs the
 * bundle in (frozen between invocations, shut down with SIGTERM). The built local runtime runs
 * as a process (the script `npm start` execs), from the process tier's one build.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { probeCpuShare } from '../local/cpu-share.js';
import { isLoopbackHost, listenFailure, networkWarning, upstreamNotice } from '../local/notices.js';
import { functionEnvironment, readSettings } from '../local/start-settings.js';
import { type Build, sharedBuild } from './support/build.js';

let build: Build;
beforeAll(() => {
  build = sharedBuild();
});

/** The local runtime with only the given settings (nothing of this process's environment). */
const start = (env: Record<string, string>, { detached = false } = {}): ChildProcess =>
  spawn(process.execPath, [build.start], {
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached,
  });

/** The broker's URL once the banner is out, and everything the process printed so far. */
const listening = (child: ChildProcess) => {
  let output = '';
  const collect = (chunk: Buffer) => {
    output += chunk.toString();
  };
  child.stderr?.on('data', collect);
  const url = new Promise<string>((done, fail) => {
    child.stdout?.on('data', (chunk: Buffer) => {
      collect(chunk);
      const match = /Token broker\s+(http:\/\/127\.0\.0\.1:\d+)/.exec(output);
      if (match?.[1] && output.includes('Ctrl-C')) done(match[1]);
    });
    child.once('exit', (code) => fail(new Error(`exited ${code}: ${output}`)));
  });
  return { url, output: () => output };
};

/** Stops a runtime this test started (by its PID) and waits for its exit. */
const stop = async (child: ChildProcess, signal: NodeJS.Signals = 'SIGTERM') => {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((done) => child.once('exit', done));
  child.kill(signal);
  await exited;
};

/** The run state of a process (`S`, `R`, `T` for stopped, …), or undefined once it is gone. */
const runState = (pid: number): string | undefined => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0];
  } catch {
    return undefined;
  }
};

interface Listed {
  readonly id: string;
  readonly pid: number;
  readonly state: string;
  readonly invocations: number;
}
const environments = async (url: string) =>
  (await (await fetch(`${url}/__local/environments`)).json()) as Listed[];

/** Polls until `check` holds, at most `tries` times `every` ms apart. */
const until = async <T>(
  check: () => Promise<T | undefined>,
  what: string,
  tries = 100,
  every = 50,
) => {
  for (let i = 0; i < tries; i += 1) {
    const value = await check();
    if (value !== undefined) return value;
    await sleep(every);
  }
  throw new Error(`still not true after ${tries * every} ms: ${what}`);
};

/** Runs it to its exit: the exit code and what it printed on each stream. */
const runToExit = (env: Record<string, string>) =>
  new Promise<{ code: number | null; stdout: string; stderr: string }>((done) => {
    const child = start(env);
    let stdout = '';
    let stderr = '';
    child.stdout?.on('data', (chunk) => {
      stdout += chunk;
    });
    child.stderr?.on('data', (chunk) => {
      stderr += chunk;
    });
    child.once('exit', (code) => done({ code, stdout, stderr }));
  });

describe('Local runtime: what it says when it cannot start', () => {
  it('a taken port: one line that suggests PORT, no stack trace', async () => {
    const taken: Server = createServer();
    await new Promise<void>((done) => taken.listen(0, '127.0.0.1', done));
    const port = (taken.address() as { port: number }).port;
    try {
      const { code, stdout, stderr } = await runToExit({ PORT: String(port) });
      expect(code).toBe(1);
      expect(stderr.trim()).toBe(
        `Port ${port} on 127.0.0.1 is in use (another npm start?): set PORT to a free one (PORT=3001 npm start), or PORT=0 for any.`,
      );
      // Refused before the warm-up: with real credentials, an issuance here would have revoked
      // the tokens of the npm start that holds the port.
      expect(stdout).not.toContain('Token issued');
      expect(stdout).not.toContain('Warm-up');
    } finally {
      await new Promise((done) => taken.close(done));
    }
  }, 60_000);

  it('a configuration error: the message alone, naming the variable, connection, field and typo', async () => {
    const { code, stderr } = await runToExit({
      PORT: '0',
      BROKER_CONNECTIONS: JSON.stringify({
        production: { variant: 'v3', baseUrl: 'https://api.example.com', secretID: 's' },
      }),
    });
    expect(code).toBe(1);
    // One line: not Node's print of the minified source line that threw, nor a stack.
    expect(stderr.trim().split('\n')).toEqual([
      'The broker did not start: BROKER_CONNECTIONS: connection "production", field "secretID": unknown field (did you mean "secretId"?); known: variant, baseUrl, secretId, callers, forceCallers, codeField, revokesOnReissue, signing, probe',
    ]);
  }, 60_000);
});

/** A port nothing listens on: bound, then closed. */
const closedPort = async () => {
  const server: Server = createServer();
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  const { port } = server.address() as { port: number };
  await new Promise((done) => server.close(done));
  return port;
};

describe('Local runtime: no error path prints a secret', () => {
  // A value that stands for a client secret (or a secret access key): each refusal below is
  // started with it where a user might have put it, and must not print it.
  const SECRET = 'sk-live-7f3a9c2e5b8d1046';
  const dir = mkdtempSync(join(tmpdir(), 'local-start-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const file = (name: string, text: string) => {
    const path = join(dir, name);
    writeFileSync(path, text);
    return path;
  };
  const secretJson = JSON.stringify({ clientId: 'demo', clientSecret: SECRET });
  const malformed = file('malformed.json', `{"s1": ${secretJson.slice(0, -1)},}}\n`);
  const notAnObject = file('array.json', JSON.stringify([SECRET]));
  const good = file('good.json', JSON.stringify({ s1: JSON.parse(secretJson) }));
  const missing = join(dir, 'missing.json');
  const refused = (what: string) => `The local runtime did not start: ${what}`;

  /** Runs one refusal: exit 1, one line on stderr, the secret nowhere. */
  const refusal = async (env: Record<string, string>) => {
    const { code, stdout, stderr } = await runToExit({ PORT: '0', ...env });
    expect(stdout).not.toContain(SECRET);
    expect(stderr).not.toContain(SECRET);
    expect(code).toBe(1);
    const lines = stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    return lines[0];
  };

  it('a bad setting whose value is the secret', async () => {
    expect(await refusal({ PORT: SECRET })).toBe(
      refused('PORT must be a whole number from 0 to 65535'),
    );
  }, 60_000);

  it('a malformed secrets file: the file and the position, none of its content', async () => {
    expect(await refusal({ BROKER_LOCAL_SECRETS_FILE: malformed })).toBe(
      refused(
        `BROKER_LOCAL_SECRETS_FILE ${malformed}: not valid JSON at line 1, column 69 (offset 68): expected a property name in double quotes`,
      ),
    );
  }, 60_000);

  it('a missing secrets file, and one that is not an object', async () => {
    expect(await refusal({ BROKER_LOCAL_SECRETS_FILE: missing })).toBe(
      refused(`BROKER_LOCAL_SECRETS_FILE ${missing}: no such file (ENOENT)`),
    );
    expect(await refusal({ BROKER_LOCAL_SECRETS_FILE: notAnObject })).toBe(
      refused(
        `BROKER_LOCAL_SECRETS_FILE ${notAnObject}: must hold a JSON object of secret ID → value (it holds an array)`,
      ),
    );
  }, 60_000);

  it('an unreachable DynamoDB endpoint, with the secret as the secret access key', async () => {
    const port = await closedPort();
    expect(
      await refusal({
        AWS_ENDPOINT_URL_DYNAMODB: `http://127.0.0.1:${port}/?key=${SECRET}`,
        AWS_SECRET_ACCESS_KEY: SECRET,
      }),
    ).toBe(
      refused(
        `DynamoDB at http://127.0.0.1:${port} (AWS_ENDPOINT_URL_DYNAMODB) failed: ECONNREFUSED (connect)`,
      ),
    );
  }, 60_000);

  it('bad connections: malformed JSON around the secret, and the secret in a field that does not exist', async () => {
    const connection = { variant: 'v3', baseUrl: 'https://api.example.com', secretId: 's1' };
    expect(
      await refusal({
        BROKER_LOCAL_SECRETS_FILE: good,
        BROKER_CONNECTIONS: `{"prod": {"clientSecret": "${SECRET}",}}`,
      }),
    ).toBe(
      'The broker did not start: BROKER_CONNECTIONS is not valid JSON at line 1, column 54 (offset 53): expected a property name in double quotes',
    );
    expect(
      await refusal({
        BROKER_LOCAL_SECRETS_FILE: good,
        BROKER_CONNECTIONS: JSON.stringify({ prod: { ...connection, clientSecret: SECRET } }),
      }),
    ).toMatch(
      /^The broker did not start: .*connection "prod", field "clientSecret": unknown field/,
    );
  }, 60_000);

  it('a port in use, with the secrets loaded', async () => {
    const taken: Server = createServer();
    await new Promise<void>((done) => taken.listen(0, '127.0.0.1', done));
    const { port } = taken.address() as { port: number };
    try {
      expect(await refusal({ BROKER_LOCAL_SECRETS_FILE: good, PORT: String(port) })).toMatch(
        new RegExp(`^Port ${port} on 127\\.0\\.0\\.1 is in use`),
      );
      // With the user's own connections, another port is no way out if the port's holder is
      // another npm start with them: each broker's tokens revoke the other's.
      const own = await refusal({
        BROKER_LOCAL_SECRETS_FILE: good,
        PORT: String(port),
        BROKER_CONNECTIONS: JSON.stringify({
          prod: { variant: 'v3', baseUrl: 'https://api.example.com', secretId: 's1' },
        }),
      });
      expect(own).toMatch(new RegExp(`^Port ${port} on 127\\.0\\.0\\.1 is in use`));
      expect(own).toContain(
        "use that one instead: a second broker for the same client IDs issues tokens of its own, which revoke the first one's.",
      );
    } finally {
      await new Promise((done) => taken.close(done));
    }
  }, 60_000);

  it('a secret that is not JSON: the warm-up fails, saying so without the value', async () => {
    const broken = file('broken-secret.json', JSON.stringify({ s1: `{clientSecret: ${SECRET}` }));
    const child = start({
      PORT: '0',
      BROKER_LOCAL_SCHEDULE_SECONDS: '0',
      BROKER_LOCAL_SECRETS_FILE: broken,
      BROKER_CONNECTIONS: JSON.stringify({
        prod: { variant: 'v3', baseUrl: `http://127.0.0.1:${await closedPort()}`, secretId: 's1' },
      }),
    });
    const run = listening(child);
    try {
      await run.url;
      expect(run.output()).toContain(`Secret 's1' is not JSON`);
      expect(run.output()).not.toContain(SECRET);
    } finally {
      await stop(child);
    }
  }, 60_000);
});

describe('Local runtime: log lines and notices', () => {
  it('says cold_start: true on the first invocation only', async () => {
    const child = start({ PORT: '0', BROKER_LOCAL_SCHEDULE_SECONDS: '0' });
    try {
      let output = '';
      const seen = new Set<() => void>();
      child.stdout?.on('data', (chunk) => {
        output += chunk;
        for (const check of seen) check();
      });
      /** Settles once the output so far passes `check` (it is checked as each chunk arrives). */
      const outputWhere = <T>(check: (text: string) => T | undefined) =>
        new Promise<T>((done, fail) => {
          const run = () => {
            const value = check(output);
            if (value === undefined) return;
            seen.delete(run);
            child.off('exit', exited);
            done(value);
          };
          const exited = (code: number | null) => {
            seen.delete(run);
            fail(new Error(`exited ${code}: ${output}`));
          };
          child.once('exit', exited);
          seen.add(run);
          run();
        });
      const url = await outputWhere((text) => {
        const match = /Token broker\s+(http:\/\/127\.0\.0\.1:\d+)/.exec(text);
        return match?.[1] && text.includes('Ctrl-C') ? match[1] : undefined;
      });
      // The banner's AWS CLI line fails on AWS CLI v1: the line after it says why.
      const banner = output.split('\n');
      const aws = banner.findIndex((line) => line.startsWith('  aws lambda invoke'));
      expect(banner[aws]).toContain('--cli-binary-format raw-in-base64-out');
      expect(banner[aws + 1]).toBe(
        '    # AWS CLI v2; v1 has no --cli-binary-format (it sends --payload as is): leave that option out. Any region and credentials do.',
      );
      interface Line {
        readonly message?: string;
        readonly cold_start?: boolean;
        readonly function_request_id?: string;
      }
      const logLines = (text: string) =>
        text
          .split('\n')
          .filter((line) => line.startsWith('{'))
          .map((line) => JSON.parse(line) as Line)
          .filter((line) => line.cold_start !== undefined);
      const invocationsOf = async () =>
        new Map((await environments(url)).map(({ id, invocations }) => [id, invocations]));

      // The warm-up at start was the first invocation of the one environment there is.
      const atStart = await invocationsOf();
      expect([...atStart.values()]).toEqual([1]);
      // Later invocations that log at INFO: invalidates of a token nobody holds, one after the
      // other. Which environment serves one is up to the pool: one still busy after its answer
      // (its runtime not yet back at `next`, or work after the response, at the CPU share under
      // load) gets no invocation, and a new one, cold, starts instead (as on Lambda). So each
      // invalidate's environment is read from the invocation counts around it, and its lines
      // must say cold_start: true exactly when it was that environment's first invocation.
      // Before the last one, every environment has frozen: it must go to a warm one.
      const served: { environment: string; nth: number; requestId: string; cold: boolean }[] = [];
      for (let i = 0; i < 3; i += 1) {
        if (i === 2) {
          await until(
            async () =>
              (await environments(url)).every((e) => e.state === 'frozen') ? true : undefined,
            'every environment frozen',
            400,
          );
        }
        const before = await invocationsOf();
        const response = await fetch(`${url}/tokens/demo-v3/invalidate`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ accessToken: 'not-a-token' }),
        });
        expect(response.status).toBe(200);
        const after = await invocationsOf();
        const by = [...after].filter(([id, count]) => count !== (before.get(id) ?? 0));
        expect(by).toHaveLength(1);
        const [environment, nth] = by[0] as [string, number];
        expect(nth - (before.get(environment) ?? 0)).toBe(1);
        // Its line, the (i + 1)th of its kind: lines reach the output on their own pipe, which
        // may be read after the answer's socket.
        const line = await outputWhere(
          (text) => logLines(text).filter((l) => l.message === 'Invalidate request handled')[i],
        );
        served.push({
          environment,
          nth,
          requestId: String(line.function_request_id),
          cold: line.cold_start === true,
        });
      }
      expect(served.map(({ cold }) => cold)).toEqual(served.map(({ nth }) => nth === 1));
      expect(served[2]?.nth).toBeGreaterThan(1);
      // Every line of an invocation says the same, and the one other invocation, the warm-up,
      // said true. (Its lines came before the banner; waited for all the same.)
      const lines = await outputWhere((text) => {
        const all = logLines(text);
        return all.some((l) => !served.some((s) => s.requestId === l.function_request_id))
          ? all
          : undefined;
      });
      const byRequest = Map.groupBy(lines, (l) => String(l.function_request_id));
      expect(byRequest.size).toBe(served.length + 1);
      for (const [requestId, ofRequest] of byRequest) {
        const invalidate = served.find((s) => s.requestId === requestId);
        expect(
          ofRequest.map((l) => l.cold_start),
          `${requestId}: ${JSON.stringify(invalidate ?? 'the warm-up')}`,
        ).toEqual(ofRequest.map(() => invalidate?.cold ?? true));
      }
      // The demo connections verify reports with the simulator's protected ping: a report of a
      // token the Open API accepts replaces nothing, and the answer says so.
      const { accessToken } = (await (await fetch(`${url}/tokens/demo-v3`)).json()) as {
        accessToken: string;
      };
      const report = await fetch(`${url}/tokens/demo-v3/invalidate`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ accessToken }),
      });
      expect(await report.json()).toEqual({ invalidated: false, verified: 'valid' });
    } finally {
      const exited = new Promise((done) => child.once('exit', done));
      child.kill('SIGTERM');
      await exited;
    }
  }, 60_000);

  it('warns when HOST is not a loopback address, and names an upstream that is not simulated', () => {
    expect(networkWarning('127.0.0.1', 3000)).toBeUndefined();
    expect(networkWarning('localhost', 3000)).toBeUndefined();
    expect(networkWarning('::1', 3000)).toBeUndefined();
    for (const host of ['0.0.0.0', '::', '192.0.2.10']) {
      expect(isLoopbackHost(host)).toBe(false);
      expect(networkWarning(host, 3000)).toContain(
        'checks no SigV4 signature and no caller: anyone who reaches port 3000 gets tokens',
      );
    }
    expect(upstreamNotice(['https://a.example.com', 'https://a.example.com'])).toBe(
      'Upstream: your own BROKER_CONNECTIONS, not the simulator (https://a.example.com). Every token this broker issues revokes the ones any other system holds for the same client IDs: one client ID, one broker.',
    );
    expect(listenFailure('127.0.0.1', 1, { code: 'EACCES', message: 'denied' } as never)).toBe(
      'The local runtime could not listen on 127.0.0.1:1: denied',
    );
  });
});

describe('Local runtime: settings of its own', () => {
  it('defaults to 4 environments, frozen, ended after 300 s idle', () => {
    expect(readSettings({})).toMatchObject({
      port: 3000,
      timeoutMs: 10_000,
      maxEnvironments: 4,
      idleShutdownSeconds: 300,
      freeze: true,
    });
    expect(
      readSettings({
        BROKER_LOCAL_MAX_ENVIRONMENTS: '1',
        BROKER_LOCAL_IDLE_SHUTDOWN_SECONDS: '5',
        BROKER_LOCAL_FREEZE: 'false',
      }),
    ).toMatchObject({ maxEnvironments: 1, idleShutdownSeconds: 5, freeze: false });
  });

  it.each([
    ['BROKER_LOCAL_FREEZE', 'yes', 'BROKER_LOCAL_FREEZE must be true or false'],
    [
      'BROKER_LOCAL_MAX_ENVIRONMENTS',
      '0',
      'BROKER_LOCAL_MAX_ENVIRONMENTS must be a whole number of at least 1',
    ],
    [
      'BROKER_LOCAL_IDLE_SHUTDOWN_SECONDS',
      '1.5',
      'BROKER_LOCAL_IDLE_SHUTDOWN_SECONDS must be a whole number of at least 1',
    ],
    [
      'BROKER_LOCAL_TIMEOUT_MS',
      '0',
      'BROKER_LOCAL_TIMEOUT_MS must be a whole number of at least 1',
    ],
    ['PORT', '70000', 'PORT must be a whole number from 0 to 65535'],
    ['BROKER_LOCAL_CPU_SHARE', 'half', 'BROKER_LOCAL_CPU_SHARE must be on or off'],
  ])('throws naming %s when it is %s', (name, value, message) => {
    expect(() => readSettings({ [name]: value })).toThrow(message);
  });

  it("reads BROKER_LOCAL_CPU_SHARE, its own (not a variable of the broker's list): on by default, off turns Lambda's CPU share off", () => {
    expect(readSettings({})).toMatchObject({ cpuShare: true });
    expect(readSettings({ BROKER_LOCAL_CPU_SHARE: 'off' })).toMatchObject({ cpuShare: false });
    expect(readSettings({ BROKER_LOCAL_CPU_SHARE: 'on' })).toMatchObject({ cpuShare: true });
  });

  it('reads BROKER_LOCAL_COMPUTE: Lambda by default, Lambda Managed Instances when asked (issue 37)', () => {
    expect(readSettings({})).toMatchObject({ compute: 'lambda' });
    expect(readSettings({ BROKER_LOCAL_COMPUTE: 'managed-instances' })).toMatchObject({
      compute: 'managed-instances',
    });
    expect(() => readSettings({ BROKER_LOCAL_COMPUTE: 'lmi' })).toThrow(
      'BROKER_LOCAL_COMPUTE must be lambda or managed-instances',
    );
  });

  it('refuses a misspelt BROKER_* variable, which it would otherwise drop silently (issue 24)', () => {
    // BROKER_LOCAL_* never reach the function: a typo of one would be ignored by both.
    expect(() => readSettings({ BROKER_LOCAL_SCHEDULE: '5' })).toThrow(
      'BROKER_LOCAL_SCHEDULE is not a variable the broker reads (did you mean BROKER_LOCAL_SCHEDULE_SECONDS?)',
    );
    expect(() => readSettings({ BROKER_REFRESH_WINDOW: '300' })).toThrow(
      '(did you mean BROKER_REFRESH_WINDOW_SECONDS?)',
    );
    expect(() => readSettings({ BROKER_LOCAL_FREEZE: 'false' })).not.toThrow();
  });

  it('hands the function the broker, Powertools and AWS SDK variables, and nothing else of the shell', () => {
    const passed = functionEnvironment({
      BROKER_CONNECTIONS: '{}',
      BROKER_TABLE_NAME: 't',
      BROKER_LOCAL_FREEZE: 'false',
      POWERTOOLS_LOG_LEVEL: 'DEBUG',
      AWS_REGION: 'eu-west-1',
      AWS_PROFILE: 'dev',
      AWS_ENDPOINT_URL_KMS: 'http://127.0.0.1:1',
      HOME: '/home/me',
      NODE_EXTRA_CA_CERTS: '/ca.pem',
      PORT: '3000',
      HOST: '127.0.0.1',
      npm_lifecycle_event: 'start',
      GITHUB_TOKEN: 'ghp_not-for-the-function',
    });
    expect(Object.keys(passed).sort()).toEqual([
      'AWS_ENDPOINT_URL_KMS',
      'AWS_PROFILE',
      'AWS_REGION',
      'BROKER_CONNECTIONS',
      'BROKER_TABLE_NAME',
      'HOME',
      'NODE_EXTRA_CA_CERTS',
      'POWERTOOLS_LOG_LEVEL',
    ]);
  });

  it('says a bad setting in one line and exits 1', async () => {
    const { code, stderr } = await runToExit({ BROKER_LOCAL_FREEZE: 'yes' });
    expect(code).toBe(1);
    expect(stderr.trim()).toBe(
      'The local runtime did not start: BROKER_LOCAL_FREEZE must be true or false',
    );
  }, 30_000);
});

describe('Local runtime: the bundle in execution environments', () => {
  let child: ChildProcess;
  let url = '';
  let output: () => string = () => '';

  beforeAll(async () => {
    // A process group of its own, as a terminal's foreground job: Ctrl-C reaches all of it.
    child = start({ PORT: '0', BROKER_LOCAL_SCHEDULE_SECONDS: '0' }, { detached: true });
    const started = listening(child);
    output = started.output;
    url = await started.url;
  }, 60_000);
  afterAll(async () => {
    await stop(child);
  });

  it('says how many environments it runs, and that they are frozen', () => {
    expect(output()).toContain(
      'Lambda environments  up to 4, frozen (SIGSTOP) between invocations; each ends after 300s idle',
    );
  });

  it("says the CPU each environment gets: the stack's 512 MB share, or whole cores and why (issue 35)", () => {
    const quota = probeCpuShare({ env: {} }).kind === 'quota';
    expect(output()).toMatch(
      quota
        ? /^CPU: 0\.29 core per environment \(512 MB, cgroup cpu quota\)$/m
        : /^CPU: whole cores \(cgroup cpu not writable: .+\)$/m,
    );
  });

  it('freezes the environment that served a request until the next one (T in /proc), which it serves after 3 s frozen', async () => {
    // Prepare: the warm-up at start ran in one environment.
    const [warm] = await until(async () => {
      const listed = await environments(url);
      return listed.length === 1 && listed[0]?.state === 'frozen' ? listed : undefined;
    }, 'the warm-up environment frozen');
    if (!warm) throw new Error('no environment after the warm-up');

    // Act: a request, then 3 s with nothing to do.
    const first = await fetch(`${url}/tokens/demo-v3`);
    expect(first.status).toBe(200);
    const { accessToken } = (await first.json()) as { accessToken: string };
    const served = await until(async () => {
      const listed = await environments(url);
      return listed.find((e) => e.invocations > warm.invocations && e.state === 'frozen');
    }, 'the environment that served the request frozen again');
    await until(
      async () => (runState(served.pid) === 'T' ? true : undefined),
      `process ${served.pid} stopped`,
    );
    await sleep(3_000);
    const frozenState = runState(served.pid);
    const again = await fetch(`${url}/tokens/demo-v3`);

    // Assess: stopped the whole time, then thawed for the next request, which it served.
    expect(frozenState).toBe('T');
    expect(again.status).toBe(200);
    expect(((await again.json()) as { accessToken: string }).accessToken).toBe(accessToken);
    const after = await until(async () => {
      const listed = await environments(url);
      const entry = listed.find((e) => e.id === served.id);
      return entry?.state === 'frozen' ? entry : undefined;
    }, 'frozen after the second request');
    // The most recently used environment is reused: the same process, one invocation more.
    expect(after).toMatchObject({ pid: served.pid, invocations: served.invocations + 1 });
    expect(served.id).toBe(warm.id);
  });

  it('X-Amz-Log-Type: Tail carries the lines the environment wrote for that invocation, under its request ID', async () => {
    const response = await fetch(`${url}/2015-03-31/functions/token-broker/invocations`, {
      method: 'POST',
      headers: { 'x-amz-log-type': 'Tail' },
      body: JSON.stringify({ action: 'getToken', connection: 'nope' }),
    });
    expect(response.headers.get('x-amz-function-error')).toBe('Unhandled');
    const requestId = response.headers.get('x-amzn-requestid') ?? '';
    const log = Buffer.from(response.headers.get('x-amz-log-result') ?? '', 'base64').toString();
    const lines = log.trimEnd().split('\n');
    expect(lines[0]).toBe(`START RequestId: ${requestId} Version: $LATEST`);
    expect(lines.at(-2)).toBe(`END RequestId: ${requestId}`);
    expect(lines.at(-1)).toMatch(new RegExp(`^REPORT RequestId: ${requestId}\\t`));
    const logged = lines
      .filter((line) => line.startsWith('{'))
      .map((line) => JSON.parse(line) as { message: string; function_request_id: string });
    // The function's own line, which the request ID the caller got names (as in Lambda).
    expect(logged.map((l) => l.message)).toContain('Request refused');
    expect(logged.every((l) => l.function_request_id === requestId)).toBe(true);
    // And it went to the runtime's output as well (printed as the environment's lines come in).
    await until(
      async () => (output().includes(`"function_request_id":"${requestId}"`) ? true : undefined),
      'the invocation’s line on the runtime’s output',
      300,
    );
  });

  it('Ctrl-C (SIGINT to the whole process group) shuts the environments down with SIGTERM, as Lambda does', async () => {
    const [environment] = await environments(url);
    if (!environment) throw new Error('no environment');
    const exited = new Promise<number | null>((done) => child.once('exit', done));
    process.kill(-(child.pid as number), 'SIGINT');
    expect(await exited).toBe(0);
    expect(output()).toContain('SIGINT: stopping');
    // The runtime ignored the terminal's SIGINT and ended on the pool's SIGTERM (the broker's
    // handler exits 0 once it has released its leases).
    expect(output()).toContain(
      `Lambda environments shut down: ${environment.id} (pid ${environment.pid}): SIGTERM, exit 0`,
    );
    expect(runState(environment.pid)).toBeUndefined();
  });
});

describe('Local runtime: BROKER_LOCAL_FREEZE=false', () => {
  it('keeps the environment running between requests, and says so', async () => {
    const child = start({
      PORT: '0',
      BROKER_LOCAL_SCHEDULE_SECONDS: '0',
      BROKER_LOCAL_FREEZE: 'false',
    });
    try {
      const started = listening(child);
      const url = await started.url;
      expect(started.output()).toContain('not frozen (BROKER_LOCAL_FREEZE=false)');
      expect((await fetch(`${url}/tokens/demo-v3`)).status).toBe(200);
      // The warm-up and the request: one environment, or two when the request came while the
      // first was still finishing its work after the warm-up's answer.
      const idle = await until(
        async () => {
          const listed = await environments(url);
          const served = listed.reduce((sum, e) => sum + e.invocations, 0);
          return served >= 2 && listed.every((e) => e.state === 'idle') ? listed : undefined;
        },
        'the environments idle after the request',
        300,
      );
      for (const environment of idle) expect(runState(environment.pid)).not.toBe('T');
    } finally {
      await stop(child);
    }
  }, 60_000);
});
