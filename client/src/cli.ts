#!/usr/bin/env node
/**
 * `token-broker`: inspect and repair a token broker, local (`npm start`) or deployed.
 * The client package's `bin`.
 */
import { text } from 'node:stream/consumers';
import { parseArgs } from 'node:util';
import { arnRegion } from './failover.js';
import {
  BadRequestError,
  ClientConfigError,
  createTokenClient,
  DEFAULT_TIMEOUT_MS,
  LIMITS,
  TokenBrokerError,
  type TokenClient,
  TransportError,
} from './index.js';
import {
  createTransport,
  type Operation,
  type SendOptions,
  type TransportOptions,
} from './transports.js';

const HELP = `token-broker <command> [options]

Commands:
  status                          every connection: variant, expiry, time left, last refresh, lease
  token <connection>              the token's metadata; the token itself only with --reveal,
                                  or alone with --raw (for $(…) and pipes)
  invalidate <connection> --token -
                                  drop that token if it is the current one (after a 401),
                                  or say in how many seconds the broker replaces it (deferredSeconds);
                                  with a probe, what the Open API said of it (verified: valid, it
                                  still accepts it and nothing is replaced; revoked, dropped);
                                  the token is read from stdin ('-'), or from TOKEN_BROKER_ACCESS_TOKEN
                                  when --token is absent (a token given as the value itself shows in ps
                                  and in shell history)
  warm                            run the warm-up now
  ready                           every connection's readiness (its secret, a token held or
                                  obtainable); exits 1 while any is not ready: a deploy gate

Target (one of; or TOKEN_BROKER_FUNCTION / TOKEN_BROKER_URL):
  --function <name|arn>           direct Lambda invoke
  --url <function url>            HTTP, signed with SigV4
  Several brokers (one per region, your own first): repeat the option or give a comma list,
  of function ARNs (each invoked in its own region) or of URLs. Each command asks the first
  and fails over to the next when one cannot answer (down, 5xx, throttled, or AWS refused in
  front of it); the call's time is shared among them.

Options:
  --region <region>               AWS region (default: AWS_REGION or your profile's)
  --profile <name>                AWS profile to use (default: AWS_PROFILE)
  --endpoint <url>                a Lambda endpoint other than AWS's, e.g. http://127.0.0.1:3000 (npm start)
  --min-validity <seconds>        with token: the token must stay valid this long
  --reveal                        with token: print the token itself, after its metadata
  --raw                           with token: print the token alone (no metadata), for scripts
  --timeout <seconds>             give up after this long (default 10; at most 900); exit 3
  --json                          machine-readable output
  -h, --help                      this text

A loopback target (localhost, 127.x, ::1) without AWS region or credentials gets a local default
(region us-east-1, placeholder credentials), and the CLI says so on stderr.

An option that does not apply to the command is refused (exit 2), as is --endpoint with --url.

Exit codes: 0 done, 1 the broker answered with an error, 2 wrong usage, a value the client refuses
or missing AWS settings (nothing was sent), 3 the broker could not be reached, did not answer in
time, or AWS answered in its place (an IAM denial, throttling, a gateway error).
Examples:
  token-broker status --function token-broker-prod-broker:live
  token-broker token demo-v3 --endpoint http://127.0.0.1:3000 --function token-broker --json
  token-broker status --function arn:aws:lambda:eu-west-1:123456789012:function:token-broker-prod-broker:live,arn:aws:lambda:eu-central-1:123456789012:function:token-broker-prod-broker:live
  printf %s "$TOKEN" | token-broker invalidate production --token - --url https://abc.lambda-url.eu-west-1.on.aws
`;

class UsageError extends Error {}

const out = (line: string) => process.stdout.write(`${line}\n`);
/** Prints one line and succeeds. */
const done = (line: string): number => {
  out(line);
  return 0;
};

/** The options that take a number: a negative one is still their value, said wrong. */
const NUMBER_OPTIONS = ['--min-validity', '--timeout'];

/**
 * `--min-validity -5` as `--min-validity=-5` (and `--timeout`): Node's parser takes a value that
 * starts with a dash for an option of its own and refuses it with a message about dashes;
 * joined, the value reaches the CLI's own check, which says what the option takes.
 */
const joinNegativeValues = (argv: string[]) =>
  argv.flatMap((arg, i) =>
    NUMBER_OPTIONS.includes(arg) && /^-\d/.test(argv[i + 1] ?? '')
      ? [`${arg}=${argv[i + 1]}`]
      : i > 0 && NUMBER_OPTIONS.includes(argv[i - 1] ?? '') && /^-\d/.test(arg)
        ? []
        : [arg],
  );

