/**
 * What `npm start` says when it cannot start or is started unusually: one clear line each, and
 * log lines that tell the cold start from the rest. The built local runtime runs as a process
 * (the script `npm start` execs), from a private build.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { createServer, type Server } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isLoopbackHost, listenFailure, networkWarning, upstreamNotice } from '../local/notices.js';
import { buildPrivate, type PrivateBuild } from './support/build.js';

let build: PrivateBuild;
beforeAll(() => {
  build = buildPrivate('local-start');
}, 60_000);
afterAll(() => build?.remove());

/** The local runtime with only the given settings (nothing of this process's environment). */
const start = (env: Record<string, string>): ChildProcess =>
  spawn(process.execPath, [build.start], {
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });

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
      const { code, stderr } = await runToExit({ PORT: String(port) });
      expect(code).toBe(1);
      expect(stderr.trim()).toBe(
        `Port ${port} on 127.0.0.1 is in use (another npm start?): set PORT to a free one (PORT=3001 npm start), or PORT=0 for any.`,
      );
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
      'The broker did not start: BROKER_CONNECTIONS: connection "production", field "secretID": unknown field (did you mean "secretId"?); known: variant, baseUrl, secretId, callers, forceCallers, codeField, revokesOnReissue, signing',
    ]);
  }, 60_000);
});

describe('Local runtime: log lines and notices', () => {
  it('says cold_start: true on the first invocation only', async () => {
    const child = start({ PORT: '0', BROKER_LOCAL_SCHEDULE_SECONDS: '0' });
    try {
      let output = '';
      const url = await new Promise<string>((done, fail) => {
        child.stdout?.on('data', (chunk) => {
          output += chunk;
          const match = /Token broker\s+(http:\/\/127\.0\.0\.1:\d+)/.exec(output);
          if (match?.[1] && output.includes('Ctrl-C')) done(match[1]);
        });
        child.once('exit', (code) => fail(new Error(`exited ${code}: ${output}`)));
      });
      // A second invocation that logs at INFO: an invalidate of a token nobody holds.
      const response = await fetch(`${url}/tokens/demo-v3/invalidate`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ accessToken: 'not-a-token' }),
      });
      expect(response.status).toBe(200);
      const lines = output
        .split('\n')
        .filter((line) => line.startsWith('{'))
        .map((line) => JSON.parse(line) as { cold_start?: boolean; function_request_id?: string })
        .filter((line) => line.cold_start !== undefined);
      // The warm-up at start is the first invocation: its lines say true, later ones false.
      const first = lines[0]?.function_request_id;
      expect(lines.filter((l) => l.function_request_id === first).every((l) => l.cold_start)).toBe(
        true,
      );
      await new Promise((done) => setTimeout(done, 200));
      const after = output
        .split('\n')
        .filter((line) => line.includes('Invalidate request handled'))
        .map((line) => JSON.parse(line) as { cold_start?: boolean });
      expect(after).toHaveLength(1);
      expect(after[0]?.cold_start).toBe(false);
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
