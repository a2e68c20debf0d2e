// Loads a Lambda bundle the way the nodejs24.x runtime does (a dynamic import of the .mjs file
// from an ES module) and runs a list of events through its handler, one after another.
// Usage: node lambda-runner.mjs <bundle.mjs> <events.json> <results.json>
import { randomUUID } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

const [bundle, eventsFile, resultsFile] = process.argv.slice(2);
const { handler } = await import(pathToFileURL(bundle).href);
const events = JSON.parse(readFileSync(eventsFile, 'utf8'));
const results = [];
for (const event of events) {
  const deadline = Date.now() + 10_000;
  const context = {
    functionName: 'token-broker',
    functionVersion: '$LATEST',
    invokedFunctionArn: 'arn:aws:lambda:us-east-1:000000000000:function:token-broker',
    memoryLimitInMB: '256',
    awsRequestId: randomUUID(),
    logGroupName: '/aws/lambda/token-broker',
    logStreamName: 'runner',
    getRemainingTimeInMillis: () => deadline - Date.now(),
  };
  try {
    results.push({ ok: true, result: await handler(event, context) });
  } catch (error) {
    results.push({ ok: false, errorType: error.name, errorMessage: error.message });
  }
}
writeFileSync(resultsFile, JSON.stringify(results));