/** Every option, as Node's parser takes them. */
const OPTIONS = {
  function: { type: 'string', multiple: true },
  url: { type: 'string', multiple: true },
  region: { type: 'string' },
  profile: { type: 'string' },
  endpoint: { type: 'string' },
  token: { type: 'string' },
  'min-validity': { type: 'string' },
  timeout: { type: 'string' },
  // No defaults: an option given to a command that does not take it must be seen.
  reveal: { type: 'boolean' },
  raw: { type: 'boolean' },
  json: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const;

/**
 * The options as given, checked in the CLI's own words before Node's parser reads them: an
 * unknown one with the nearest known one, a value missing or given to a flag. (The parser's
 * own messages speak of positional arguments after '--' and of ambiguity.)
 */
const checkOptionTokens = (args: string[]) => {
  const { tokens } = parseArgs({
    args,
    allowPositionals: true,
    strict: false,
    tokens: true,
    options: OPTIONS,
  });
  for (const token of tokens) {
    if (token.kind !== 'option') continue;
    const option = Object.hasOwn(OPTIONS, token.name)
      ? (OPTIONS as Record<string, { type: string }>)[token.name]
      : undefined;
    if (option === undefined) {
      const guess = nearest(token.name, Object.keys(OPTIONS));
      throw new UsageError(
        `Unknown option '${printableArgument(token.rawName)}'${guess ? ` (did you mean --${guess}?)` : ''}; the options are: ${Object.keys(
          OPTIONS,
        )
          .map((name) => `--${name}`)
          .join(', ')}`,
      );
    }
    // `--url --json`: the next option is not a value (Node's parser calls it ambiguous); a
    // value that starts with a dash is given joined (`--min-validity=-5`), and '-' is stdin.
    const missing =
      token.value === undefined ||
      (!token.inlineValue && token.value.startsWith('-') && token.value !== '-');
    if (option.type === 'string' && missing) {
      throw new UsageError(`--${token.name} needs a value (--${token.name} <value>)`);
    }
    if (option.type === 'boolean' && token.inlineValue) {
      throw new UsageError(`--${token.name} takes no value`);
    }
  }
};

const parse = (argv: string[]) => {
  const args = joinNegativeValues(argv);
  checkOptionTokens(args);
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    strict: true,
    options: OPTIONS,
  });
  return { values, positionals };
};

type Values = ReturnType<typeof parse>['values'];

/** Options every command takes: the target and the output. */
const COMMON_OPTIONS = [
  'function',
  'url',
  'region',
  'profile',
  'endpoint',
  'timeout',
  'json',
  'help',
];
/** The options of each command, besides the common ones. */
const COMMAND_OPTIONS: Readonly<Record<string, readonly string[]>> = {
  status: [],
  token: ['min-validity', 'reveal', 'raw'],
  invalidate: ['token'],
  warm: [],
  ready: [],
};

/** The one of `known` nearest to `word` (at most two edits away), for "did you mean". */
const nearest = (word: string, known: readonly string[]): string | undefined => {
  const distance = (a: string, b: string) => {
    let row = Array.from({ length: b.length + 1 }, (_, j) => j);
    for (let i = 1; i <= a.length; i += 1) {
      const next = [i];
      for (let j = 1; j <= b.length; j += 1) {
        next[j] = Math.min(
          (row[j] as number) + 1,
          (next[j - 1] as number) + 1,
          (row[j - 1] as number) + (a[i - 1] === b[j - 1] ? 0 : 1),
        );
      }
      row = next;
    }
    return row[b.length] as number;
  };
  const [best] = known
    .map((name) => ({ name, edits: distance(word.toLowerCase(), name) }))
    .filter(({ edits }) => edits <= 2)
    .sort((a, b) => a.edits - b.edits);
  return best?.name;
};

/** An argument echoed in a message: short ones as they are, a long one (a token?) by length. */
const printableArgument = (argument: string) =>
  argument.length <= 32 ? argument : `(${argument.length} characters, not shown)`;

/** A command this CLI does not know: named, with the known ones (and the nearest). */
const unknownCommand = (command: string) => {
  const guess = nearest(command, Object.keys(COMMAND_OPTIONS));
  return new UsageError(
    `Unknown command '${command}'${guess ? ` (did you mean '${guess}'?)` : ''}; the commands are: ${Object.keys(COMMAND_OPTIONS).join(', ')}`,
  );
};

