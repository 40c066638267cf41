/**
 * A drain's failed admin calls: counted by kind, the last one kept for the outcome, the run of refusals timed, the
 * initiation steps that timed out noted, and the warnings rate-limited so that a broken admin API cannot flood the
 * log. Bookkeeping only: what a failure means for the drain (Envoy exited? never reachable?) is decided in drain.ts.
 */
import { failureKindOf, noFailures, type AdminFailureKind } from '../envoy/admin-errors.js';
import type { Clock } from '../clock.js';
import { adminPortHint } from './admin-hint.js';
import type { AdminFailureReport } from './drain-outcome.js';
import { labelOf, type DrainActionId, type DrainStepId } from './drain-steps.js';
import { RateLimit } from './log-throttle.js';
import type { SidecarLog } from './log.js';

/** At most one warning per kind of admin failure in this long: a broken admin must not flood the log. */
const FAILURE_LOG_EVERY_MS = 30_000;

/** One failed admin call, as recorded. */
export interface AdminFailure {
  readonly kind: AdminFailureKind;
  readonly message: string;
}

export class AdminFailureLedger {
  private consecutive = 0;
  private lastErrorText: string | null = null;
  private lastInvalid: string | null = null;
  private lastFailure: AdminFailure | undefined;
  private readonly counts: Record<AdminFailureKind, number> = noFailures();
  /** Initiation calls that timed out at least once: Envoy may have taken them, though it never said so. */
  private readonly stepsTimedOut = new Set<DrainStepId>();
  /** A failure's line, by kind and error class (see logFailure). */
  private readonly lines: RateLimit;
  /** When the current run of refusals began (monotonic); undefined while none. */
  private refusalsSince: number | undefined;

  constructor(
    private readonly envoy: { readonly address: string; readonly hasAnswered: boolean },
    private readonly log: SidecarLog,
    private readonly clock: Pick<Clock, 'now'>,
  ) {
    this.lines = new RateLimit(FAILURE_LOG_EVERY_MS, clock);
  }

  /** Refused admin connections in a row, up to now. */
  get consecutiveRefusals(): number {
    return this.consecutive;
  }

  /** When the current run of refusals began (monotonic); undefined while none. */
  get refusalsSinceMs(): number | undefined {
    return this.refusalsSince;
  }

  /** The last admin failure, as logged, or the call the drain's end cut; null while every call succeeded. */
  get lastError(): string | null {
    return this.lastErrorText;
  }

  /** The last answer that was not what Envoy answers (see DrainOutcome.lastInvalidAnswer). */
  get lastInvalidAnswer(): string | null {
    return this.lastInvalid;
  }

  /** The last failure recorded; undefined while none. */
  get last(): AdminFailure | undefined {
    return this.lastFailure;
  }

  /** Calls that timed out, during this drain. */
  get timeouts(): number {
    return this.counts.timeout;
  }

  /** Counts a failed call of `action`, and the run of refusals it extends or ends. */
  record(error: unknown, action: DrainActionId): AdminFailure {
    const kind = failureKindOf(error);
    const message = error instanceof Error ? error.message : String(error);
    this.lastErrorText = message;
    this.lastFailure = { kind, message };
    this.counts[kind] += 1;
    if (kind === 'invalid-answer') this.lastInvalid = message;
    if (kind === 'timeout' && action !== 'count-connections') this.stepsTimedOut.add(action);
    this.consecutive = kind === 'refused' ? this.consecutive + 1 : 0;
    if (kind === 'refused') this.refusalsSince ??= this.clock.now();
    else this.refusalsSince = undefined;
    return this.lastFailure;
  }

  /** A read answered: the run of refusals is over. */
  readAnswered(): void {
    this.consecutive = 0;
    this.refusalsSince = undefined;
  }

  /** Envoy took an initiation step: no refusal in a row any more (the run's start stays until a read answers). */
  stepAccepted(): void {
    this.consecutive = 0;
  }

  /**
   * At most one warning per kind and error class every FAILURE_LOG_EVERY_MS (a 500 after an HTML page is news,
   * the hundredth 500 is not); for an admin API that never answered, one per drain: the line that ends the drain
   * says the rest.
   */
  logFailure(error: unknown, { kind, message }: AdminFailure, id: DrainActionId): void {
    const errorName = error instanceof Error ? error.name : 'Error';
    const action = labelOf(id);
    const everAnswered = this.envoy.hasAnswered;
    if (!everAnswered && this.lines.any) return;
    if (this.lines.note(`${kind}:${errorName}`) === undefined) return;
    this.log.warn(
      {
        event: 'admin_error',
        action,
        kind,
        error: errorName,
        error_message: message,
        failures: { ...this.counts },
        consecutive_refusals: this.consecutive,
        envoy_admin_ever_reachable: everAnswered,
      },
      everAnswered
        ? `Envoy admin call failed (${action}, ${kind}); retrying every check interval (at most one such line per ${FAILURE_LOG_EVERY_MS / 1000}s)`
        : `Envoy admin call failed (${action}, ${kind}) and the admin API has never answered: ${adminPortHint(this.envoy.address)}`,
    );
  }

  /** A call still waiting for Envoy when the drain ended: the one thing that explains a drain with no count. */
  noteCutCall(id: DrainActionId): void {
    const action = labelOf(id);
    this.lastErrorText = `${action}: no answer from Envoy's admin API before the drain ended`;
    this.log.warn(
      { event: 'admin_error', action, kind: 'cut', error_message: this.lastErrorText, consecutive_refusals: this.consecutive },
      `Envoy admin call (${action}) was still waiting for an answer when the drain ended`,
    );
  }

  report(): AdminFailureReport | null {
    return this.lastFailure === undefined ? null : { ...this.lastFailure, counts: { ...this.counts } };
  }

  /** The steps that timed out and were not taken since, by label (DrainOutcome.unconfirmedSteps). */
  unconfirmedSteps(taken: (id: DrainStepId) => boolean): string[] {
    return [...this.stepsTimedOut].filter((id) => !taken(id)).map(labelOf);
  }
}
