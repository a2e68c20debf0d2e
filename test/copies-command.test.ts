/**
 * `npm run copies` (local/copies-command.ts): the operator's action on a real table (dynalite
 * here), its usage errors, and what it prints: counts, never the item or its token.
 */
import { GetItemCommand } from '@aws-sdk/client-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { copyKey, DynamoDBTokenStore, tokenKey } from '../lib/adapters/dynamodb-token-store.js';
import { CopiesUsageError, main, parseCopiesArgs } from '../local/copies-command.js';
import {
  ensureTable,
  type LocalDynamoDB,
  localDynamoDBClient,
  startDynalite,
} from '../local/dynamodb-local.js';
import { storeToken } from './support/stored-token.js';

describe('Command: npm run copies', () => {
  let dynalite: LocalDynamoDB;
  beforeAll(async () => {
    dynalite = await startDynalite();
    await ensureTable(localDynamoDBClient(dynalite.url), 'copies-command');
  });
  afterAll(async () => {
    await dynalite?.close();
  });

  const run = async (args: string[]) => {
    const out: string[] = [];
    const err: string[] = [];
    const code = await main(
      args,
      (line) => out.push(line),
      (line) => err.push(line),
    );
    return { code, out: out.join('\n'), err: err.join('\n') };
  };

  it.each([
    [[], '--table is required'],
    [['--table', 't'], '--connection is required'],
    [['--table', 't', '--connection', 'c'], '--copies takes a whole number from 0 to 8'],
    [['--table', 't', '--connection', 'c', '--copies', '9'], '--copies takes a whole number'],
    [['--table', 't', '--connection', 'c', '--copies', '-1'], 'unknown or malformed argument'],
    [['--table', 't', '--connection', 'c', '--copies', '1.5'], '--copies takes a whole number'],
    [['--table', 't', '--connection', 'c', '--copies', '2', 'extra'], 'unknown or malformed'],
  ])('refuses %j with a usage error (exit 2)', async (args, message) => {
    expect(() => parseCopiesArgs(args)).toThrow(CopiesUsageError);
    const { code, err } = await run(args);
    expect(code).toBe(2);
    expect(err).toContain(message);
    expect(err).toContain('usage: npm run copies --');
  });

  it('prints its help on --help or -h, and exits 0', async () => {
    for (const flag of ['--help', '-h']) {
      const { code, out, err } = await run([flag]);
      expect({ code, err }).toEqual({ code: 0, err: '' });
      expect(out).toContain('usage: npm run copies --');
      expect(out).toContain('--create');
    }
  });

  it('does not echo an unknown argument (it may be anything pasted by mistake)', async () => {
    const { err } = await run(['--table', 't', '--token=pasted-secret-value']);
    expect(err).not.toContain('pasted-secret-value');
  });

  it('sets the copies of an item that holds a token, and prints the counts, never the token', async () => {
    const client = localDynamoDBClient(dynalite.url);
    const store = new DynamoDBTokenStore(client, 'copies-command');
    const accessToken = 'secret-access-token-value';
    await storeToken(store, 'api', accessToken);
    const args = ['--table', 'copies-command', '--connection', 'api', '--region', 'us-east-1'];
    process.env.AWS_ACCESS_KEY_ID ??= 'local';
    process.env.AWS_SECRET_ACCESS_KEY ??= 'local';
    const set = await run([...args, '--endpoint', dynalite.url, '--copies', '3']);
    expect(set).toEqual({
      code: 0,
      out: 'api: 3 read copies (was 0); every copy holds the item',
      err: '',
    });
    const copy = await client.send(
      new GetItemCommand({ TableName: 'copies-command', Key: copyKey('api', 2) }),
    );
    expect(copy.Item?.accessToken).toEqual({ S: accessToken });
    const off = await run([...args, '--endpoint', dynalite.url, '--copies', '0']);
    expect(off.out).toBe('api: 0 read copies (was 3); every copy holds the item');
    const failed = await run([
      ...args,
      '--endpoint',
      dynalite.url,
      '--table',
      'no-such-table',
      '--copies',
      '1',
    ]);
    expect(failed.code).toBe(1);
    expect(failed.err).toMatch(/^copies: ResourceNotFoundException/);
    for (const output of [set, off, failed]) {
      expect(JSON.stringify(output)).not.toContain(accessToken);
    }
    client.destroy();
  });

  it('refuses a connection with no item (a mistyped name) unless --create, and writes nothing', async () => {
    const client = localDynamoDBClient(dynalite.url);
    const args = ['--table', 'copies-command', '--region', 'us-east-1', '--endpoint', dynalite.url];
    process.env.AWS_ACCESS_KEY_ID ??= 'local';
    process.env.AWS_SECRET_ACCESS_KEY ??= 'local';
    const item = async (connection: string) =>
      (
        await client.send(
          new GetItemCommand({
            TableName: 'copies-command',
            Key: tokenKey(connection),
            ConsistentRead: true,
          }),
        )
      ).Item;
    const typo = await run([...args, '--connection', 'apii', '--copies', '2']);
    expect(typo.code).toBe(1);
    expect(typo.err).toContain('copies: NoSuchItemError: this connection has no item');
    expect(typo.err).toContain('--create');
    expect(typo.err).not.toContain('apii');
    expect(await item('apii')).toBeUndefined();
    expect(
      await client.send(
        new GetItemCommand({ TableName: 'copies-command', Key: copyKey('apii', 0) }),
      ),
    ).not.toHaveProperty('Item');
    // Copies off where there is no item: nothing to do, nothing written, even with --create.
    for (const create of [[], ['--create']]) {
      const off = await run([...args, '--connection', 'apii', '--copies', '0', ...create]);
      expect(off).toEqual({
        code: 0,
        out: 'apii: 0 read copies (no item yet); nothing written',
        err: '',
      });
      expect(await item('apii')).toBeUndefined();
    }
    const created = await run([...args, '--connection', 'fresh', '--copies', '2', '--create']);
    expect(created).toEqual({
      code: 0,
      out: 'fresh: 2 read copies (was 0); every copy holds the item',
      err: '',
    });
    expect((await item('fresh'))?.copies).toEqual({ N: '2' });
    client.destroy();
  });
});