/** An option the command does not take is refused, not ignored. */
const checkOptionsOf = (command: string, values: Values) => {
  const own = COMMAND_OPTIONS[command] ?? [];
  for (const [name, value] of Object.entries(values)) {
    if (value !== undefined && !COMMON_OPTIONS.includes(name) && !own.includes(name)) {
      throw new UsageError(`--${name} does not apply to '${command}'`);
    }
  }
};

/** `--min-validity`: digits only (no sign, point, exponent or blank), within the broker's limit. */
const minValidityOf = (value: string | undefined): number | undefined => {
  if (value === undefined) return undefined;
  const seconds = /^\d{1,10}$/.test(value) ? Number(value) : Number.NaN;
  if (!(seconds <= LIMITS.maxMinValidity)) {
    throw new UsageError(
      `--min-validity must be a whole number of seconds from 0 to ${LIMITS.maxMinValidity}`,
    );
  }
  return seconds;
};

/** The longest `--timeout`: a Lambda invocation's limit (15 minutes); more helps nothing. */
const MAX_TIMEOUT_SECONDS = 900;

/** `--timeout`: seconds (a decimal point allowed), above 0 and at most 900, as milliseconds. */
const timeoutMsOf = (value: string | undefined): number | undefined => {
  if (value === undefined) return undefined;
  const seconds = /^\d{1,4}(\.\d{1,3})?$/.test(value) ? Number(value) : Number.NaN;
  if (!(seconds > 0 && seconds <= MAX_TIMEOUT_SECONDS)) {
    throw new UsageError(
      `--timeout must be a number of seconds above 0 and at most ${MAX_TIMEOUT_SECONDS} (default ${DEFAULT_TIMEOUT_MS / 1000})`,
    );
  }
  return Math.round(seconds * 1000);
};

/** Whether a request left: a refusal by the client before that is a usage error. */
let sent = false;

const checkUrl = (value: string | undefined, option: string) => {
  if (value === undefined) return;
  let url: URL | undefined;
  try {
    url = new URL(value);
  } catch {
    url = undefined;
  }
  if (url?.protocol !== 'http:' && url?.protocol !== 'https:') {
    throw new UsageError(`${option} must be an http:// or https:// URL, got '${value}'`);
  }
};

const warnOnStderr = (message: string) => process.stderr.write(`Note: ${message}\n`);

/** A repeated option or a comma list (its variable's too): every value, in order. */
const listOf = (values: readonly string[] | undefined, variable: string | undefined) => {
  const given = values ?? (variable === undefined ? undefined : [variable]);
  const list = given
    ?.flatMap((value) => value.split(','))
    .map((value) => value.trim())
    .filter(Boolean);
  return list && list.length > 0 ? list : undefined;
};

const clientFor = (values: Values): TokenClient => {
  if (values.profile) process.env.AWS_PROFILE = values.profile;
  const functions = listOf(values.function, process.env.TOKEN_BROKER_FUNCTION);
  const urls = listOf(values.url, process.env.TOKEN_BROKER_URL);
  if (functions && urls) throw new UsageError('Give --function or --url, not both');
  if (urls && values.endpoint !== undefined) {
    throw new UsageError('--endpoint applies to --function (direct invoke), not to --url');
  }
  for (const url of urls ?? []) checkUrl(url, '--url (or TOKEN_BROKER_URL)');
  checkUrl(values.endpoint, '--endpoint');
  if (functions && functions.length > 1) {
    const bare = functions.find((name) => arnRegion(name) === undefined);
    if (bare !== undefined && values.endpoint === undefined) {
      throw new UsageError(
        `Several brokers need function ARNs (each names its region), got '${bare}'`,
      );
    }
  }
  // `sent`: a request left, so a refusal after it is the broker's, not a usage error.
  const counted = (options: TransportOptions) => {
    const transport = createTransport(options, { warn: warnOnStderr });
    return {
      label: options.type === 'http' ? options.url : options.functionName,
      send: (operation: Operation, sendOptions: SendOptions) => {
        sent = true;
        return transport.send(operation, sendOptions);
      },
    };
  };
  const timeoutMs = timeoutMsOf(values.timeout);
  const client = (targets: TransportOptions[]) =>
    createTokenClient({
      ...(timeoutMs === undefined ? {} : { timeoutMs }),
      ...(targets.length === 1
        ? { transport: counted(targets[0] as TransportOptions) }
        : { brokers: targets.map(counted), onWarning: warnOnStderr }),
    });
  if (urls) {
    return client(
      urls.map((url) => ({
        type: 'http',
        url,
        ...(values.region ? { region: values.region } : {}),
      })),
    );
  }
  if (functions) {
    return client(
      functions.map((functionName) => ({
        type: 'lambda',
        functionName,
        // A function ARN is invoked in its own region; --region is for the others.
        ...(values.region && (functions.length === 1 || !arnRegion(functionName))
          ? { region: values.region }
          : {}),
        ...(values.endpoint ? { endpoint: values.endpoint } : {}),
      })),
    );
  }
  throw new UsageError(
    'Say which broker: --function <name>, --url <function url>, or TOKEN_BROKER_FUNCTION / TOKEN_BROKER_URL',
  );
};

