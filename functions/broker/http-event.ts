/**
 * Which events are HTTP requests (payload format 2.0). Apart from `http.ts`, which serves them:
 * the handler tells the kinds of event apart at every invocation, and loads the HTTP side (its
 * router and middlewares) only on the first HTTP request (issue 25).
 */
import type { APIGatewayProxyEventV2WithIAMAuthorizer } from 'aws-lambda';

export type HttpEvent = APIGatewayProxyEventV2WithIAMAuthorizer;

export const isHttpEvent = (event: unknown): event is HttpEvent => {
  const candidate = event as Partial<HttpEvent> | null;
  return (
    typeof candidate === 'object' &&
    candidate !== null &&
    candidate.version === '2.0' &&
    typeof candidate.requestContext?.http?.method === 'string' &&
    // Without a path there is no route to match: an unrecognised event (400), not a crash.
    typeof candidate.requestContext.http.path === 'string'
  );
};
