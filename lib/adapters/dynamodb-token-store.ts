/**
 * {@link TokenStore} on DynamoDB. One item per connection holds both the token and the lease,
 * so that taking the lease can be conditioned on the token still needing replacement, and
 * writing the token releases the lease in the same request.
 *
 * | attribute       | type | meaning                                                       |
 * |-----------------|------|---------------------------------------------------------------|
 * | pk              | S    | `token#<connection>`                                          |
 * | connection      | S    | connection name                                               |
 * | accessToken     | S    | the access token, when no KMS key is configured               |
 * | tokenCiphertext | B    | the access token encrypted by the application (KMS key set)   |
 * | tokenDataKey    | B    | the KMS-encrypted data key of tokenCiphertext                 |
 * | tokenDigest     | S    | SHA-256 of the access token, base64url                        |
 * | issuedAt        | N    | epoch ms at which the token request was sent                  |
 * | expiresAt       | N    | epoch ms after which the token must not be served             |
 * | ttl             | N    | epoch seconds = issuance + expiresIn (DynamoDB TTL)           |
 * | leaseHolder     | S    | who is running the upstream flow now, if anyone               |
 * | leaseExpiresAt  | N    | epoch ms (holder's clock) until which the holder counts on it |
 * | leaseDurationMs | N    | how long this lease version lasts on anyone's clock           |
 * | leaseCountdown  | N    | lease writes left before the holder's token request           |
 * | leaseForced     | BOOL | the lease replaces the token on a caller's word               |
 * | recheckMs       | N    | the writer's memory re-check (ms): readers take the shorter   |
 * | forced          | BOOL | issued at a caller's word (see TokenRecord.forced); else absent |
 * | reportedDigest  | S    | digest of a token reported too young to go: replaced later    |
 * | invalidatedAt   | N    | epoch ms at which an invalidate report removed the token      |
 */
import {
  type AttributeValue,
  ConditionalCheckFailedException,
  type DynamoDBClient,
  GetItemCommand,
  PutItemCommand,
  UpdateItemCommand,
} from '@aws-sdk/client-dynamodb';
import type {
  LeaseAttempt,
  LeaseRequest,
  TokenCipher,
  TokenRecord,
  TokenState,
  TokenStore,
} from '../ports.js';

type Item = Record<string, AttributeValue>;

export const tokenKey = (connection: string): Item => ({ pk: { S: `token#${connection}` } });

const toItem = async (record: TokenRecord, cipher: TokenCipher | undefined): Promise<Item> => ({
  ...tokenKey(record.connection),
  connection: { S: record.connection },
  ...(cipher ? await sealed(record, cipher) : { accessToken: { S: record.accessToken } }),
  tokenDigest: { S: record.tokenDigest },
  issuedAt: { N: String(record.issuedAt) },
  expiresAt: { N: String(record.expiresAt) },
  // expiresAt = issuedAt + expiresIn·1000, so this is issuance (s) + expiresIn exactly.
  ttl: { N: String(Math.floor(record.expiresAt / 1000)) },
  ...(record.forced ? { forced: { BOOL: true } } : {}),
  ...(record.recheckMs === undefined ? {} : { recheckMs: { N: String(record.recheckMs) } }),
});

const sealed = async (record: TokenRecord, cipher: TokenCipher): Promise<Item> => {
  const { ciphertext, encryptedKey } = await cipher.seal(record.connection, record.accessToken);
  return { tokenCiphertext: { B: ciphertext }, tokenDataKey: { B: encryptedKey } };
};

/** The token of an item: decrypted when sealed, undefined when it does not authenticate. */
const accessTokenOf = async (item: Item | undefined, cipher: TokenCipher | undefined) => {
  const ciphertext = item?.tokenCiphertext?.B;
  const encryptedKey = item?.tokenDataKey?.B;
  const connection = item?.connection?.S;
  if (ciphertext && encryptedKey && connection) {
    // Sealed by a deployment with a key: without one now, it cannot be read (a new one is issued).
    return cipher ? cipher.open(connection, { ciphertext, encryptedKey }) : undefined;
  }
  // Written before a key was configured: still readable, replaced at the next issuance.
  return item?.accessToken?.S;
};