/**
 * An argument past the connection. A long one is not quoted: `invalidate <connection> <token>`
 * puts the token there, and stderr is often a CI log.
 */
const unexpectedArgument = (argument: string) =>
  new UsageError(
    argument.length <= 32
      ? `Unexpected argument '${argument}'`
      : `Unexpected argument (${argument.length} characters, not shown; a token goes to --token -, on stdin)`,
  );

/** `--token -`: stdin; no --token: TOKEN_BROKER_ACCESS_TOKEN; else the value itself. */
const tokenToInvalidate = async (option: string | undefined): Promise<string> => {
  let token = option;
  if (option === '-') {
    if (process.stdin.isTTY) process.stderr.write('Paste the token, then Ctrl-D:\n');
    token = (await text(process.stdin)).trim();
  } else if (option === undefined) {
    token = process.env.TOKEN_BROKER_ACCESS_TOKEN;
  }
  if (!token) {
    throw new UsageError(
      "'invalidate' needs the token the Open API rejected: --token - (from stdin) or TOKEN_BROKER_ACCESS_TOKEN",
    );
  }
  return token;
};

const duration = (seconds: number) => {
  const h = Math.floor(seconds / 3600);
  const m = Math.floor((seconds % 3600) / 60);
  return h > 0
    ? `${h}h${String(m).padStart(2, '0')}m`
    : `${m}m${String(seconds % 60).padStart(2, '0')}s`;
};

/**
 * The broker's answer to `invalidate`, in words. `verified` (a connection with a `probe`) is the
 * Open API's own verdict on the token and comes first: "valid" means nothing was replaced
 * because the token still works, not that it was another token (docs/contract.md, "Verified
 * reports").
 */
const invalidateOutcome = ({
  invalidated,
  deferredSeconds,
  verified,
}: {
  readonly invalidated: boolean;
  readonly deferredSeconds?: number | undefined;
  readonly verified?: 'valid' | 'revoked' | undefined;
}): string => {
  if (verified === 'valid') {
    return 'Not invalidated (verified: valid): the Open API still accepts this token, so the broker keeps it. The 401 came from something else: a scope or permission, another API, the request itself.';
  }
  if (verified === 'revoked') {
    return invalidated
      ? 'Invalidated (verified: revoked): the Open API rejects this token too; the next request gets a new token.'
      : 'Not invalidated by this report (verified: revoked): the Open API rejects this token, and another report already dropped it; the next request gets a new token.';
  }
  if (invalidated) return 'Invalidated: the next request gets a new token.';
  return deferredSeconds !== undefined
    ? `Not invalidated now (deferredSeconds: ${deferredSeconds}): the token is too young to be replaced on a caller’s word; the broker keeps the report and replaces it in about ${deferredSeconds} s.`
    : 'Not invalidated: that is not the broker’s current token (already replaced, or never its).';
};

