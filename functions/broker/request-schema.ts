/**
 * A caller's request as a zod schema: the judge of every request the plain check
 * (`requests.ts`, `plainRequest`) does not recognise, with the issue a refusal names. Loaded on
 * the first such request only (issue 25).
 */
import * as z from 'zod/mini';
import '../../lib/schema.js';
import { type BrokerRequest, REQUEST_LIMITS } from './requests.js';

const connection = z.string().check(z.minLength(1), z.maxLength(REQUEST_LIMITS.connectionLength));

const requestSchema = z.discriminatedUnion('action', [
  z.strictObject({
    action: z.literal('getToken'),
    connection,
    minValidity: z.optional(
      z.number().check(z.int(), z.minimum(0), z.maximum(REQUEST_LIMITS.maxMinValidity)),
    ),
  }),
  z.strictObject({
    action: z.literal('invalidate'),
    connection,
    accessToken: z.string().check(z.minLength(1), z.maxLength(REQUEST_LIMITS.accessTokenLength)),
  }),
  // Operator actions (the CLI): metadata only, and the warm-up on demand.
  z.strictObject({ action: z.literal('status') }),
  z.strictObject({ action: z.literal('warmUp') }),
  z.strictObject({ action: z.literal('ready') }),
]);

// The schema's shapes and the request type are the same (checked by the compiler both ways).
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
const sameShapes: Same<z.infer<typeof requestSchema>, BrokerRequest> = true;
void sameShapes;

/** The schema's verdict on `candidate`: the request, or its first issue. */
export const judgeRequest = (
  candidate: unknown,
): { readonly data: BrokerRequest } | { readonly issue: z.core.$ZodIssue | undefined } => {
  const result = requestSchema.safeParse(candidate);
  return result.success ? { data: result.data } : { issue: result.error.issues[0] };
};
