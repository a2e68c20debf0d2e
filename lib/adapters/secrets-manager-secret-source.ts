/**
 * {@link SecretSource} on AWS Secrets Manager, through Powertools' SecretsProvider (which caches
 * each value for `maxAgeSeconds`). The SecretString must be JSON `{ clientId, clientSecret }`.
 */
import type { SecretsProvider } from '@aws-lambda-powertools/parameters/secrets';
import { printable, SecretUnavailableError } from '../errors.js';
import type { ClientCredentials, SecretSource } from '../ports.js';

export class SecretsManagerSecretSource implements SecretSource {
  constructor(
    private readonly provider: Pick<SecretsProvider, 'get'>,
    private readonly maxAgeSeconds: number,
  ) {}

  async getCredentials(secretId: string): Promise<ClientCredentials> {
    let raw: unknown;
    try {
      // No `transform: 'json'`: its error message quotes the secret text. Parsed below instead.
      raw = await this.provider.get(secretId, { maxAge: this.maxAgeSeconds });
    } catch (error) {
      const cause = (error as { cause?: { name?: string } }).cause;
      const reason = printable(cause?.name ?? (error as Error).name ?? 'unknown', 60);
      const missing = reason === 'ResourceNotFoundException';
      throw new SecretUnavailableError(
        missing
          ? `Secret '${printable(secretId, 200)}' does not exist`
          : `Secret '${printable(secretId, 200)}' could not be read (${reason})`,
        { cause: error, details: { secretId, reason } },
      );
    }
    return parseCredentials(raw, secretId);
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
