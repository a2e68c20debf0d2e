/**
 * Calls to the token store as the observer's driver makes them: failures as callers are told
 * them (a typed error with a stable code, whatever the SDK threw: its message stays in the
 * cause, for the logs), and a read that falls back to memory while the store is down (I2's rule:
 * only inside what the last read proved).
 */

import type { Clock } from '../../clock.js';
import { StoreUnavailableError } from '../../errors.js';
import type { TokenState, TokenStore } from '../../ports.js';
import type { BrokerLogger, ServedToken } from '../types.js';
import type { ConnectionView } from '../view/index.js';
import type { Need } from './observer.js';

const MESSAGES = {
  read: 'The token store could not be read; retry shortly',
  'answer in time': 'The token store did not answer in time; retry shortly',
  'take the lease': 'The token store failed to take the lease; retry shortly',
} as const;

export const storeFailure = (what: keyof typeof MESSAGES, cause?: unknown): StoreUnavailableError =>
  new StoreUnavailableError(MESSAGES[what], cause === undefined ? {} : { cause });

/**
 * Reads the store within `waitMs`; when it is down, falls back to a token in memory that meets
 * `need` (none when `need` is undefined: the warm-up never falls back).
 */
export const readStore = async (
  deps: {
    readonly store: TokenStore;
    readonly view: ConnectionView;
    readonly clock: Clock;
    readonly logger: BrokerLogger;
    readonly bounded: <T>(operation: Promise<T>, waitMs: number) => Promise<T>;
  },
  name: string,
  need: Need | undefined,
  waitMs: number,
): Promise<TokenState | ServedToken> => {
  try {
    return await deps.bounded(deps.store.read(name), waitMs);
  } catch (error) {
    const needMs = need === 'outside-window' ? Number.POSITIVE_INFINITY : need;
    const held =
      needMs === undefined ? undefined : deps.view.whileStoreDown(name, deps.clock.now(), needMs);
    if (!held) throw storeFailure('read', error);
    deps.logger.warn('Token store unreadable; serving the token held in memory', {
      connection: name,
    });
    return { record: held, source: 'memory' };
  }
};
