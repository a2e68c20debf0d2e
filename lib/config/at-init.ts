/** The cold start's loader of the broker's configuration (issue 25). */
import type { BrokerConfig } from '../config.js';
import { buildConfig } from './build.js';
import { parseConnectionsWith, plainFields, UnsureOfFields } from './connections.js';
import type { Env } from './variables.js';

/**
 * `loadConfig`'s answer, without the schema library for a valid configuration (issue 25): the
 * connections' fields are checked in plain code (`plainFields`), and only where that is unsure
 * (an invalid field, most often) does the whole configuration go through `loadConfig` again,
 * whose schema's message then names the field, as it always did.
 *
 * @throws {ConfigError} as `loadConfig` does, with the same message.
 */
export const loadConfigAtInit = async (env: Env): Promise<BrokerConfig> => {
  try {
    return buildConfig(env, (raw) => parseConnectionsWith(raw, plainFields));
  } catch (error) {
    if (!(error instanceof UnsureOfFields)) throw error;
    return (await import('../config.js')).loadConfig(env);
  }
};
