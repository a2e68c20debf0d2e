/**
 * The client as a service gets it, and `npm start` as a new user runs it: shared by the end-to-end
 * tests of the packed client (client-package.test.ts, client-outage.test.ts).
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFileSync, mkdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { root } from './build.js';

export const run = promisify(execFile);

/** This process's environment without npm's own run-script variables or any AWS setting. */
export const cleanEnv = (extra: Record<string, string> = {}) => ({
  ...Object.fromEntries(
    Object.entries(process.env).filter(
      ([name]) => !name.startsWith('npm_') && !name.startsWith('AWS_'),
    ),
  ),
  // Nothing of this machine's AWS setup: the loopback defaults must do.
  AWS_EC2_METADATA_DISABLED: 'true',
  AWS_CONFIG_FILE: '/nonexistent',
  AWS_SHARED_CREDENTIALS_FILE: '/nonexistent',
  ...extra,
});

/**
 * Runs `work` while holding a lock that other test processes take too: `npm pack -w client`
 * rebuilds client/dist in place (prepack), so two test files packing at once could each ship
 * the other's half-written build. A lock left by a process that died is taken over after 2 min.
 */
const whileLocked = async <T>(name: string, work: () => Promise<T>): Promise<T> => {
  const lock = join(root, '.build-test', `${name}.lock`);
  mkdirSync(join(root, '.build-test'), { recursive: true });
  for (;;) {
    try {
      mkdirSync(lock);
      break;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      const age = Date.now() - (statSync(lock, { throwIfNoEntry: false })?.mtimeMs ?? Date.now());
      if (age > 120_000) rmSync(lock, { recursive: true, force: true });
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  }
  try {
    return await work();
  } finally {
    rmSync(lock, { recursive: true, force: true });
  }
};

/**
 * `npm pack -w client` into `dir`, and the tarball installed in an empty project `dir/app`
 * (from the npm cache: the dependencies are the ones `npm ci` already put there).
 */
export const installPackedClient = async (dir: string) => {
  const app = join(dir, 'app');
  mkdirSync(app);
  const packed = await whileLocked('client-pack', () =>
    run('npm', ['pack', '-w', 'client', '--pack-destination', dir, '--json'], {
      cwd: root,
      env: cleanEnv(),
    }),
  );
  const [{ filename }] = JSON.parse(packed.stdout) as [{ filename: string }];
  const tarball = join(dir, filename);
  writeFileSync(
    join(app, 'package.json'),
    '{ "name": "app", "version": "1.0.0", "private": true }',
  );
  await run('npm', ['install', tarball, '--prefer-offline', '--no-audit', '--no-fund'], {
    cwd: app,
    env: cleanEnv(),
  });
  return { app, tarball };
};

export interface LocalBroker {
  readonly broker: string;
  /** npm start's own simulator; absent when `env` names the connections (BROKER_CONNECTIONS). */
  readonly simulator: string | undefined;
  stop(): Promise<void>;
}

/**
 * `npm start` as a new user runs it, in a process group of its own; its URLs are read from its
 * banner. Nothing of this test process's broker settings reaches it: npm start's own defaults,
 * and what `env` sets (npm start hands BROKER_* on). `PORT` in `env` to listen on a given port
 * (a broker started again where its clients expect it); any free one otherwise.
 */
export const startLocalBroker = async (env: Record<string, string>): Promise<LocalBroker> => {
  const outdir = join(root, '.build-test', `npm-start-${process.pid}`);
  const ownSimulator = env.BROKER_CONNECTIONS === undefined;
  const child = spawn('npm', ['start'], {
    cwd: root,
    // Inside the repository, as dist/ is: the local runtime resolves dynalite from there.
    env: {
      ...Object.fromEntries(
        Object.entries(cleanEnv({ PORT: '0', BUILD_OUTDIR: outdir })).filter(
          ([name]) => !/^(BROKER_(?!LOCAL_)|POWERTOOLS_)/.test(name),
        ),
      ),
      ...env,
    },
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let banner = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    banner += chunk.toString();
  });
  const urls = new Promise<{ broker: string; simulator: string | undefined }>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`npm start did not start: ${banner}`)), 60_000);
    child.stdout?.on('data', (chunk: Buffer) => {
      banner += chunk.toString();
      const broker = /Token broker\s+(http:\/\/\S+)/.exec(banner)?.[1];
      const simulator = /Open API simulator\s+(http:\/\/\S+)/.exec(banner)?.[1];
      if (broker && (simulator || !ownSimulator)) {
        clearTimeout(timer);
        resolve({ broker, simulator });
      }
    });
    child.once('exit', (code) => reject(new Error(`npm start exited (${code}): ${banner}`)));
  });
  const stop = async () => {
    await new Promise<void>((resolve) => {
      if (child.exitCode !== null || child.signalCode !== null) return resolve();
      child.once('exit', () => resolve());
      // The whole group: npm, and the node process its script execs.
      process.kill(-(child.pid as number), 'SIGTERM');
    });
    rmSync(outdir, { recursive: true, force: true });
  };
  try {
    return { ...(await urls), stop };
  } catch (error) {
    await stop();
    throw error;
  }
};

/** One line of test/support/token-user.mjs: one use of a token, or a failure. */
export interface Use {
  readonly at: number;
  readonly token?: string;
  readonly status?: number;
  readonly how?: string;
  readonly error?: string;
}

/** How many services this process has started: each runs a copy of its own. */
let services = 0;

/**
 * Runs test/support/token-user.mjs in `app` (which installed the packed client). Each service
 * runs its own copy: tests start two at once, and one copy over the file another process was
 * about to load truncates it under that process, which then runs an empty module, prints
 * nothing and exits 0 (seen once as "provider(): 0 uses", issue 38).
 */
export const runService = (app: string, env: Record<string, string>): Promise<Use[]> => {
  services += 1;
  const file = join(app, `token-user-${services}.mjs`);
  copyFileSync(join(root, 'test/support/token-user.mjs'), file);
  return new Promise((resolve, reject) => {
    const child: ChildProcess = execFile(
      process.execPath,
      [file],
      { cwd: app, env: cleanEnv(env), maxBuffer: 64 * 1024 * 1024 },
      (error, stdout) => {
        if (error) return reject(error);
        resolve(
          stdout
            .trim()
            .split('\n')
            .filter(Boolean)
            .map((line) => JSON.parse(line) as Use),
        );
      },
    );
    child.stdin?.end();
  });
};

/** What the tests print and compare of a token: a short digest, never the token. */
export const digest = (token: string) =>
  createHash('sha256').update(token).digest('base64url').slice(0, 16);
