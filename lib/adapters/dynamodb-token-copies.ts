/**
 * Read copies of the token item (ADR 0024, issue 25's hot key): items `copy#<i>#token#<c>`,
 * `i < K`, each holding an image of the main item `token#<c>`, so that reads of one connection
 * spread over K items. The key starts with `copy#`, not with the main item's: a connection's
 * name may hold any character, and `token#<c>#copy#<i>` is the main key of a connection named
 * `<c>#copy#<i>`. The main item stays the only item written under a condition; a copy is
 * only ever written with an image of it, and only forwards:
 *
 * - **Main is the sequencer.** Every write of the main item adds 1 to `seq` and keeps `epoch`
 *   (the wall clock of the write that created the item), and asks for the new image. Two images
 *   of one item are ordered by (epoch, seq): an item deleted and written again starts a later
 *   epoch (its creator's clock, a token lifetime and TTL's margin later, within the skew).
 * - **A write is answered only once every copy holds its image or a later one** (the store
 *   puts it under {@link COPY_CONDITION}; a refusal means the copy is newer). So a read of a copy
 *   shows every write answered before the read was sent, and a write it does not show was
 *   answered after that: what the single item's reads give I2 (docs/protocol.md, "Read copies").
 * - **The item says how many copies it has** (`copies`), never a setting: every writer of this
 *   release keeps as many as the image it wrote says, and more while a reduction is under way
 *   (`copiesRetiring`, see {@link copiesToKeep}). A reader learns K from the images it reads.
 *
 * | attribute      | type | meaning                                                        |
 * |----------------|------|----------------------------------------------------------------|
 * | seq            | N    | writes of the main item since it was created (ADD 1 per write) |
 * | epoch          | N    | epoch ms (writer's clock) of the write that created the item   |
 * | copies         | N    | how many copies readers read (absent: none)                    |
 * | copiesRetiring | N    | while copies are reduced: how many writers still keep          |
 */
import type { Item } from './dynamodb-token-item.js';

/** The most copies an operator may set (ADR 0024: K = 3 meets issue 25's 0.2; 8 is room). */
export const MAX_COPIES = 8;

/** The key of copy `index` of a connection's token item. */
export const copyKey = (connection: string, index: number): Item => ({
  pk: { S: `copy#${index}#token#${connection}` },
});

/**
 * The SET and ADD parts every write of the main item carries: `seq` up by one, `epoch` kept
 * (or set, by the write that creates the item). Values `:one` and `:epochNow`
 * ({@link sequenceValues}).
 */
export const SEQUENCE_SET = 'epoch = if_not_exists(epoch, :epochNow)';
export const SEQUENCE_ADD = 'ADD seq :one';
export const sequenceValues = (now: number): Item => ({
  ':one': { N: '1' },
  ':epochNow': { N: String(now) },
});

/**
 * A copy takes an image only if it holds none, or an older one: a copy never goes back, so a
 * late writer's image (or one of an item deleted since) never overwrites a newer one.
 */
export const COPY_CONDITION =
  'attribute_not_exists(pk) OR epoch < :epoch OR (epoch = :epoch AND seq < :seq)';

/** Where an image stands in its item's history: (epoch, seq); undefined when it has none. */
export interface ImageOrder {
  readonly epoch: number;
  readonly seq: number;
}

export const orderOf = (image: Item | undefined): ImageOrder | undefined => {
  const epoch = Number(image?.epoch?.N);
  const seq = Number(image?.seq?.N);
  return Number.isSafeInteger(epoch) && Number.isSafeInteger(seq) ? { epoch, seq } : undefined;
};

/** Whether `a` comes before `b` in the item's history. */
export const isBefore = (a: ImageOrder, b: ImageOrder): boolean =>
  a.epoch < b.epoch || (a.epoch === b.epoch && a.seq < b.seq);

/** A count of copies as stored: an integer in [0, MAX_COPIES], anything else read as 0. */
const countOf = (value: string | undefined): number => {
  const count = Number(value ?? 0);
  return Number.isInteger(count) && count >= 0 && count <= MAX_COPIES ? count : 0;
};

/** How many copies an image tells readers to read (`copies`). */
export const copiesOf = (image: Item | undefined): number => countOf(image?.copies?.N);

/**
 * How many copies the writer of `image` keeps: `copies`, or more while copies are being reduced
 * (`copiesRetiring`, the count before). A reader that learned the larger count may still read
 * a copy past the new one until that copy holds an image saying so; until then writers keep it,
 * or a write answered meanwhile would be missing from it.
 */
export const copiesToKeep = (image: Item | undefined): number =>
  Math.max(copiesOf(image), countOf(image?.copiesRetiring?.N));

/** The image of `main` as copy `index` holds it: the same attributes under the copy's key. */
export const copyImage = (main: Item, connection: string, index: number): Item => ({
  ...main,
  ...copyKey(connection, index),
});

/** What a reader knows of a connection's copies: how many, as of which image. */
interface Known {
  readonly copies: number;
  readonly order: ImageOrder | undefined;
}

/**
 * What this container knows of each connection's copies, learned from every image it reads or
 * writes (main or copy), newest image wins. The main item's image is the authority: an item
 * without `seq` (none, or written only by an older release) has no copies.
 */
export class KnownCopies {
  readonly #known = new Map<string, Known>();

  /** How many copies a read of `connection` may choose from (0: read the main item). */
  copies(connection: string): number {
    return this.#known.get(connection)?.copies ?? 0;
  }

  /**
   * Whether a copy's image may answer a read: it exists, says it is one of the copies
   * readers read (`index < copies`: a copy past a reduction says so, and is no longer kept),
   * and is no older than an image this container has seen (a copy a write in flight has not
   * reached yet; or one left from before the item was deleted).
   */
  answers(connection: string, index: number, image: Item | undefined): boolean {
    const order = orderOf(image);
    if (!image || !order || index >= copiesOf(image)) return false;
    const seen = this.#known.get(connection)?.order;
    return !seen || !isBefore(order, seen);
  }

  /** Learns from an image of the main item (undefined: there is none). */
  main(connection: string, image: Item | undefined): void {
    const order = orderOf(image);
    if (!order) {
      this.#known.delete(connection);
      return;
    }
    this.#learn(connection, { copies: copiesOf(image), order });
  }

  /** Learns from a copy's image that answered a read. */
  copy(connection: string, image: Item): void {
    this.#learn(connection, { copies: copiesOf(image), order: orderOf(image) });
  }

  #learn(connection: string, next: Known): void {
    const seen = this.#known.get(connection)?.order;
    // Two reads in flight may answer out of order: the newer image stands.
    if (seen && next.order && isBefore(next.order, seen)) return;
    this.#known.set(connection, next);
  }
}

/**
 * A write of the main item landed (or may have), but its image is not on every copy: the
 * write's outcome is unknown to the caller, as a write whose answer was lost (ADR 0009). The
 * core sends it again or releases under `unanswered`; a later write, or a failed condition's
 * image, brings the copies forward.
 */
export class CopiesUnwrittenError extends Error {
  override readonly name = 'CopiesUnwrittenError';
  constructor(connection: string, options?: ErrorOptions) {
    super(`The token item's copies of '${connection}' were not all written`, options);
  }
}
