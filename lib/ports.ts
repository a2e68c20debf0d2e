/**
 * Ports: the broker core talks to the outside world only through these interfaces. Adapters in
 * `lib/adapters/` implement them for AWS; tests implement them in memory.
 */
import type { Deadline } from './clock.js';
import type { ConnectionConfig } from './config/connections.js';

/** `clientId` / `clientSecret` of one connection, as stored in Secrets Manager. */
export interface ClientCredentials {
  readonly clientId: string;
  readonly clientSecret: string;
}

/** A cached access token. The refresh token is deliberately not part of it (see README). */
export interface TokenRecord {
  readonly connection: string;
  readonly accessToken: string;
  /** SHA-256 of the access token (base64url): compared on invalidate, safe to log. */
  readonly tokenDigest: string;
  /** Local epoch ms at which the token request was sent: expiry counts from here. */
  readonly issuedAt: number;
  /** Epoch ms after which the token must not be served (memory rebases it: view/connection-state.ts). */
  readonly expiresAt: number;
  /**
   * Issued at a caller's word (a `minValidity` the token it replaced could not give, or an
   * invalidate report), not by the schedule or the token's age: no caller's word replaces it
   * before it is a refresh window old (see `caller-bounds.ts`). Absent means false.
   */
  readonly forced?: boolean;
  /**
   * The memory re-check (ms) of the container that wrote the token: readers apply it when it is
   * shorter than theirs, holders count down at least that long (see `broker/timing/bounds.ts`), so
   * mixed settings in one deployment are safe. Absent on tokens of older releases.
   */
  readonly recheckMs?: number;
}

/**
 * Which write of a lease is meant: its holder (one per attempt) and the version that write set.
 * Every write of a lease sets a fresh random `version` (the DynamoDB Lock Client's record version
 * number), so "exactly this write" needs no clock and no "+1 ms" to tell two writes apart.
 */
export interface LeaseRef {
  /** Unique per attempt: `<container id>:<sequence>`. */
  readonly holder: string;
  /** A fresh random id per write of the lease. */
  readonly version: string;
  /**
   * A version this holder sent whose answer never came (a timeout, a lost answer): the write
   * may have landed. Only a release names it too (the holder's own writes, and no other's);
   * every other write names exactly `version`.
   */
  readonly unanswered?: string | undefined;
}

/**
 * A claim, held by one container at a time, to run the upstream flow for a connection. Others
 * judge it with their own clock, never the holder's: a lease is stale once the same version has
 * been seen, unchanged, for `durationMs` (the DynamoDB Lock Client's rule). Takeover, renewal,
 * release and the token write are each conditioned on exactly the version seen.
 */
export interface Lease extends LeaseRef {
  /** Epoch ms, on the holder's clock, until which the holder counts on it (status only). */
  readonly expiresAt: number;
  /** How long this version lasts, on anyone's clock, from when it was written. */
  readonly durationMs: number;
  /**
   * The announced cut-over: how many more lease writes the holder makes before its
   * access-token request, each sent at least COUNTDOWN_STEP_MS after the previous one was
   * answered (the last one, 0, is the confirmation just before the request). A container whose
   * read, sent at `s`, saw `countdown` = r knows that no token request of this lease (or of one
   * taking it over) leaves before `s + (r - 1) * COUNTDOWN_STEP_MS`, on its own clock: it keeps
   * serving the token being replaced until then, and needs no faster re-check to know it.
   */
  readonly countdown: number;
  /**
   * How long the holder's countdown steps take, as it measured them (ms): a step's wait plus its
   * last lease write's round trip, which on a global table is another region's. Readers aim
   * their one read at a cut-over with it (liveness only: what a countdown proves rests on
   * `countdown` alone). Absent when the holder announced none (an older release, a first write).
   */
  readonly stepMs?: number | undefined;
  /**
   * The lease runs a replacement on a caller's word: a token issued by whoever takes it over
   * (after this holder stopped, or its request's outcome was unknown) is `forced` as well.
   */
  readonly forced?: boolean;
}

/** What one write of a lease sets: a new version, its times and its countdown. */
export interface LeaseTerms {
  readonly version: string;
  readonly leaseExpiresAt: number;
  readonly durationMs: number;
  /** The countdown this write announces (see {@link Lease.countdown}). */
  readonly countdown: number;
  /** The holder's measured step (see {@link Lease.stepMs}). */
  readonly stepMs?: number | undefined;
}

/**
 * A token as its replacement knows it: the whole record, or all of it but the value when this
 * container cannot read it (`TokenState.unreadable`). Dropping or replacing one needs only its
 * digest.
 */
export type ReplacedToken = Omit<TokenRecord, 'accessToken'>;

