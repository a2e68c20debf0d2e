/**
 * Connections too large for a Lambda environment variable (4 KB for all of them together) come
 * from an SSM parameter instead: `BROKER_CONNECTIONS_PARAMETER` names it (String or
 * SecureString), and it is read once, at cold start, through Powertools Parameters, then given
 * to the one configuration loader as `BROKER_CONNECTIONS`. The entry point imports this module
 * only when that variable is set, and the build makes it a file of its own, so that the SSM
 * client stays out of every other cold start.
 */
import { SSMProvider } from '@aws-lambda-powertools/parameters/ssm';
import { SSMClient } from '@aws-sdk/client-ssm';
import { ConfigError, printable } from '../errors.js';

type Env = Readonly<Record<string, string | undefined>>;

export const CONNECTIONS_PARAMETER = 'BROKER_CONNECTIONS_PARAMETER';

/** `env`, with BROKER_CONNECTIONS read from the parameter BROKER_CONNECTIONS_PARAMETER names. */
export const withConnectionsParameter = async (
  env: Env,
  { client, timeoutMs = 5_000 }: { readonly client?: SSMClient; readonly timeoutMs?: number } = {},
): Promise<Env> => {
  const name = env[CONNECTIONS_PARAMETER]?.trim();
  if (!name) return env;
  if (env.BROKER_CONNECTIONS?.trim()) {
    throw new ConfigError(
      `Set BROKER_CONNECTIONS or ${CONNECTIONS_PARAMETER}, not both: which one holds the connections?`,
    );
  }
  const provider = new SSMProvider({
    awsSdkV3Client:
      client ??
      new SSMClient({
        maxAttempts: 2,
        requestHandler: {
          connectionTimeout: timeoutMs,
          requestTimeout: timeoutMs,
          throwOnRequestTimeout: true,
        },
      }),
  });
  let value: string | undefined;
  try {
    value = await provider.get(name, { decrypt: true });
  } catch (error) {
    // The SDK's error name (ParameterNotFound, AccessDeniedException, …), not its message.
    const reason =
      (error as { cause?: { name?: string }; name?: string })?.cause?.name ??
      (error as Error)?.name;
    throw new ConfigError(
      `${CONNECTIONS_PARAMETER}: parameter '${printable(name, 200)}' could not be read (${reason})`,
    );
  }
  if (!value?.trim()) {
    throw new ConfigError(`${CONNECTIONS_PARAMETER}: parameter '${printable(name, 200)}' is empty`);
  }
  return { ...env, BROKER_CONNECTIONS: value };
};