/** Reads an item; a malformed token counts as absent so that the next issuance replaces it. */
const fromItem = async (
  item: Item | undefined,
  cipher: TokenCipher | undefined,
): Promise<TokenState> => {
  const connection = item?.connection?.S;
  const accessToken = await accessTokenOf(item, cipher);
  const tokenDigest = item?.tokenDigest?.S;
  const issuedAt = Number(item?.issuedAt?.N);
  const expiresAt = Number(item?.expiresAt?.N);
  const token =
    connection &&
    accessToken &&
    tokenDigest &&
    Number.isFinite(issuedAt) &&
    Number.isFinite(expiresAt)
      ? {
          connection,
          accessToken,
          tokenDigest,
          issuedAt,
          expiresAt,
          ...(item?.forced?.BOOL === true ? { forced: true } : {}),
          ...recheckOf(item),
        }
      : undefined;
  const holder = item?.leaseHolder?.S;
  const leaseExpiresAt = Number(item?.leaseExpiresAt?.N);
  // Leases written before durations were recorded lasted 3 s.
  const durationMs = Number(item?.leaseDurationMs?.N ?? LEGACY_LEASE_MS);
  // Leases written before countdowns were recorded announced nothing: 0, a request may be out.
  const countdown = Number(item?.leaseCountdown?.N ?? 0);
  const lease =
    holder &&
    Number.isFinite(leaseExpiresAt) &&
    Number.isFinite(durationMs) &&
    Number.isInteger(countdown)
      ? {
          holder,
          expiresAt: leaseExpiresAt,
          durationMs,
          countdown,
          ...(item?.leaseForced?.BOOL === true ? { forced: true } : {}),
        }
      : undefined;
  const invalidatedAt = Number(item?.invalidatedAt?.N);
  return {
    token,
    lease,
    ...(Number.isFinite(invalidatedAt) && !token ? { invalidatedAt } : {}),
    // A report about an earlier token (the attribute outlived it) says nothing of this one.
    ...(token && item?.reportedDigest?.S === token.tokenDigest ? { reported: true } : {}),
  };
};

/** The writer's re-check, when it recorded one (a positive number of ms). */
const recheckOf = (item: Item | undefined): { recheckMs?: number } => {
  const recheckMs = Number(item?.recheckMs?.N);
  return Number.isFinite(recheckMs) && recheckMs > 0 ? { recheckMs } : {};
};

/** The lease duration of items written before durations were recorded. */
const LEGACY_LEASE_MS = 3_000;

export class DynamoDBTokenStore implements TokenStore {
  constructor(
    private readonly client: DynamoDBClient,
    private readonly tableName: string,
    /** Application-level encryption of the token; without one, the table's encryption only. */
    private readonly cipher?: TokenCipher,
  ) {}

  async read(connection: string): Promise<TokenState> {
    const { Item } = await this.client.send(
      // Strongly consistent: right after an invalidate or a new issuance elsewhere, an eventually
      // consistent read could hand back the token that was just dropped or the lease just freed.
      new GetItemCommand({
        TableName: this.tableName,
        Key: tokenKey(connection),
        ConsistentRead: true,
      }),
    );
    return fromItem(Item, this.cipher);
  }

  async acquireLease(connection: string, request: LeaseRequest): Promise<LeaseAttempt> {
    const { takeOver } = request;
    try {
      await this.client.send(
        new UpdateItemCommand({
          TableName: this.tableName,
          Key: tokenKey(connection),
          UpdateExpression:
            'SET leaseHolder = :holder, leaseExpiresAt = :leaseExpiresAt, leaseDurationMs = :durationMs, leaseCountdown = :countdown, leaseForced = :forced',
          // Timeline of the race this prevents:
          //   t0  A and B both read a token about to expire, no lease
          //   t1  A takes the lease (condition holds), runs the flow
          //   t2  B tries: a lease exists → fails, B waits for A's token
          //   t3  A writes its token and the lease goes with it (putToken)
          //   t4  a late C tries: no lease, but the token now outlives its need → fails,
          //       C serves A's token. Without the token clause C would issue a second one.
          // A holder that dies leaves its lease: a waiter that saw that same version unchanged
          // for its duration, on the waiter's own clock, takes over exactly that version. No
          // clock of another container is compared with ours, so a skewed clock takes nothing
          // early; and if the holder renewed meanwhile, the version differs and this fails.
          // A takeover lands only on exactly that version: never on a lease that has gone, since
          // a reader may have read the token with no lease since, and been told it is safe for
          // a whole countdown (review finding R1).
          ConditionExpression: takeOver
            ? 'leaseHolder = :staleHolder AND leaseExpiresAt = :staleExpiresAt AND (attribute_not_exists(expiresAt) OR expiresAt < :replaceIfExpiresBefore)'
            : 'attribute_not_exists(leaseHolder) AND (attribute_not_exists(expiresAt) OR expiresAt < :replaceIfExpiresBefore)',
          ExpressionAttributeValues: {
            ':holder': { S: request.holder },
            ':leaseExpiresAt': { N: String(request.leaseExpiresAt) },
            ':durationMs': { N: String(request.durationMs) },
            ':countdown': { N: String(request.countdown) },
            ':forced': { BOOL: request.forced === true },
            ':replaceIfExpiresBefore': { N: String(request.replaceIfExpiresBefore) },
            ...(takeOver
              ? {
                  ':staleHolder': { S: takeOver.holder },
                  ':staleExpiresAt': { N: String(takeOver.expiresAt) },
                }
              : {}),
          },
          ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
        }),
      );
      return { acquired: true };
    } catch (error) {
      if (!(error instanceof ConditionalCheckFailedException)) throw error;
      // DynamoDB returns the winning item (ReturnValuesOnConditionCheckFailure); dynalite
      // does not, and then the state that won is read here, so the port means the same on both.
      return {
        acquired: false,
        state: error.Item ? await fromItem(error.Item, this.cipher) : await this.read(connection),
      };
    }
  }