/** What the shared store holds for one connection. */
export interface TokenState {
  readonly token: TokenRecord | undefined;
  readonly lease: Lease | undefined;
  /**
   * When a caller's invalidate report last dropped the token (epoch ms, the reporter's clock),
   * until the next token is written: only tells why a token is missing (an issuance's cause).
   */
  readonly invalidatedAt?: number | undefined;
  /**
   * A caller reported the stored token as rejected while it was too young to be replaced on a
   * caller's word: the report is kept here, and the token is replaced once it is old enough.
   */
  readonly reported?: boolean;
  /**
   * A token the item holds but that this container could not read (sealed under a key it does
   * not have, or tampered with), without its value: other containers may read and serve it, so
   * its replacement is announced like any other (a countdown), and a lease may replace it by
   * its digest.
   */
  readonly unreadable?: ReplacedToken | undefined;
}

/** Who asks for the lease, with its first version, which stale lease it replaces and which token. */
export interface LeaseRequest extends LeaseTerms {
  readonly holder: string;
  /**
   * The lease to take over: exactly this version, seen stale by the caller, and only while it
   * is still there (not once it has gone). Without it the lease is granted only when there is
   * none.
   */
  readonly takeOver?: Lease | undefined;
  /**
   * The digest of the token the caller read (expired or not, readable or not), or undefined if
   * it read none: the lease is granted only while the item holds exactly that token, so that a
   * token written by another container since the read (and maybe served already, with no
   * countdown announcing its replacement) is never replaced.
   */
  readonly replacesDigest: string | undefined;
  /** The replacement is on a caller's word (see {@link Lease.forced}). */
  readonly forced?: boolean;
}

export type LeaseAttempt =
  | { readonly acquired: true }
  | { readonly acquired: false; readonly state: TokenState };

/**
 * Where tokens are shared between containers (DynamoDB in production). Every write is
 * conditional; the conditions are what makes one issuance per lifetime hold across a fleet.
 */
/**
 * A store call's bound, when its caller has one (the caller's deadline, monotonic). A store on a
 * multi-Region strongly consistent table retries a replicated write conflict (not applied) until
 * then, rather than for a budget of its own: a conflict is never a 503 while the caller's time
 * remains (issue 26). Stores with nothing to retry ignore it.
 */
export interface StoreCall {
  readonly deadline?: Deadline | undefined;
}

export interface TokenStore {
  /** The stored token (expired or not: the caller checks expiry) and the lease, if any. */
  read(connection: string): Promise<TokenState>;
  /**
   * Takes the lease for `request.holder` only if there is no lease (without `request.takeOver`),
   * or the lease is exactly `request.takeOver` (the version the caller saw go stale), AND the
   * item holds exactly the token the caller read (`request.replacesDigest`). On failure, returns the
   * state that won.
   */
  acquireLease(connection: string, request: LeaseRequest, call?: StoreCall): Promise<LeaseAttempt>;
  /**
   * Writes `record` and releases the lease in one step, only if the lease is still exactly
   * `lease` (a fencing check: a holder that lost its lease never writes). Returns whether it
   * wrote.
   */
  putToken(record: TokenRecord, lease: LeaseRef, call?: StoreCall): Promise<boolean>;
  /**
   * Writes a new version of the lease (`next`) only if the lease is still exactly `lease`, or
   * already `next` (a retry of this write that landed: applying it again changes nothing). An
   * attempt applied late, after a later write, finds another version and changes nothing. A
   * heartbeat, a step of the countdown, or the confirmation before a token request.
   */
  renewLease(
    connection: string,
    lease: LeaseRef,
    next: LeaseTerms,
    call?: StoreCall,
  ): Promise<boolean>;
  /**
   * Gives the lease up if it is still exactly `lease`, or the holder's write whose answer never
   * came (`lease.unanswered`), after a failed flow. Returns whether it did: false means another
   * holder took it over meanwhile.
   */
  releaseLease(connection: string, lease: LeaseRef, call?: StoreCall): Promise<boolean>;
  /**
   * Removes the token only if its digest is `tokenDigest` (compare-and-delete); a lease in
   * progress is left alone. Compares no clock: whether the token is old enough to go is the
   * caller's call, on its own clock. Returns whether it removed the token.
   */
  deleteIfMatches(
    connection: string,
    tokenDigest: string,
    options?: {
      /** Recorded as `invalidatedAt` when the token is removed (epoch ms). */
      readonly reportedAt?: number | undefined;
    } & StoreCall,
  ): Promise<boolean>;
  /**
   * Keeps a report about the stored token, only if its digest is `tokenDigest`, until the token
   * is replaced (`TokenState.reported`). Returns whether the token was the stored one.
   */
  markReported(connection: string, tokenDigest: string, call?: StoreCall): Promise<boolean>;
}

