/**
 * {@link TokenStore} on DynamoDB. The only file that knows the item layout:
 *
 * | attribute   | type | meaning                                                   |
 * |-------------|------|-----------------------------------------------------------|
 * | pk          | S    | `token#<connection>`                                      |
 * | connection  | S    | connection name                                           |
 * | accessToken | S    | the access token (the client secret is never stored)      |
 * | tokenDigest | S    | SHA-256 of the access token, base64url                    |
 * | issuedAt    | N    | epoch ms at which the token request was sent              |
 * | expiresAt   | N    | epoch ms after which the token must not be served         |
 * | ttl         | N    | epoch seconds = issuance + expiresIn (DynamoDB TTL)       |
 */
import {
  type AttributeValue,
  ConditionalCheckFailedException,
  DeleteItemCommand,
  type DynamoDBClient,
  GetItemCommand,
  PutItemCommand,
} from '@aws-sdk/client-dynamodb';
import type { TokenRecord, TokenStore } from '../ports.js';

type Item = Record<string, AttributeValue>;

export const tokenKey = (connection: string): Item => ({ pk: { S: `token#${connection}` } });

const toItem = (record: TokenRecord): Item => ({
  ...tokenKey(record.connection),
  connection: { S: record.connection },
  accessToken: { S: record.accessToken },
  tokenDigest: { S: record.tokenDigest },
  issuedAt: { N: String(record.issuedAt) },
  expiresAt: { N: String(record.expiresAt) },
  // expiresAt = issuedAt + expiresIn·1000, so this is issuance (s) + expiresIn exactly.
  ttl: { N: String(Math.floor(record.expiresAt / 1000)) },
});

/** Reads an item; anything malformed counts as absent so that the next issuance replaces it. */
const fromItem = (item: Item | undefined): TokenRecord | undefined => {
  const connection = item?.connection?.S;
  const accessToken = item?.accessToken?.S;
  const tokenDigest = item?.tokenDigest?.S;
  const issuedAt = Number(item?.issuedAt?.N);
  const expiresAt = Number(item?.expiresAt?.N);
  if (!connection || !accessToken || !tokenDigest) return undefined;
  if (!Number.isFinite(issuedAt) || !Number.isFinite(expiresAt)) return undefined;
  return { connection, accessToken, tokenDigest, issuedAt, expiresAt };
};

export class DynamoDBTokenStore implements TokenStore {
  constructor(
    private readonly client: DynamoDBClient,
    private readonly tableName: string,
  ) {}

  async get(connection: string): Promise<TokenRecord | undefined> {
    const { Item } = await this.client.send(
      // Strongly consistent: right after an invalidate or a new issuance elsewhere, an eventually
      // consistent read could hand back the token that was just dropped.
      new GetItemCommand({
        TableName: this.tableName,
        Key: tokenKey(connection),
        ConsistentRead: true,
      }),
    );
    return fromItem(Item);
  }

  async put(record: TokenRecord): Promise<TokenRecord> {
    try {
      await this.client.send(
        new PutItemCommand({
          TableName: this.tableName,
          Item: toItem(record),
          // Never replace a longer-lived token with a shorter-lived one. Timeline:
          //   t0  container A sends its token request
          //   t1  container B sends its token request, gets token B (expires t1+L), writes it
          //   t2  A gets token A (expires t0+L < t1+L) and tries to write: condition fails,
          //       A serves B's token instead, so both containers hand out the same token.
          ConditionExpression:
            'attribute_not_exists(pk) OR attribute_not_exists(expiresAt) OR expiresAt < :expiresAt',
          ExpressionAttributeValues: { ':expiresAt': { N: String(record.expiresAt) } },
          ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
        }),
      );
      return record;
    } catch (error) {
      if (!(error instanceof ConditionalCheckFailedException)) throw error;
      // DynamoDB returns the kept item; emulators may not, so read it then.
      return fromItem(error.Item) ?? (await this.get(record.connection)) ?? record;
    }
  }

  async deleteIfMatches(connection: string, tokenDigest: string): Promise<boolean> {
    try {
      await this.client.send(
        new DeleteItemCommand({
          TableName: this.tableName,
          Key: tokenKey(connection),
          // Compare-and-delete: a late report about an older token must not drop a newer one.
          ConditionExpression: 'tokenDigest = :digest',
          ExpressionAttributeValues: { ':digest': { S: tokenDigest } },
        }),
      );
      return true;
    } catch (error) {
      if (error instanceof ConditionalCheckFailedException) return false;
      throw error;
    }
  }
}
