/** What a rejected promise held, typed loosely enough to assert on our error fields. */
export type Caught = Error & {
  readonly code?: string;
  readonly retryAfterSeconds?: number;
  readonly upstreamCode?: string;
  readonly upstreamMessage?: string;
};

/** `promise.then(unexpected, caught)` resolves to the rejection, and fails if it fulfils. */
export const unexpected = (): never => {
  throw new Error('expected the promise to reject');
};
export const caught = (error: unknown): Caught => error as Caught;