const run = async (argv: string[]): Promise<number> => {
  let parsed: ReturnType<typeof parse>;
  try {
    parsed = parse(argv);
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  const { values, positionals } = parsed;
  const [command, connection, ...rest] = positionals;
  if (values.help || command === 'help') {
    out(HELP);
    return 0;
  }
  if (!command) throw new UsageError('A command is required');
  // Before anything else about it: 'tokens demo-v3' is an unknown command, not a misplaced name.
  if (!Object.hasOwn(COMMAND_OPTIONS, command)) throw unknownCommand(command);
  if (rest.length > 0) throw unexpectedArgument(rest[0] ?? '');
  const needsConnection = command === 'token' || command === 'invalidate';
  if (needsConnection && !connection) throw new UsageError(`'${command}' needs a connection name`);
  if (!needsConnection && connection) throw new UsageError(`'${command}' takes no connection`);
  checkOptionsOf(command, values);
  if (values.raw && values.json) {
    throw new UsageError(
      '--raw prints the token alone; --json prints it within its metadata: give one',
    );
  }

  switch (command) {
    case 'status': {
      const connections = await clientFor(values).status();
      if (values.json) return done(JSON.stringify({ connections }, null, 2));
      for (const c of connections) {
        const token = c.token
          ? `expires ${c.token.expiresAt} (${duration(c.token.expiresIn)} left), issued ${c.token.issuedAt}`
          : 'no valid token';
        const lease = c.lease
          ? `, lease held by ${c.lease.holder} for ${c.lease.expiresInMs} ms${c.lease.countdown ? `, cut-over in ${c.lease.countdown} steps` : ''}`
          : '';
        out(`${c.connection} (${c.variant}): ${token}${lease}`);
      }
      return 0;
    }
    case 'token': {
      const minValidity = minValidityOf(values['min-validity']);
      const token = await clientFor(values).getToken(
        connection as string,
        minValidity === undefined ? {} : { minValidity },
      );
      const shown = {
        connection: token.connection,
        expiresAt: token.expiresAt.toISOString(),
        expiresIn: token.expiresIn,
        // How long a script may reuse the token it was shown: past this, ask again.
        maxAgeMs: token.maxAgeMs,
        // How long after that it may still be used while the broker cannot be reached.
        staleIfErrorSeconds: token.staleIfErrorSeconds,
        ...(values.reveal ? { accessToken: token.accessToken } : {}),
      };
      // The token alone, for `$(token-broker token … --raw)` and pipes.
      if (values.raw) return done(token.accessToken);
      if (values.json) return done(JSON.stringify(shown, null, 2));
      out(
        `${shown.connection}: expires ${shown.expiresAt} (${duration(shown.expiresIn)} left); reuse it for ${(shown.maxAgeMs / 1000).toFixed(1)} s at most, then ask again; ${
          shown.staleIfErrorSeconds > 0
            ? `if the broker cannot be reached then, it may be used ${duration(shown.staleIfErrorSeconds)} more`
            : 'not to be used once the broker cannot be reached'
        }`,
      );
      if (values.reveal) out(token.accessToken);
      return 0;
    }
    case 'invalidate': {
      const token = await tokenToInvalidate(values.token);
      const result = await clientFor(values).invalidate(connection as string, token);
      if (values.json) return done(JSON.stringify(result));
      out(invalidateOutcome(result));
      return 0;
    }
    case 'warm': {
      const report = await clientFor(values).warmUp();
      if (values.json) return done(JSON.stringify(report, null, 2));
      for (const [name, outcome] of Object.entries(report.connections)) {
        const detail =
          outcome.status === 'failed'
            ? ` — ${outcome.error.code}: ${outcome.error.message}`
            : ` until ${outcome.expiresAt} (${duration(outcome.expiresIn)} left)`;
        out(`${name}: ${outcome.status}${detail}`);
      }
      return report.failed > 0 ? 1 : 0;
    }
    case 'ready': {
      const report = await clientFor(values).ready();
      if (values.json) {
        out(JSON.stringify(report, null, 2));
        return report.ready ? 0 : 1;
      }
      for (const [name, outcome] of Object.entries(report.connections)) {
        const failed = [outcome.secret, outcome.token].find((check) => check.status === 'failed');
        const detail =
          failed?.status === 'failed'
            ? ` — ${outcome.secret.status === 'failed' ? 'secret' : 'token'}: ${failed.error.code}: ${failed.error.message}`
            : '';
        out(`${name}: ${outcome.ready ? 'ready' : 'NOT READY'}${detail}`);
      }
      return report.ready ? 0 : 1;
    }
    default:
      throw unknownCommand(command);
  }
};

run(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    // The client refused a value before sending it (a connection name too long, say): usage.
    if (error instanceof UsageError || (error instanceof BadRequestError && !sent)) {
      process.stderr.write(`${error.message}\n\nRun 'token-broker --help' for usage.\n`);
      process.exitCode = 2;
    } else if (error instanceof ClientConfigError) {
      process.stderr.write(`${error.message}\n`);
      process.exitCode = 2;
    } else if (error instanceof TransportError) {
      process.stderr.write(`${error.message}\n`);
      process.exitCode = 3;
    } else if (error instanceof TokenBrokerError) {
      process.stderr.write(`${error.code}: ${error.message}\n`);
      process.exitCode = 1;
    } else {
      process.stderr.write(`${(error as Error)?.message ?? String(error)}\n`);
      process.exitCode = 1;
    }
  },
);
