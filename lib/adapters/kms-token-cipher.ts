/**
 * {@link TokenCipher} with envelope encryption: AES-256-GCM under a data key from KMS
 * `GenerateDataKey`. The encrypted data key is stored with each item; the plaintext key stays
 * in this container's memory (one per hour of writes, and one per foreign key read). The
 * connection name is the additional authenticated data, so an item copied to another
 * connection does not decrypt. Read access to the table alone yields nothing usable.
 */
import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import {
  DecryptCommand,
  GenerateDataKeyCommand,
  InvalidCiphertextException,
  KMSClient,
  type KMSClientConfig,
} from '@aws-sdk/client-kms';
import { type Clock, systemClock } from '../clock.js';
import type { SealedToken, TokenCipher } from '../ports.js';

/** KMS encryption context: a data key decrypts only for this purpose (and shows in CloudTrail). */
const ENCRYPTION_CONTEXT = { purpose: 'token-broker/access-token' };
const DATA_KEY_MAX_AGE_MS = 3_600_000;
/** Foreign data keys (written by other containers) kept decrypted, at most. */
const MAX_CACHED_KEYS = 64;
const IV_BYTES = 12;
const TAG_BYTES = 16;

const aad = (connection: string) => Buffer.from(`token-broker:${connection}`, 'utf8');
const keyId = (encrypted: Uint8Array) => Buffer.from(encrypted).toString('base64');

export class KmsTokenCipher implements TokenCipher {
  /** This container's data key; `createdAt` on the monotonic clock. */
  #current: Promise<{ plaintext: Buffer; encrypted: Uint8Array; createdAt: number }> | undefined;
  readonly #decrypted = new Map<string, Promise<Buffer>>();

  constructor(
    private readonly client: KMSClient,
    private readonly kmsKeyId: string,
    /**
     * The data key's age is measured on the monotonic clock: a wall clock stepped back would
     * keep it past its hour, one stepped forward retire it early.
     */
    private readonly clock: Pick<Clock, 'monotonic'> = systemClock,
  ) {}

  async seal(connection: string, accessToken: string): Promise<SealedToken> {
    const key = await this.#dataKey();
    const iv = randomBytes(IV_BYTES);
    const cipher = createCipheriv('aes-256-gcm', key.plaintext, iv);
    cipher.setAAD(aad(connection));
    const body = Buffer.concat([cipher.update(accessToken, 'utf8'), cipher.final()]);
    return {
      ciphertext: Buffer.concat([iv, body, cipher.getAuthTag()]),
      encryptedKey: key.encrypted,
    };
  }

  async open(connection: string, sealed: SealedToken): Promise<string | undefined> {
    const key = await this.#plaintextKey(sealed.encryptedKey);
    if (!key) return undefined;
    const data = Buffer.from(sealed.ciphertext);
    if (data.length < IV_BYTES + TAG_BYTES) return undefined;
    try {
      const decipher = createDecipheriv('aes-256-gcm', key, data.subarray(0, IV_BYTES));
      decipher.setAAD(aad(connection));
      decipher.setAuthTag(data.subarray(data.length - TAG_BYTES));
      return Buffer.concat([
        decipher.update(data.subarray(IV_BYTES, data.length - TAG_BYTES)),
        decipher.final(),
      ]).toString('utf8');
    } catch {
      return undefined; // does not authenticate: tampered with, or another connection's item
    }
  }

  /** This container's data key for writing; a new one every hour. */
  async #dataKey() {
    const current = await this.#current?.catch(() => undefined);
    if (current && this.clock.monotonic() - current.createdAt < DATA_KEY_MAX_AGE_MS) return current;
    this.#current = (async () => {
      const { Plaintext, CiphertextBlob } = await this.client.send(
        new GenerateDataKeyCommand({
          KeyId: this.kmsKeyId,
          KeySpec: 'AES_256',
          EncryptionContext: ENCRYPTION_CONTEXT,
        }),
      );
      if (!Plaintext || !CiphertextBlob) throw new Error('KMS returned no data key');
      const plaintext = Buffer.from(Plaintext);
      // Reads of our own items need no Decrypt call.
      this.#decrypted.set(keyId(CiphertextBlob), Promise.resolve(plaintext));
      return { plaintext, encrypted: CiphertextBlob, createdAt: this.clock.monotonic() };
    })();
    return this.#current;
  }

  /** The plaintext of a stored data key, decrypted once per container; undefined if forged. */
  async #plaintextKey(encrypted: Uint8Array): Promise<Buffer | undefined> {
    const id = keyId(encrypted);
    let key = this.#decrypted.get(id);
    if (!key) {
      if (this.#decrypted.size >= MAX_CACHED_KEYS) this.#decrypted.clear();
      key = this.client
        .send(
          new DecryptCommand({ CiphertextBlob: encrypted, EncryptionContext: ENCRYPTION_CONTEXT }),
        )
        .then(({ Plaintext }) => {
          if (!Plaintext) throw new Error('KMS returned no plaintext');
          return Buffer.from(Plaintext);
        });
      this.#decrypted.set(id, key);
      // A failed Decrypt is not remembered: the next read tries again.
      key.catch(() => this.#decrypted.delete(id));
    }
    try {
      return await key;
    } catch (error) {
      if (error instanceof InvalidCiphertextException) return undefined;
      throw error;
    }
  }
}

/**
 * The cipher on a KMS client of its own. `lib/adapters/aws.ts` imports this module on the first
 * read or write of a token, so the KMS client is loaded then, in the bundle a chunk of its own.
 */
export const kmsTokenCipher = (clientConfig: KMSClientConfig, kmsKeyId: string): KmsTokenCipher =>
  new KmsTokenCipher(new KMSClient(clientConfig), kmsKeyId);
