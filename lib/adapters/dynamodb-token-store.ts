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
 * | ttl             | N    | DynamoDB TTL, clean-up only: token expiry + TTL_MARGIN_SECONDS; |
 * |                 |      | absent while a lease is held (see `ttlOf`)                    |
 * | leaseHolder     | S    | who is running the upstream flow now, if anyone               |
 * | leaseVersion    | S    | a fresh random id per lease write: conditions name exactly one |
 * | leaseExpiresAt  | N    | epoch ms (holder's clock) until which the holder counts on it |
 * | leaseDurationMs | N    | how long this lease version lasts on anyone's clock           |
 * | leaseCountdown  | N    | lease writes left before the holder's token request           |
 * | leaseForced     | BOOL | the lease replaces the token on a caller's word               |
 * | leaseStepMs     | N    | the holder's measured countdown step (0: none announced)      |
 * | leaseStepAt     | N    | the leaseExpiresAt written with leaseStepMs (else: none)      |
 * | recheckMs       | N    | the writer's memory re-check (ms): readers take the shorter   |
 * | forced          | BOOL | issued at a caller's word (see TokenRecord.forced); else absent |
 * | reportedDigest  | S    | digest of a token reported too young to go: replaced later    |
 * | invalidatedAt   | N    | epoch ms at which an invalidate report removed the token      |
 */
import {
  ConditionalCheckFailedException,
  type DynamoDBClient,
  GetItemCommand,
  PutItemCommand,
  UpdateItemCommand,
} from '@aws-sdk/client-dynamodb';
import { type Clock, systemClock } from '../clock.js';
import type {
  LeaseAttempt,
  LeaseRef,
  LeaseRequest,
  LeaseTerms,
  StoreCall,
  TokenCipher,
  TokenRecord,
  TokenState,
  TokenStore,
} from '../ports.js';
import { ConflictRetries, type ConflictRetry } from './dynamodb-conflicts.js';
import { exactly, LEASE_FIELDS, NO_TTL, TTL_NAME, terms } from './dynamodb-lease-expressions.js';
import { fromItem, toItem, tokenKey } from './dynamodb-token-item.js';

export { tokenKey } from './dynamodb-token-item.js';

export interface DynamoDBTokenStoreOptions {
  readonly clock?: Clock;
  /** How replicated write conflicts (MRSC) are retried: `dynamodb-conflicts.ts`. */
  readonly conflictRetry?: Partial<ConflictRetry>;
}

export class DynamoDBTokenStore implements TokenStore {
  readonly #clock: Clock;
  readonly #conflicts: ConflictRetries;

  constructor(
    private readonly client: DynamoDBClient,
    private readonly tableName: string,
    /** Application-level encryption of the token; without one, the table's encryption only. */
    private readonly cipher?: TokenCipher,
    options: DynamoDBTokenStoreOptions = {},
  ) {
    this.#clock = options.clock ?? systemClock;
    this.#conflicts = new ConflictRetries(this.#clock, options.conflictRetry);
  }

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

  async acquireLease(
    connection: string,
    request: LeaseRequest,
    call: StoreCall = {},
  ): Promise<LeaseAttempt> {
    const { takeOver, replacing } = request;
    const lease = takeOver ? exactly(takeOver, ':stale') : undefined;
    this.#conflicts.wrote(request);
    try {
      // A conflict was not applied: what the item holds is read before the take is sent again.
      // Another region's lease there means the take lost, with no further write (six containers
      // racing for a fleet's first lease otherwise kept conflicting with each other, and with
      // the winner's own writes, for 3-4 s); this take's own lease there means an earlier
      // attempt landed, its answer lost (sent again, its condition would fail, and the lease
      // stand, unheld, until it lapsed).
      const decided = await this.#conflicts.retry(call, async (conflictsBefore) => {
        if (conflictsBefore > 0) {
          const state = await this.read(connection);
          const verdict = afterConflict(request, state);
          if (verdict) return verdict;
        }
        await this.client.send(
          new UpdateItemCommand({
            TableName: this.tableName,
            Key: tokenKey(connection),
            UpdateExpression: `SET leaseHolder = :holder, leaseForced = :forced, ${LEASE_FIELDS} ${NO_TTL}`,
            // Timeline of the race this prevents:
            //   t0  A and B both read a token about to expire, no lease
            //   t1  A takes the lease (condition holds), runs the flow
            //   t2  B tries: a lease exists → fails, B waits for A's token
            //   t3  A writes its token and the lease goes with it (putToken)
            //   t4  a late C tries: no lease, but the item no longer holds the token C read →
            //       fails, C serves A's token. Without the token clause C would issue again.
            // A holder that dies leaves its lease: a waiter that saw that same version unchanged
            // for its duration, on the waiter's own clock, takes over exactly that version. No
            // clock of another container is compared with ours, so a skewed clock takes nothing
            // early; and if the holder wrote meanwhile, the version differs and this fails.
            // A takeover lands only on exactly that version: never on a lease that has gone, since
            // a reader may have read the token with no lease since, and been told it is safe for
            // a whole countdown (I2; review finding R1).
            ConditionExpression: `${lease ? lease.condition : 'attribute_not_exists(leaseHolder)'} AND ${
              replacing === undefined
                ? 'attribute_not_exists(tokenDigest)'
                : 'tokenDigest = :replacing'
            }`,
            ExpressionAttributeNames: TTL_NAME,
            ExpressionAttributeValues: {
              ...terms(request),
              ':holder': { S: request.holder },
              ':forced': { BOOL: request.forced === true },
              ...(replacing === undefined ? {} : { ':replacing': { S: replacing } }),
              ...lease?.values,
            },
            ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
          }),
        );
        return undefined;
      });
      return decided ?? { acquired: true };
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

  async putToken(record: TokenRecord, lease: LeaseRef, call: StoreCall = {}): Promise<boolean> {
    const held = exactly(lease, ':held');
    // Sealed once: a retry after a conflict sends the same item.
    const item = await toItem(record, this.cipher);
    const wrote = await this.#conflicts.attempt(call, async () =>
      this.client.send(
        new PutItemCommand({
          TableName: this.tableName,
          // The whole item is replaced: the lease attributes are not in it, so this releases
          // the lease in the same write.
          Item: item,
          // Only the lease holder writes, under the very lease version it last wrote: the
          // fencing check on the far side. Timeline of the fault it stops (a holder paused
          // past its lease):
          //   t0  A holds the lease, gets an authorization code, and pauses (GC, CPU starved)
          //   t1  A's lease runs out; B takes it over, issues token B, writes it (no lease left)
          //   t2  A resumes; its write must fail whatever the item holds now, or the fleet
          //       would serve A's token, or lose B's. So no lease, or another version, is a no.
          ConditionExpression: held.condition,
          ExpressionAttributeValues: held.values,
        }),
      ),
    );
    if (wrote !== 'refused after a conflict') return wrote;
    // A retry after a conflict found the lease gone: re-read, for an earlier attempt of this
    // very write may have landed (an SDK attempt whose answer was lost), and released it.
    const { token, lease: now } = await this.read(record.connection);
    return token?.tokenDigest === record.tokenDigest && now === undefined;
  }

  async renewLease(
    connection: string,
    lease: LeaseRef,
    next: LeaseTerms,
    call: StoreCall = {},
  ): Promise<boolean> {
    const held = exactly(lease, ':held');
    this.#conflicts.wrote(next);
    // A conflict was not applied: sent again until it lands or is refused. A refusal after a
    // conflict needs no re-read: the condition accepts this very write having landed.
    return this.#conflicts.conditional(call, async () =>
      this.client.send(
        new UpdateItemCommand({
          TableName: this.tableName,
          Key: tokenKey(connection),
          UpdateExpression: `SET ${LEASE_FIELDS} ${NO_TTL}`,
          // Exactly the version last written, or the one this write sets (an SDK retry of an
          // attempt that landed, whose answer was lost: applying it again changes nothing). An
          // attempt applied late, after a later write, finds another version: a reader trusting
          // a countdown never sees it go back up. The holder is named in both branches: a lease
          // an older release took over keeps the version attribute it found (its writes set
          // none), and a late retry must not land on that holder's lease.
          ConditionExpression: `(${held.condition}) OR (leaseHolder = :heldHolder AND leaseVersion = :version)`,
          ExpressionAttributeNames: TTL_NAME,
          ExpressionAttributeValues: { ...terms(next), ...held.values },
        }),
      ),
    );
  }

  async releaseLease(connection: string, lease: LeaseRef, call: StoreCall = {}): Promise<boolean> {
    const held = exactly(lease, ':held');
    // Also the holder's own write whose answer was lost (say the fence's confirmation): it may
    // have landed, and nothing was sent under it; without this, it would stand for its whole
    // duration with countdown 0, and the token be suspect fleet-wide until it lapsed.
    const condition = lease.unanswered
      ? `(${held.condition}) OR (leaseHolder = :heldHolder AND leaseVersion = :unanswered)`
      : held.condition;
    // A release that conflicts is retried until it lands or its lease lapses: left in place, it
    // would hold every other container for its duration.
    return this.#conflicts.conditional(this.#conflicts.untilLapsed(lease, call), async () =>
      this.client.send(
        new UpdateItemCommand({
          TableName: this.tableName,
          Key: tokenKey(connection),
          UpdateExpression:
            'REMOVE leaseHolder, leaseVersion, leaseExpiresAt, leaseDurationMs, leaseCountdown, leaseForced, leaseStepMs, leaseStepAt',
          ConditionExpression: condition,
          ExpressionAttributeValues: {
            ...held.values,
            ...(lease.unanswered ? { ':unanswered': { S: lease.unanswered } } : {}),
          },
        }),
      ),
    );
  }

  async deleteIfMatches(
    connection: string,
    tokenDigest: string,
    {
      reportedAt = this.#clock.now(),
      deadline,
    }: { readonly reportedAt?: number | undefined } & StoreCall = {},
  ): Promise<boolean> {
    return this.#conflicts.conditional({ deadline }, async () =>
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

  async markReported(
    connection: string,
    tokenDigest: string,
    call: StoreCall = {},
  ): Promise<boolean> {
    return this.#conflicts.conditional(call, async () =>
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
}

/**
 * What a read after a conflicting take says of it, if anything: taken (its own lease is there:
 * an earlier attempt landed), or lost (another lease is there, or the one to take over has gone).
 * Undefined: the take may still land, and is sent again.
 */
export const afterConflict = (
  request: LeaseRequest,
  state: TokenState,
): LeaseAttempt | undefined => {
  const { lease } = state;
  if (lease?.holder === request.holder && lease.version === request.version) {
    return { acquired: true };
  }
  const { takeOver } = request;
  const free = takeOver
    ? lease?.holder === takeOver.holder && lease.version === takeOver.version
    : lease === undefined;
  return free ? undefined : { acquired: false, state };
};