/** Where connection credentials come from (Secrets Manager in production). */
export interface SecretSource {
  /**
   * @param options.forceFetch read the store now, bypassing every cache (after the upstream
   *   rejected the credentials: they may have been rotated).
   * @throws {SecretUnavailableError} when the secret is missing, unreadable or malformed.
   */
  getCredentials(
    secretId: string,
    options?: { readonly forceFetch?: boolean },
  ): Promise<ClientCredentials>;
}

/** What the upstream returned for a successful flow. */
export interface IssuedToken {
  readonly accessToken: string;
  /** Seconds, as given by the upstream (validated positive integer). */
  readonly expiresIn: number;
  /** Upstream Unix seconds of issuance, when given: used only to detect clock skew. */
  readonly upstreamTimestamp: number | undefined;
  /** Local epoch ms (wall clock) at which the token request was sent: the record's `issuedAt`. */
  readonly requestedAt: number;
}

declare const authorizationCodeBrand: unique symbol;

/**
 * The authorization code one run of the flow holds between its two steps: opaque outside the
 * issuer that made it (the core only carries it from {@link TokenIssuer.authorize} to
 * {@link TokenIssuer.requestToken}). It is single-use and short-lived, yet a credential while it
 * lives: it never reaches a log or an error message (the upstream client's codes print, log and
 * serialise as `[authorization code]`).
 */
export interface AuthorizationCode {
  readonly [authorizationCodeBrand]: never;
}

/** How one step of the flow is bounded. */
export interface StepOptions {
  /** The caller's deadline, on the monotonic clock: bounds every attempt and backoff (I3). */
  readonly deadline: Deadline;
  /** Aborts every request in flight (the lease was lost or ran out); no attempt starts after. */
  readonly signal?: AbortSignal | undefined;
  /**
   * No attempt is sent after this (the access-token request: what the holder's lease covers,
   * A1), checked just before each is sent; an attempt already sent runs to `deadline`.
   */
  readonly sendBy?: Deadline | undefined;
}

/**
 * Runs the two-step token flow against the Open API, one call per step, so that the caller
 * fences in between (see `lib/broker/issuance/issue-flow.ts`): nothing that may revoke a token leaves
 * before {@link TokenIssuer.requestToken} is called.
 */
export interface TokenIssuer {
  /**
   * Asks for an authorization code (the GET). Harmless: it issues and revokes nothing, so it
   * may be retried and may run while the lease counts down.
   */
  authorize(
    connection: ConnectionConfig,
    credentials: ClientCredentials,
    options: StepOptions,
  ): Promise<AuthorizationCode>;
  /**
   * Exchanges `code` for a token (the POST, which may revoke every token issued before). Each
   * attempt is built, and signed, afresh; only an attempt proved unsent is retried, so
   * `requestedAt` is when the attempt that answered was sent.
   *
   * @throws {UpstreamUnavailableError} with `outcomeUnknown` when an access-token request may
   *   have reached the upstream without its answer reaching us (a timeout, a reset after
   *   sending): the upstream may still issue, and so revoke the tokens issued before.
   * @throws {UpstreamBadResponseError} with `outcomeUnknown` when an answer came but cannot be
   *   read: the upstream processed the request, and may have issued.
   */
  requestToken(
    connection: ConnectionConfig,
    credentials: ClientCredentials,
    code: AuthorizationCode,
    options: StepOptions,
  ): Promise<IssuedToken>;
}

/** What the probe said of a token; `reason` (a status or a network code) never holds the token. */
export type ProbeVerdict =
  | { readonly verdict: 'valid' | 'revoked' }
  | { readonly verdict: 'unknown'; readonly reason: string };

/** Asks the Open API with a connection's `probe` (one GET; never throws): 2xx valid, 401 revoked. */
export interface TokenProbe {
  probe(c: ConnectionConfig, accessToken: string, options: StepOptions): Promise<ProbeVerdict>;
}

/** An access token encrypted by the application, with the data key that encrypted it. */
export interface SealedToken {
  /** IV (12 bytes) | AES-256-GCM ciphertext | tag (16 bytes). */
  readonly ciphertext: Uint8Array;
  /** The data key, encrypted by KMS. */
  readonly encryptedKey: Uint8Array;
}

/** Application-level encryption of stored tokens, bound to the connection name. */
export interface TokenCipher {
  seal(connection: string, accessToken: string): Promise<SealedToken>;
  /**
   * @returns the token, or undefined when the ciphertext does not authenticate (tampered with,
   *   or moved from another connection's item).
   * @throws when the key service cannot be reached (a fault, not a forgery).
   */
  open(connection: string, sealed: SealedToken): Promise<string | undefined>;
  /**
   * Starts getting ready for `open` (loading its code; no call to the key service), so that
   * the work overlaps the store read that will need it. Never throws: a failure shows at `open`.
   */
  prepare?(): void;
}