  async putToken(record: TokenRecord, holder: string): Promise<boolean> {
    return this.#conditional(async () =>
      this.client.send(
        new PutItemCommand({
          TableName: this.tableName,
          // The whole item is replaced: the lease attributes are not in it, so this releases
          // the lease in the same write.
          Item: await toItem(record, this.cipher),
          // Only the lease holder writes: the fencing check on the far side. Timeline of the
          // fault it stops (a holder paused past its lease):
          //   t0  A holds the lease, gets an authorization code, and pauses (GC, CPU starved)
          //   t1  A's lease runs out; B takes it over, issues token B, writes it (no lease left)
          //   t2  A resumes; its write must fail whatever the item holds now, or the fleet
          //       would serve A's token, or lose B's. So no lease, or another holder's, is a no.
          ConditionExpression: 'leaseHolder = :holder',
          ExpressionAttributeValues: { ':holder': { S: holder } },
        }),
      ),
    );
  }

  async renewLease(
    connection: string,
    holder: string,
    leaseExpiresAt: number,
    durationMs: number,
    countdown: number,
  ): Promise<boolean> {
    return this.#conditional(async () =>
      this.client.send(
        new UpdateItemCommand({
          TableName: this.tableName,
          Key: tokenKey(connection),
          UpdateExpression:
            'SET leaseExpiresAt = :leaseExpiresAt, leaseDurationMs = :durationMs, leaseCountdown = :countdown',
          // The holder's writes only move forward: its expiry never goes back and its countdown
          // never goes up, so an attempt the SDK retried, applied late after later writes,
          // changes nothing (a reader trusting a raised countdown would serve too long).
          ConditionExpression:
            'leaseHolder = :holder AND leaseExpiresAt <= :leaseExpiresAt AND (attribute_not_exists(leaseCountdown) OR leaseCountdown >= :countdown)',
          ExpressionAttributeValues: {
            ':holder': { S: holder },
            ':leaseExpiresAt': { N: String(leaseExpiresAt) },
            ':durationMs': { N: String(durationMs) },
            ':countdown': { N: String(countdown) },
          },
        }),
      ),
    );
  }

  async releaseLease(connection: string, holder: string): Promise<boolean> {
    return this.#conditional(async () =>
      this.client.send(
        new UpdateItemCommand({
          TableName: this.tableName,
          Key: tokenKey(connection),
          UpdateExpression:
            'REMOVE leaseHolder, leaseExpiresAt, leaseDurationMs, leaseCountdown, leaseForced',
          ConditionExpression: 'leaseHolder = :holder',
          ExpressionAttributeValues: { ':holder': { S: holder } },
        }),
      ),
    );
  }

  async deleteIfMatches(
    connection: string,
    tokenDigest: string,
    { reportedAt = Date.now() }: { readonly reportedAt?: number | undefined } = {},
  ): Promise<boolean> {
    return this.#conditional(async () =>
      this.client.send(
        new UpdateItemCommand({
          TableName: this.tableName,
          Key: tokenKey(connection),
          // Only the token goes; a lease in progress stays, so the refresh it guards is not
          // started a second time by someone else.
          // The report's time stays until the next token is written (putToken replaces the
          // item): the next issuance's cause.
          UpdateExpression:
            'REMOVE accessToken, tokenCiphertext, tokenDataKey, tokenDigest, issuedAt, expiresAt, #ttl, forced, recheckMs, reportedDigest SET invalidatedAt = :reportedAt',
          // Compare-and-delete: a late report about an older token must not drop a newer one.
          // No age is compared here: the reporter's clock against the writer's stamp would let
          // a clock running ahead drop young tokens (the floor is judged by the broker core).
          ConditionExpression: 'tokenDigest = :digest',
          ExpressionAttributeNames: { '#ttl': 'ttl' },
          ExpressionAttributeValues: {
            ':digest': { S: tokenDigest },
            ':reportedAt': { N: String(reportedAt) },
          },
        }),
      ),
    );
  }

  async markReported(connection: string, tokenDigest: string): Promise<boolean> {
    return this.#conditional(async () =>
      this.client.send(
        new UpdateItemCommand({
          TableName: this.tableName,
          Key: tokenKey(connection),
          // Kept until the next token is written (putToken replaces the whole item).
          UpdateExpression: 'SET reportedDigest = :digest',
          ConditionExpression: 'tokenDigest = :digest',
          ExpressionAttributeValues: { ':digest': { S: tokenDigest } },
        }),
      ),
    );
  }

  /** Runs a conditional write; a failed condition is an answer (false), not an error. */
  async #conditional(write: () => Promise<unknown>): Promise<boolean> {
    try {
      await write();
      return true;
    } catch (error) {
      if (error instanceof ConditionalCheckFailedException) return false;
      throw error;
    }
  }
}
