/**
 * DynamoDB's TTL for local endpoints (dynalite and DynamoDB Local run none): deletes every item
 * whose `ttl` is before `nowSeconds`, as TTL may at any time after it. Each delete is
 * conditioned on the `ttl` it saw still being past, as TTL's own deletes are: a write that
 * removed or moved the `ttl` since the scan wins.
 */
import { DeleteItemCommand, type DynamoDBClient, ScanCommand } from '@aws-sdk/client-dynamodb';

export const sweepExpired = async (
  client: DynamoDBClient,
  tableName: string,
  nowSeconds: number,
): Promise<void> => {
  const past = {
    ExpressionAttributeNames: { '#ttl': 'ttl' },
    ExpressionAttributeValues: { ':now': { N: String(nowSeconds) } },
  };
  const { Items = [] } = await client.send(
    new ScanCommand({ TableName: tableName, FilterExpression: '#ttl < :now', ...past }),
  );
  for (const item of Items) {
    await client
      .send(
        new DeleteItemCommand({
          TableName: tableName,
          Key: { pk: item.pk as { S: string } },
          ConditionExpression: '#ttl < :now',
          ...past,
        }),
      )
      .catch((error: unknown) => {
        if ((error as Error).name !== 'ConditionalCheckFailedException') throw error;
      });
  }
};
