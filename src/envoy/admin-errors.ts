/**
 * The typed failures of an Envoy admin call, so that the caller can tell "Envoy is gone" (refused) from "Envoy is
 * busy or confused" (timeout, an answer that is not Envoy's) and act on each: see AdminFailureKind.
 */
import type { SocketPathState } from './admin-address.js';
import type { WitnessEvidence } from './process/witness.js';

/**
 * What kind of failure an admin call met, as the drain reports it: nothing listens (`refused`), something
 * took the call but gave no complete answer in time (`timeout`: it may have acted on it), something answered
 * but not as Envoy does (`invalid-answer`: a status, a body, an upgrade, a size or nesting beyond bounds),
 * or the connection failed otherwise (`transport`: a reset, a name that does not resolve).
 */
export type AdminFailureKind = 'refused' | 'timeout' | 'invalid-answer' | 'transport';

export const ADMIN_FAILURE_KINDS: readonly AdminFailureKind[] = ['refused', 'timeout', 'invalid-answer', 'transport'];

/** The kind of any failure of an admin call: an EnvoyAdminError's own; anything else failed in transport. */
export function failureKindOf(error: unknown): AdminFailureKind {
  return error instanceof EnvoyAdminError ? error.kind : 'transport';
}

/** A count of 0 for each kind of failure, to count failures into. */
export function noFailures(): Record<AdminFailureKind, number> {
  return { refused: 0, timeout: 0, 'invalid-answer': 0, transport: 0 };
}

/** Base of every admin failure; `endpoint` is what was called, e.g. "POST /healthcheck/fail". */
export abstract class EnvoyAdminError extends Error {
  override readonly name: string = 'EnvoyAdminError';
  abstract readonly kind: AdminFailureKind;

  constructor(
    readonly endpoint: string,
    message: string,
    options?: ErrorOptions,
  ) {
    super(`Envoy admin ${endpoint}: ${message}`, options);
  }
}


/** Nothing listens on the admin port: Envoy has exited (or not started). */
export class AdminRefusedError extends EnvoyAdminError {
  override readonly name = 'AdminRefusedError';
  readonly kind = 'refused';
  /** The witness connection when the call was refused (set by WitnessedAdminClient); undefined from a client that keeps none. */
  evidence?: WitnessEvidence;
  /** For a Unix socket: what is at the path now. */
  pathState?: SocketPathState;
}

/**
 * No complete answer within the timeout, headers or not: Envoy is overloaded or stuck, or something holds the
 * connection. Envoy may still have acted on the call (a mutation is done when its handler runs, not when the
 * answer reaches us).
 */
export class AdminTimeoutError extends EnvoyAdminError {
  override readonly name = 'AdminTimeoutError';
  readonly kind = 'timeout';
}

/** Envoy answered with a status other than 200. */
export class AdminStatusError extends EnvoyAdminError {
  override readonly name = 'AdminStatusError';
  readonly kind = 'invalid-answer';

  constructor(
    endpoint: string,
    readonly status: number,
    readonly body: string,
  ) {
    super(endpoint, `answered HTTP ${status}: ${JSON.stringify(body.slice(0, 200))}`);
  }
}

/** Envoy answered 200 with a body that is not what the endpoint returns (for stats, see StatsParseError in cause). */
export class AdminResponseError extends EnvoyAdminError {
  override readonly name = 'AdminResponseError';
  readonly kind = 'invalid-answer';
}

/** Any other transport failure (connection reset, DNS…). */
export class AdminTransportError extends EnvoyAdminError {
  override readonly name = 'AdminTransportError';
  readonly kind = 'transport';
  /** For a Unix socket path that is no socket now (a file, a directory): what is there. */
  pathState?: SocketPathState;
}
