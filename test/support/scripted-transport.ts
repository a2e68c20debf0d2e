/**
 * A client transport whose every request waits until the test answers (or fails) it: the
 * client tests script the broker's side request by request, under fake timers.
 */
import type { Operation, Transport } from '../../client/src/index.js';

export interface Sent {
  readonly operation: Operation;
  readonly signal: AbortSignal;
  readonly answer: (body: unknown) => void;
  readonly fail: (error: unknown) => void;
}

export const scripted = () => {
  const sent: Sent[] = [];
  const transport: Transport = {
    send: (operation, { signal }) =>
      new Promise((resolve, reject) => {
        sent.push({ operation, signal, answer: resolve, fail: reject });
      }),
  };
  return { sent, transport };
};
