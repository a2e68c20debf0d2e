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
 * | seq, epoch      | N    | where the item's image stands, for its read copies            |
 * | copies          | N    | how many read copies the item has (absent: none)              |
 * | copiesRetiring  | N    | while copies are reduced: how many writers still keep         |
 *
 * Read copies, items `copy#<i>#token#<connection>` (ADR 0024, `dynamodb-token-copies.ts`): every
 * write of the main item is answered only once each copy holds its image or a later one, and
 * reads go to a copy once this container knows the item has some.
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
import { type Bound, ConflictRetries, type ConflictRetry } from './dynamodb-conflicts.js';
import { exactly, LEASE_FIELDS, TTL_NAME, terms } from './dynamodb-lease-expressions.js';
import {
  COPY_CONDITION,
  CopiesUnwrittenError,
  copiesOf,
  copiesToKeep,
  copyImage,
  copyKey,
  type ImageOrder,
  KnownCopies,
  MAX_COPIES,
  orderOf,
  SEQUENCE_ADD,
  SEQUENCE_SET,
  sequenceValues,
} from './dynamodb-token-copies.js';
import {
  fromItem,
  type Item,
  LEASE_ATTRIBUTES,
  replacingWrite,
  toItem,
  tokenKey,
} from './dynamodb-token-item.js';

export { copyKey, MAX_COPIES } from './dynamodb-token-copies.js';
export { tokenKey } from './dynamodb-token-item.js';

/**
 * One write of the main item: what it sets and removes, under which condition. Every write adds
 * the sequence (`seq`, `epoch`) and asks for the new image, or the old one when refused.
 */
interface MainWrite {
  readonly set?: readonly string[];
  readonly remove?: readonly string[];
  /**
   * The REMOVE clause first, as these writes were before the sequence (a release, a dropped
   * token): the chaos suite tells writes apart by how their expression starts.
   */
  readonly removeFirst?: boolean;
  readonly condition: string;
  readonly names?: Readonly<Record<string, string>>;
  readonly values?: Item;
}

/** The refusal of a conditional write, with the item that refused it when DynamoDB sent it. */
interface Refusal {
  readonly item: Item | undefined;
}

export interface DynamoDBTokenStoreOptions {
  readonly clock?: Clock;
  /** How replicated write conflicts (MRSC) are retried: `dynamodb-conflicts.ts`. */
  readonly conflictRetry?: Partial<ConflictRetry>;
}

