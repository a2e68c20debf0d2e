/**
 * Read copies of the token item (ADR 0024) over the model's in-memory store, kept as the
 * DynamoDB adapter keeps them (`lib/adapters/dynamodb-token-copies.ts`): every write that lands
 * on the main item adds 1 to its sequence (a write that creates the item starts a later epoch),
 * each copy holds an image of the main item and takes only a later one, and a reader skips a copy
 * older than an image it has seen. How the copies are written and read (round trips, failures,
 * a writer stopped before its copies) is the model's: it calls {@link ModelCopies.put} and
 * {@link ModelCopies.copy} inside its store calls.
 */
import type { TokenState } from '../../lib/ports.js';
import type { InMemoryTokenStore } from './fakes.js';

export interface Order {
  readonly epoch: number;
  readonly seq: number;
}

export interface Image extends Order {
  readonly state: TokenState;
  /** The main item's `ttl` when the image was taken: TTL deletes a copy as it does the item. */
  readonly ttl: number | undefined;
}

export const isBefore = (a: Order, b: Order): boolean =>
  a.epoch < b.epoch || (a.epoch === b.epoch && a.seq < b.seq);

export class ModelCopies {
  readonly #orders = new Map<string, Order>();
  readonly #copies = new Map<string, (Image | undefined)[]>();
  #epochs = 0;

  constructor(
    private readonly store: InMemoryTokenStore,
    /** How many copies every item has (0: none, the store is read and written as before). */
    readonly count: number,
  ) {}

  /** A write landed on the main item; `existed`: the item was there before it. */
  wrote(connection: string, existed: boolean): void {
    const order = this.#orders.get(connection);
    if (!existed || !order) {
      this.#epochs += 1;
      this.#orders.set(connection, { epoch: this.#epochs, seq: 1 });
    } else {
      this.#orders.set(connection, { epoch: order.epoch, seq: order.seq + 1 });
    }
  }

  /** Where the main item stands now (undefined: no item). */
  order(connection: string): Order | undefined {
    return this.store.items.has(connection) ? this.#orders.get(connection) : undefined;
  }

  /** The main item's image now, as a write's new image or a refusal's old one gives it. */
  image(connection: string): Image | undefined {
    const order = this.order(connection);
    if (!order) return undefined;
    return {
      ...order,
      state: this.store.stateOf(connection),
      ttl: this.store.items.get(connection)?.ttl,
    };
  }

  /** Puts `image` on copy `index`, unless the copy holds it or a later one. */
  put(connection: string, index: number, image: Image): void {
    const copies = this.#copies.get(connection) ?? [];
    const held = copies[index];
    if (!held || isBefore(held, image)) copies[index] = image;
    this.#copies.set(connection, copies);
  }

  copy(connection: string, index: number): Image | undefined {
    return this.#copies.get(connection)?.[index];
  }

  /** DynamoDB's TTL, on the copies: each goes once its image's `ttl` has passed. */
  sweep(nowSeconds: number): void {
    for (const copies of this.#copies.values()) {
      copies.forEach((image, index) => {
        if (image?.ttl !== undefined && image.ttl < nowSeconds) copies[index] = undefined;
      });
    }
  }
}
