/** In-memory implementations of the ports, for unit tests of the core. */
import type { BrokerLogger } from '../../lib/broker.js';
import type { ConnectionConfig } from '../../lib/config.js';
import type {
  ClientCredentials,
  IssuedToken,
  SecretSource,
  TokenIssuer,
  TokenRecord,
  TokenStore,
} from '../../lib/ports.js';

export class InMemoryTokenStore implements TokenStore {
  readonly items = new Map<string, TokenRecord>();
  calls = { get: 0, put: 0, delete: 0 };
  failing = false;

  async get(connection: string) {
    this.calls.get += 1;
    if (this.failing) throw new Error('store down');
    return this.items.get(connection);
  }
  async put(record: TokenRecord) {
    this.calls.put += 1;
    if (this.failing) throw new Error('store down');
    const current = this.items.get(record.connection);
    if (current && current.expiresAt >= record.expiresAt) return current;
    this.items.set(record.connection, record);
    return record;
  }
  async deleteIfMatches(connection: string, tokenDigest: string) {
    this.calls.delete += 1;
    if (this.failing) throw new Error('store down');
    if (this.items.get(connection)?.tokenDigest !== tokenDigest) return false;
    this.items.delete(connection);
    return true;
  }
}

export class FakeSecretSource implements SecretSource {
  calls = 0;
  constructor(
    readonly credentials: ClientCredentials = { clientId: 'client-1', clientSecret: 'secret-1' },
  ) {}
  async getCredentials(_secretId: string) {
    this.calls += 1;
    return this.credentials;
  }
}

/** Issues `token-1`, `token-2`, … with the given lifetime; can be made slow or failing. */
export class FakeIssuer implements TokenIssuer {
  issued = 0;
  expiresIn = 3600;
  delayMs = 0;
  failWith: Error | undefined;
  constructor(private readonly now: () => number = () => Date.now()) {}

  async issue(
    _connection: ConnectionConfig,
    _credentials: ClientCredentials,
  ): Promise<IssuedToken> {
    const requestedAt = this.now();
    if (this.delayMs > 0) await new Promise((resolve) => setTimeout(resolve, this.delayMs));
    if (this.failWith) throw this.failWith;
    this.issued += 1;
    return {
      accessToken: `token-${this.issued}`,
      expiresIn: this.expiresIn,
      upstreamTimestamp: Math.floor(requestedAt / 1000),
      requestedAt,
    };
  }
}

export interface CapturedLog {
  readonly level: string;
  readonly message: string;
  readonly attributes: Record<string, unknown>[];
}

export const captureLogger = (): BrokerLogger & { lines: CapturedLog[] } => {
  const lines: CapturedLog[] = [];
  const at =
    (level: string) =>
    (message: string, ...attributes: Record<string, unknown>[]) =>
      lines.push({ level, message, attributes });
  return { lines, debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
};

export const connection = (overrides: Partial<ConnectionConfig> = {}): ConnectionConfig => ({
  name: 'sandbox',
  variant: 'v3',
  baseUrl: 'https://open-api.example.com',
  secretId: 'open-api/sandbox',
  callers: undefined,
  codeField: 'code',
  ...overrides,
});