export class DynamoDBTokenStore implements TokenStore {
  readonly #clock: Clock;
  readonly #conflicts: ConflictRetries;
  /** How many copies each connection's item has, as far as this container has seen. */
  readonly #known = new KnownCopies();

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
    // A sealed token is opened once the read answers: the cipher's code loads meanwhile.
    this.cipher?.prepare?.();
    // With copies (ADR 0024), one picked at random: it holds every write answered before this
    // read was sent, as the main item does. A copy that cannot answer (missing, past the copies
    // its image says there are, or older than an image seen here) sends the read to the main item.
    const copies = this.#known.copies(connection);
    if (copies > 0) {
      const index = Math.min(copies - 1, Math.floor(this.#clock.random() * copies));
      const image = await this.#get(copyKey(connection, index));
      if (image && this.#known.answers(connection, index, image)) {
        this.#known.copy(connection, image);
        return fromItem(image, this.cipher);
      }
    }
    return fromItem(await this.#readMain(connection), this.cipher);
  }

  async acquireLease(
    connection: string,
    request: LeaseRequest,
    call: StoreCall = {},
  ): Promise<LeaseAttempt> {
    const { takeOver, replacesDigest } = request;
    const lease = takeOver ? exactly(takeOver, ':stale') : undefined;
    this.#conflicts.wrote(request);
    let refusal: Refusal | undefined;
    // A conflict was not applied: what the item holds is read before the take is sent again.
    // Another region's lease there means the take lost, with no further write (six containers
    // racing for a fleet's first lease otherwise kept conflicting with each other, and with
    // the winner's own writes, for 3-4 s); this take's own lease there means an earlier
    // attempt landed, its answer lost (sent again, its condition would fail, and the lease
    // stand, unheld, until it lapsed). Either way the main item's image goes to its copies
    // before the answer.
    const decided = await this.#conflicts
      .retry(call, async (conflictsBefore) => {
        if (conflictsBefore > 0) {
          const main = await this.#readMain(connection);
          const verdict = afterConflict(request, await fromItem(main, this.cipher));
          if (verdict) return { verdict, main };
        }
        try {
          const main = await this.#update(connection, {
            set: ['leaseHolder = :holder', 'leaseForced = :forced', LEASE_FIELDS],
            remove: ['#ttl'],
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
            condition: `${lease ? lease.condition : 'attribute_not_exists(leaseHolder)'} AND ${
              replacesDigest === undefined
                ? 'attribute_not_exists(tokenDigest)'
                : 'tokenDigest = :replacesDigest'
            }`,
            names: TTL_NAME,
            values: {
              ...terms(request),
              ':holder': { S: request.holder },
              ':forced': { BOOL: request.forced === true },
              ...(replacesDigest === undefined ? {} : { ':replacesDigest': { S: replacesDigest } }),
              ...lease?.values,
            },
          });
          return { verdict: { acquired: true } as const, main };
        } catch (error) {
          if (error instanceof ConditionalCheckFailedException) refusal = { item: error.Item };
          throw error;
        }
      })
      .catch((error: unknown) => {
        if (!(error instanceof ConditionalCheckFailedException)) throw error;
        return undefined;
      });
    if (decided) {
      await this.#keepCopies(connection, decided.main, call);
      return decided.verdict;
    }
    // DynamoDB returns the winning item (ReturnValuesOnConditionCheckFailure); dynalite
    // does not, and then the state that won is read here, so the port means the same on both.
    // Its own version there (an attempt whose answer was lost landed) is taken by the core:
    // answered only once every copy holds it.
    const main = await this.#heal(
      connection,
      refusal,
      call,
      true,
      (image) => image?.leaseVersion?.S === request.version,
    );
    return { acquired: false, state: await fromItem(main, this.cipher) };
  }

  async putToken(record: TokenRecord, lease: LeaseRef, call: StoreCall = {}): Promise<boolean> {
    const held = exactly(lease, ':held');
    // Sealed once: a retry after a conflict sends the same item.
    const token = replacingWrite(await toItem(record, this.cipher));
    const { outcome, main } = await this.#conditional(
      record.connection,
      call,
      {
        // The whole item is replaced, as a PutItem would (its bookkeeping for the copies
        // aside): the lease attributes are removed, so this releases the lease in the same
        // write.
        set: token.set,
        remove: token.remove,
        // Only the lease holder writes, under the very lease version it last wrote: the
        // fencing check on the far side. Timeline of the fault it stops (a holder paused
        // past its lease):
        //   t0  A holds the lease, gets an authorization code, and pauses (GC, CPU starved)
        //   t1  A's lease runs out; B takes it over, issues token B, writes it (no lease left)
        //   t2  A resumes; its write must fail whatever the item holds now, or the fleet
        //       would serve A's token, or lose B's. So no lease, or another version, is a no.
        condition: held.condition,
        names: token.names,
        values: { ...token.values, ...held.values },
      },
      // Its own token there may answer it as written (below): only once every copy holds it.
      (image) => image?.tokenDigest?.S === record.tokenDigest,
    );
    if (outcome !== 'refused after a conflict') return outcome;
    // A retry after a conflict found the lease gone: an earlier attempt of this very write may
    // have landed (an SDK attempt whose answer was lost), and released it.
    const { token: stored, lease: now } = await fromItem(main, this.cipher);
    return stored?.tokenDigest === record.tokenDigest && now === undefined;
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
    const { outcome } = await this.#conditional(connection, call, {
      set: [LEASE_FIELDS],
      remove: ['#ttl'],
      // Exactly the version last written, or the one this write sets (an SDK retry of an
      // attempt that landed, whose answer was lost: applying it again changes nothing). An
      // attempt applied late, after a later write, finds another version: a reader trusting
      // a countdown never sees it go back up. The holder is named in both branches: a lease
      // an older release took over keeps the version attribute it found (its writes set
      // none), and a late retry must not land on that holder's lease.
      condition: `(${held.condition}) OR (leaseHolder = :heldHolder AND leaseVersion = :version)`,
      names: TTL_NAME,
      values: { ...terms(next), ...held.values },
    });
    return outcome === true;
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
    const { outcome } = await this.#conditional(
      connection,
      this.#conflicts.untilLapsed(lease, call),
      {
        removeFirst: true,
        remove: LEASE_ATTRIBUTES,
        condition,
        values: {
          ...held.values,
          ...(lease.unanswered ? { ':unanswered': { S: lease.unanswered } } : {}),
        },
      },
    );
    return outcome === true;
  }

  async deleteIfMatches(
    connection: string,
    tokenDigest: string,
    {
      reportedAt = this.#clock.now(),
      deadline,
    }: { readonly reportedAt?: number | undefined } & StoreCall = {},
  ): Promise<boolean> {
    const { outcome } = await this.#conditional(
      connection,
      { deadline },
      {
        // Only the token goes; a lease in progress stays, so the refresh it guards is not
        // started a second time by someone else.
        // The report's time stays until the next token is written (putToken replaces the
        // item): the next issuance's cause.
        set: ['invalidatedAt = :reportedAt'],
        removeFirst: true,
        remove: [
          'accessToken',
          'tokenCiphertext',
          'tokenDataKey',
          'tokenDigest',
          'issuedAt',
          'expiresAt',
          '#ttl',
          'forced',
          'recheckMs',
          'reportedDigest',
        ],
        // Compare-and-delete: a late report about an older token must not drop a newer one.
        // No age is compared here: the reporter's clock against the writer's stamp would let
        // a clock running ahead drop young tokens (the floor is judged by the broker core).
        condition: 'tokenDigest = :digest',
        names: TTL_NAME,
        values: {
          ':digest': { S: tokenDigest },
          ':reportedAt': { N: String(reportedAt) },
        },
      },
    );
    return outcome === true;
  }

  async markReported(
    connection: string,
    tokenDigest: string,
    call: StoreCall = {},
  ): Promise<boolean> {
    const { outcome } = await this.#conditional(connection, call, {
      // Kept until the next token is written (putToken replaces the whole item).
      set: ['reportedDigest = :digest'],
      condition: 'tokenDigest = :digest',
      values: { ':digest': { S: tokenDigest } },
    });
    return outcome === true;
  }

  /**
   * The operator's action (ADR 0024): sets how many read copies the connection's item has,
   * `copies` in [0, MAX_COPIES], and answers once every copy a reader may read holds an image
   * saying so. Fewer copies than before (0 too) take two writes of the main item: the first
   * has writers keep the old copies as well (`copiesRetiring`) until this action has put its
   * image on every one of them, so that none a reader still reads falls behind; the second
   * lets them go. Refused when another change of the count came between its read and its
   * write (run it again).
   *
   * @returns the count before, and the one set.
   */
  async setCopies(
    connection: string,
    copies: number,
    call: StoreCall = {},
  ): Promise<{ readonly previous: number; readonly copies: number }> {
    if (!Number.isInteger(copies) || copies < 0 || copies > MAX_COPIES) {
      throw new RangeError(`copies must be a whole number from 0 to ${MAX_COPIES}`);
    }
    const before = await this.#readMain(connection);
    const previous = copiesOf(before);
    const kept = Math.max(copiesToKeep(before), copies);
    const unchanged = (attribute: 'copies' | 'copiesRetiring', name: string) =>
      before?.[attribute]?.N === undefined
        ? { condition: `attribute_not_exists(${attribute})`, values: {} }
        : { condition: `${attribute} = ${name}`, values: { [name]: { N: before[attribute].N } } };
    const wasCopies = unchanged('copies', ':wasCopies');
    const wasRetiring = unchanged('copiesRetiring', ':wasRetiring');
    const set = await this.#conditional(connection, call, {
      set: ['copies = :copies', ...(kept > copies ? ['copiesRetiring = :kept'] : [])],
      remove: kept > copies ? [] : ['copiesRetiring'],
      condition: `${wasCopies.condition} AND ${wasRetiring.condition}`,
      values: {
        ':copies': { N: String(copies) },
        ...(kept > copies ? { ':kept': { N: String(kept) } } : {}),
        ...wasCopies.values,
        ...wasRetiring.values,
      },
    });
    if (set.outcome !== true) throw changedMeanwhile(connection);
    if (kept > copies) {
      // Every copy from `copies` on now says it is no longer read: writers may let it go.
      const retired = await this.#conditional(connection, call, {
        remove: ['copiesRetiring'],
        condition: 'copies = :copies AND copiesRetiring = :kept',
        values: { ':copies': { N: String(copies) }, ':kept': { N: String(kept) } },
      });
      if (retired.outcome !== true) throw changedMeanwhile(connection);
    }
    return { previous, copies };
  }

  /** Reads the main item (strongly consistent), and learns its copies. */
  async #readMain(connection: string): Promise<Item | undefined> {
    const main = await this.#get(tokenKey(connection));
    this.#known.main(connection, main);
    return main;
  }

  // Strongly consistent: right after an invalidate or a new issuance elsewhere, an eventually
  // consistent read could hand back the token that was just dropped or the lease just freed.
  async #get(key: Item): Promise<Item | undefined> {
    const { Item } = await this.client.send(
      new GetItemCommand({ TableName: this.tableName, Key: key, ConsistentRead: true }),
    );
    return Item;
  }

  /**
   * Sends one write of the main item, with the sequence the copies are ordered by, and answers
   * its new image (learned). A refusal is thrown as the SDK's `ConditionalCheckFailedException`,
   * with the item that refused it on DynamoDB.
   */
  async #update(connection: string, write: MainWrite): Promise<Item | undefined> {
    const remove = write.remove ?? [];
    const clauses = [
      `SET ${[...(write.set ?? []), SEQUENCE_SET].join(', ')}`,
      ...(remove.length > 0 ? [`REMOVE ${remove.join(', ')}`] : []),
    ];
    if (write.removeFirst) clauses.reverse();
    const { Attributes } = await this.client.send(
      new UpdateItemCommand({
        TableName: this.tableName,
        Key: tokenKey(connection),
        UpdateExpression: `${clauses.join(' ')} ${SEQUENCE_ADD}`,
        ConditionExpression: write.condition,
        ...(write.names ? { ExpressionAttributeNames: { ...write.names } } : {}),
        ExpressionAttributeValues: { ...write.values, ...sequenceValues(this.#clock.now()) },
        ReturnValues: 'ALL_NEW',
        ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
      }),
    );
    this.#known.main(connection, Attributes);
    return Attributes;
  }

  /**
   * A conditional write of the main item, conflicts retried within `bound`, answered once the
   * copies hold its image (written) or the image that refused it (refused, best effort: see
   * {@link #heal}). `ownWrite`, given by a write that judges a retry: a refusal after a conflict
   * answers with the main item's image, read on dynalite (which returns none) even with no
   * copies known, and an image that shows this write landed reaches every copy first.
   */
  async #conditional(
    connection: string,
    bound: Bound,
    write: MainWrite,
    ownWrite?: (image: Item | undefined) => boolean,
  ): Promise<{ outcome: boolean | 'refused after a conflict'; main: Item | undefined }> {
    let main: Item | undefined;
    let refusal: Refusal | undefined;
    const outcome = await this.#conflicts.attempt(bound, async () => {
      try {
        main = await this.#update(connection, write);
      } catch (error) {
        if (error instanceof ConditionalCheckFailedException) refusal = { item: error.Item };
        throw error;
      }
    });
    if (outcome === true) {
      await this.#keepCopies(connection, main, bound);
      return { outcome, main };
    }
    const needImage = ownWrite !== undefined && outcome === 'refused after a conflict';
    return { outcome, main: await this.#heal(connection, refusal, bound, needImage, ownWrite) };
  }

  /**
   * After a refusal: the image that refused the write goes to the copies, for a copy that lags
   * (a writer stopped between the main item and its copies) shows its readers an older state,
   * and a taker that read it would be refused again and again. DynamoDB sends the image with the
   * refusal; dynalite does not, and then the main item is read when copies are known, or the
   * caller needs the image.
   *
   * Best effort: a refusal changed nothing, and its answer is the main item's state, which proves
   * what a read of the main item proves (R1, R2) whether or not the copies caught up; so a copy
   * that cannot be written (throttled, or not by the call's bound) does not make it an unknown
   * outcome (`STORE_UNAVAILABLE` for a take that lost, a report about an older token). Unless the
   * image shows the write itself landed (`ownWrite`: an attempt whose answer was lost), which the
   * caller may take as answered: then every copy must hold it first.
   */
  async #heal(
    connection: string,
    refusal: Refusal | undefined,
    bound: Bound,
    needImage: boolean,
    ownWrite: (image: Item | undefined) => boolean = () => false,
  ): Promise<Item | undefined> {
    let main = refusal?.item;
    if (main) this.#known.main(connection, main);
    else if (needImage || this.#known.copies(connection) > 0) {
      main = await this.#readMain(connection);
    }
    const own = ownWrite(main);
    try {
      // A heal's refused put is left at that (the copy holds a later image, or one of an
      // earlier item, which the next write of this item checks): not read back, which on
      // dynalite (no image with a refusal) cost a read per copy per refused write.
      await this.#keepCopies(connection, main, bound, { checkEpochs: own });
    } catch (error) {
      if (!(error instanceof CopiesUnwrittenError) || own) throw error;
    }
    return main;
  }

  /**
   * Puts `main` (an image of the main item) on every copy its writers keep, in parallel: a copy
   * that holds it or a later image already refuses it, which is as good. Answers once all
   * hold it; a copy that cannot be written, or is not by the call's bound, throws
   * {@link CopiesUnwrittenError}: the write's outcome is unknown to the caller.
   */
  async #keepCopies(
    connection: string,
    main: Item | undefined,
    bound: Bound,
    { checkEpochs = true } = {},
  ): Promise<void> {
    const order = orderOf(main);
    const count = copiesToKeep(main);
    if (!main || !order || count === 0) return;
    const puts = Array.from({ length: count }, (_, index) =>
      this.#putCopy(connection, main, order, index, bound, checkEpochs),
    );
    const settled = Promise.allSettled(puts);
    // The caller's bound: past it, the write's outcome is unknown to the caller (the puts go
    // on, and a late one never overwrites a later image).
    const endMs = this.#conflicts.endOf(bound);
    const leftMs = endMs === undefined ? undefined : endMs - this.#clock.monotonic();
    let cancel: (() => void) | undefined;
    const late = new Promise<'late'>((resolve) => {
      if (leftMs !== undefined)
        cancel = this.#clock.after(Math.max(0, leftMs), () => resolve('late'));
    });
    const outcome = await Promise.race([settled, late]);
    cancel?.();
    if (outcome === 'late') throw new CopiesUnwrittenError(connection, { cause: 'deadline' });
    const failed = outcome.find((put) => put.status === 'rejected');
    if (failed) throw new CopiesUnwrittenError(connection, { cause: failed.reason });
  }

  /**
   * Puts `main` on copy `index` unless the copy holds it or a later image. A refusal by a copy
   * whose epoch is later than the image's is checked, since epochs are wall clocks: either the
   * item was deleted and written again since (this image is late: as good), or the copy is of an
   * earlier item whose epoch a clock far ahead started (an operator's: `setCopies` on an item
   * with none), which would refuse every image of this item, each write answered with the copy
   * left behind. The main item tells them apart: still in this image's epoch, the copy is
   * overwritten, exactly the image it holds (a writer that moved it meanwhile goes first).
   */
  async #putCopy(
    connection: string,
    main: Item,
    order: ImageOrder,
    index: number,
    bound: Bound,
    checkEpochs: boolean,
  ): Promise<void> {
    const ordinary = {
      condition: COPY_CONDITION,
      values: { ':epoch': { N: String(order.epoch) }, ':seq': { N: String(order.seq) } } as Item,
    };
    let { condition, values } = ordinary;
    for (let attempt = 0; attempt < 3; attempt += 1) {
      let held: Item | undefined;
      const written = await this.#conflicts.conditional(bound, async () => {
        try {
          await this.client.send(
            new PutItemCommand({
              TableName: this.tableName,
              Item: copyImage(main, connection, index),
              ConditionExpression: condition,
              ExpressionAttributeValues: values,
              ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
            }),
          );
        } catch (error) {
          if (error instanceof ConditionalCheckFailedException) held = error.Item;
          throw error;
        }
      });
      if (written || !checkEpochs) return;
      // Refused: the copy holds a later image, unless it is of an earlier item (see above).
      // DynamoDB returns the copy with the refusal; dynalite does not.
      held ??= await this.#get(copyKey(connection, index));
      const copy = orderOf(held);
      if (!copy || copy.epoch <= order.epoch) {
        if (condition === COPY_CONDITION) return;
        // The copy moved since it was seen: put again under the ordinary condition.
        ({ condition, values } = ordinary);
        continue;
      }
      if (orderOf(await this.#get(tokenKey(connection)))?.epoch !== order.epoch) return;
      condition = 'epoch = :heldEpoch AND seq = :heldSeq';
      values = { ':heldEpoch': { N: String(copy.epoch) }, ':heldSeq': { N: String(copy.seq) } };
    }
    throw new Error(`Copy ${index} of '${connection}' kept moving`);
  }
}

const changedMeanwhile = (connection: string): Error =>
  new Error(
    `The copies of '${connection}' were changed by someone else meanwhile: run the command again`,
  );

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
