/**
 * {@link SecretSource} on AWS Secrets Manager, through Powertools' SecretsProvider (which caches
 * each value for `maxAgeSeconds`). The SecretString must be JSON `{ clientId, clientSecret }`.
 */
import { SecretsProvider } from '@aws-lambda-powertools/parameters/secrets';
import {
  SecretsManagerClient,
  type SecretsManagerClientConfig,
} from '@aws-sdk/client-secrets-manager';
import { type Clock, systemClock } from '../clock.js';
import { printable, SecretUnavailableError } from '../errors.js';
import type { ClientCredentials, SecretSource } from '../ports.js';

export interface StaleSecretOptions {
  /** While Secrets Manager fails, the last secret read is used for at most this long. */
  readonly staleMaxSeconds: number;
  readonly onStale?: (secretId: string, reason: string) => void;
  /**
   * How the last good value's age is measured: on the monotonic clock, so that a wall clock
   * stepped back cannot stretch the stale window (nor one stepped forward cut it). Defaults to
   * the system clock.
   */
  readonly clock?: Pick<Clock, 'monotonic'>;
}

export class SecretsManagerSecretSource implements SecretSource {
  // The last good value of each secret, for when Secrets Manager is throttled or down, with
  // when it was read (monotonic ms).
  readonly #lastGood = new Map<string, { credentials: ClientCredentials; readAt: number }>();
  readonly #clock: Pick<Clock, 'monotonic'>;

  constructor(
    private readonly provider: Pick<SecretsProvider, 'get'>,
    private readonly maxAgeSeconds: number,
    private readonly stale: StaleSecretOptions = { staleMaxSeconds: 0 },
  ) {
    this.#clock = stale.clock ?? systemClock;
  }

  async getCredentials(
    secretId: string,
    options: { forceFetch?: boolean } = {},
  ): Promise<ClientCredentials> {
    let raw: unknown;
    try {
      // No `transform: 'json'`: its error message quotes the secret text. Parsed below instead.
      // The SDK client retries throttling and 5xx itself (standard retry mode).
      raw = await this.provider.get(secretId, {
        maxAge: this.maxAgeSeconds,
        ...(options.forceFetch ? { forceFetch: true } : {}),
      });
    } catch (error) {
      const cause = (error as { cause?: { name?: string } }).cause;
      const reason = printable(cause?.name ?? (error as Error).name ?? 'unknown', 60);
      const missing = reason === 'ResourceNotFoundException';
      const last = this.#lastGood.get(secretId);
      // A deleted secret is never papered over; an unreachable service is, for a bounded time.
      if (
        !missing &&
        last &&
        this.#clock.monotonic() - last.readAt <= this.stale.staleMaxSeconds * 1000
      ) {
        this.stale.onStale?.(secretId, reason);
        return last.credentials;
      }
      throw new SecretUnavailableError(
        missing
          ? `Secret '${printable(secretId, 200)}' does not exist`
          : `Secret '${printable(secretId, 200)}' could not be read (${reason})`,
        { cause: error, details: { secretId, reason } },
      );
    }
    const credentials = parseCredentials(raw, secretId);
    this.#lastGood.set(secretId, { credentials, readAt: this.#clock.monotonic() });
    return credentials;
  }
}

/** Validates a SecretString; errors name the secret and the fields, never a value. */
export const parseCredentials = (raw: unknown, secretId: string): ClientCredentials => {
  const id = printable(secretId, 200);
  if (typeof raw !== 'string') {
    throw new SecretUnavailableError(`Secret '${id}' has no SecretString`, {
      details: { secretId },
    });
  }
  let value: unknown;
  try {
    value = JSON.parse(raw);
  } catch {
    throw new SecretUnavailableError(
      `Secret '${id}' is not JSON; expected {"clientId": "…", "clientSecret": "…"}`,
      { details: { secretId } },
    );
  }
  const record = (typeof value === 'object' && value !== null ? value : {}) as Record<
    string,
    unknown
  >;
  const bad = ['clientId', 'clientSecret'].filter(
    (field) => typeof record[field] !== 'string' || (record[field] as string).length === 0,
  );
  if (bad.length > 0) {
    throw new SecretUnavailableError(
      `Secret '${id}' lacks a non-empty string ${bad.map((f) => `"${f}"`).join(' and ')}`,
      { details: { secretId } },
    );
  }
  return { clientId: record.clientId as string, clientSecret: record.clientSecret as string };
};

/**
 * The source on a Secrets Manager client of its own (or `client`, in tests). `lib/adapters/aws.ts`
 * imports this module on the first issuance, so the client and Powertools' provider are loaded
 * then, in the bundle a chunk of their own.
 */
export const secretsManagerSecretSource = (
  clientConfig: SecretsManagerClientConfig,
  client: SecretsManagerClient | undefined,
  maxAgeSeconds: number,
  stale: StaleSecretOptions,
): SecretsManagerSecretSource =>
  new SecretsManagerSecretSource(
    new SecretsProvider({ awsSdkV3Client: client ?? new SecretsManagerClient(clientConfig) }),
    maxAgeSeconds,
    stale,
  );
