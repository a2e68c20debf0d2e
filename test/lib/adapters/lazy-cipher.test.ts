/**
 * The cipher loaded on first use (`lazyCipher`, lib/adapters/aws.ts), and the store starting its
 * load as it sends a read (issue 25: a cold start with `BROKER_KMS_KEY_ID` loads the KMS client
 * while DynamoDB answers, not after).
 */
import { describe, expect, it } from 'vitest';
import { lazyCipher } from '../../../lib/adapters/aws.js';
import { DynamoDBTokenStore } from '../../../lib/adapters/dynamodb-token-store.js';
import type { TokenCipher } from '../../../lib/ports.js';
import { ensureTable, localDynamoDBClient, startDynalite } from '../../../local/dynamodb-local.js';
import { storeToken } from '../../support/stored-token.js';

const sealing: TokenCipher = {
  seal: async (_connection, accessToken) => ({
    ciphertext: Buffer.from(accessToken),
    encryptedKey: Buffer.from('key'),
  }),
  open: async (_connection, sealed) => Buffer.from(sealed.ciphertext).toString(),
};

describe('Adapter: the cipher loaded on first use', () => {
  it('starts its load on prepare, once, and opens with what it loaded', async () => {
    let loads = 0;
    let loaded!: (cipher: TokenCipher) => void;
    const cipher = lazyCipher(() => {
      loads += 1;
      return new Promise((resolve) => {
        loaded = resolve;
      });
    });
    cipher.prepare?.();
    cipher.prepare?.();
    expect(loads).toBe(1);
    const opened = cipher.open('c', {
      ciphertext: Buffer.from('tok'),
      encryptedKey: Buffer.from('k'),
    });
    loaded(sealing);
    expect(await opened).toBe('tok');
    expect(loads).toBe(1);
  });

  it('lets a load that fails fail the open that awaits it, with no unhandled rejection', async () => {
    const unhandled: unknown[] = [];
    const record = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', record);
    try {
      const cipher = lazyCipher(async () => {
        throw new Error('the chunk could not be loaded');
      });
      cipher.prepare?.();
      await new Promise((resolve) => setTimeout(resolve, 20));
      await expect(
        cipher.open('c', { ciphertext: Buffer.from('x'), encryptedKey: Buffer.from('k') }),
      ).rejects.toThrow('the chunk could not be loaded');
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', record);
    }
  });

  it('is prepared by the store before its read is sent, and opened after it answers', async () => {
    const dynalite = await startDynalite();
    const client = localDynamoDBClient(dynalite.url);
    try {
      await ensureTable(client, 'lazy-cipher');
      const events: string[] = [];
      const send = client.send.bind(client);
      client.send = ((command: Parameters<typeof send>[0]) => {
        events.push(`send ${command.constructor.name}`);
        return send(command);
      }) as typeof client.send;
      const store = new DynamoDBTokenStore(client, 'lazy-cipher', {
        seal: sealing.seal,
        open: async (...args) => {
          events.push('open');
          return sealing.open(...args);
        },
        prepare: () => events.push('prepare'),
      });
      await storeToken(store, 'c', 'tok');
      events.length = 0;
      expect((await store.read('c')).token?.accessToken).toBe('tok');
      expect(events).toEqual(['prepare', 'send GetItemCommand', 'open']);
    } finally {
      client.destroy();
      await dynalite.close();
    }
  });
});
