/**
 * `npm run copies -- --table T --connection C --copies K [--create] [--region R] [--endpoint URL]`: the
 * operator's action that sets how many read copies a connection's token item has (ADR 0024,
 * docs/operations.md "Read copies of the token item"). It answers once every copy a reader may
 * read holds the item's image with the new count; 0 switches copies off. Set copies only once
 * no release older than the one that keeps them runs in the stage.
 *
 * A connection whose item does not exist yet (it is written with the first lease) is refused
 * unless `--create` says so: a mistyped name would otherwise create a stray item and answer 0.
 * `--copies 0` on it writes nothing, with or without `--create`: it has no copies.
 *
 * It prints the connection and the counts, never the item (which holds the token).
 */
import { parseArgs } from 'node:util';
import { DynamoDBClient, GetItemCommand } from '@aws-sdk/client-dynamodb';
import { DynamoDBTokenStore, MAX_COPIES, tokenKey } from '../lib/adapters/dynamodb-token-store.js';

export const COPIES_USAGE = `usage: npm run copies -- --table <table> --connection <name> --copies <0-${MAX_COPIES}> [--create] [--region <region>] [--endpoint <url>]`;

/** `--help`: the usage, and what the command does and prints. */
export const COPIES_HELP = `${COPIES_USAGE}

Sets how many read copies a connection's token item has (0 to ${MAX_COPIES}; 0 switches them off),
and answers once every copy a reader may read holds the item with the new count
(docs/operations.md, "Read copies of the token item"). Set copies only once every environment
of the stage runs a release that keeps them (a deploy of one has finished its shift), and 0
before rolling back to an older one.

  --table       the token table (a global table: its name, in the region given)
  --connection  the connection's name, as in BROKER_CONNECTIONS
  --copies      the number of read copies, 0 to ${MAX_COPIES}
  --create      set copies on a connection whose item does not exist yet (before its first token)
  --region      the AWS region (default: the AWS SDK's, e.g. AWS_REGION)
  --endpoint    another DynamoDB endpoint (dynalite, DynamoDB Local)

Prints the connection and the counts, never the item. Exit 0 done, 1 failed, 2 wrong usage.`;

export interface CopiesCommand {
  readonly table: string;
  readonly connection: string;
  readonly copies: number;
  /** Set copies on a connection whose item does not exist yet (creating it). */
  readonly create?: boolean;
  readonly region?: string | undefined;
  readonly endpoint?: string | undefined;
}

/** A command line this command cannot run: the message says what, without echoing a value. */
export class CopiesUsageError extends Error {
  override readonly name = 'CopiesUsageError';
}

/** Reads the command line (the arguments after `--`). */
export const parseCopiesArgs = (args: readonly string[]): CopiesCommand => {
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({
      args: [...args],
      options: {
        table: { type: 'string' },
        connection: { type: 'string' },
        copies: { type: 'string' },
        region: { type: 'string' },
        endpoint: { type: 'string' },
        create: { type: 'boolean' },
      },
      strict: true,
      allowPositionals: false,
    }));
  } catch {
    // parseArgs' own message quotes the argument, which may be anything pasted by mistake.
    throw new CopiesUsageError('unknown or malformed argument');
  }
  const { table, connection, copies, region, endpoint } = values as Record<
    string,
    string | undefined
  >;
  const create = values.create === true;
  if (!table) throw new CopiesUsageError('--table is required');
  if (!connection) throw new CopiesUsageError('--connection is required');
  if (copies === undefined || !/^\d+$/.test(copies) || Number(copies) > MAX_COPIES) {
    throw new CopiesUsageError(`--copies takes a whole number from 0 to ${MAX_COPIES}`);
  }
  return { table, connection, copies: Number(copies), create, region, endpoint };
};

/** The connection has no item in the table (and `--create` was not given). */
export class NoSuchItemError extends Error {
  override readonly name = 'NoSuchItemError';
  constructor() {
    // The name is not repeated: it may be anything pasted by mistake.
    super(
      'this connection has no item in the table (an item is written with its first lease): check --connection, or pass --create to set copies before its first token',
    );
  }
}

/** Sets the copies; returns the line to print. */
export const runCopies = async (command: CopiesCommand): Promise<string> => {
  const client = new DynamoDBClient({
    ...(command.region ? { region: command.region } : {}),
    ...(command.endpoint ? { endpoint: command.endpoint } : {}),
  });
  try {
    const { Item } = await client.send(
      new GetItemCommand({
        TableName: command.table,
        Key: tokenKey(command.connection),
        ConsistentRead: true,
        ProjectionExpression: 'pk',
      }),
    );
    if (!Item) {
      // No item has no copies: switching them off is done, and writes nothing.
      if (command.copies === 0) {
        return `${command.connection}: 0 read copies (no item yet); nothing written`;
      }
      if (!command.create) throw new NoSuchItemError();
    }
    const store = new DynamoDBTokenStore(client, command.table);
    const { previous, copies } = await store.setCopies(command.connection, command.copies);
    return `${command.connection}: ${copies} read ${copies === 1 ? 'copy' : 'copies'} (was ${previous}); every copy holds the item`;
  } finally {
    client.destroy();
  }
};

/** The command's entry: exit code 0 done, 1 failed, 2 usage. */
export const main = async (
  args: readonly string[],
  out: (line: string) => void = (line) => process.stdout.write(`${line}\n`),
  err: (line: string) => void = (line) => process.stderr.write(`${line}\n`),
): Promise<number> => {
  if (args.includes('--help') || args.includes('-h')) {
    out(COPIES_HELP);
    return 0;
  }
  let command: CopiesCommand;
  try {
    command = parseCopiesArgs(args);
  } catch (error) {
    err(`copies: ${(error as Error).message}\n${COPIES_USAGE}`);
    return 2;
  }
  try {
    out(await runCopies(command));
    return 0;
  } catch (error) {
    // The SDK's and the store's messages name the table, the connection and the counts only.
    err(`copies: ${(error as Error).name}: ${(error as Error).message}`);
    return 1;
  }
};
