/**
 * The cold-start reference: a bare Lambda bundle that does nothing but one DynamoDB GetItem
 * and returns JSON. The broker's cold start to its first token served from DynamoDB is
 * compared with this.
 */
import { DynamoDBClient, GetItemCommand } from '@aws-sdk/client-dynamodb';

const client = new DynamoDBClient({});
const tableName = process.env.BROKER_TABLE_NAME;

export const handler = async (event: { connection: string }) => {
  const { Item } = await client.send(
    new GetItemCommand({
      TableName: tableName,
      Key: { pk: { S: `token#${event.connection}` } },
      ConsistentRead: true,
    }),
  );
  return {
    connection: event.connection,
    accessToken: Item?.accessToken?.S,
    expiresAt: Item?.expiresAt?.N,
  };
};
