/**
 * The start-up probe of Envoy's admin API: GET /ready in the background until it answers once, so that
 * a wrong admin port shows in the logs at pod start, not at the first rollout, and so that the drain
 * knows whether a refused connection means "Envoy exited" (it answered before) or nothing yet.
 */
import { systemClock, type Clock } from '../clock.js';
import { failureKindOf, type AdminFailureKind } from '../envoy/admin-errors.js';
import type { AdminAnswer, EnvoyServerState } from '../envoy/admin-client.js';
import { adminPortHint } from './admin-hint.js';
import { RateLimit } from './log-throttle.js';
import type { SidecarLog } from './log.js';

export interface ProbeTarget {
  /** `host:port`, for messages. */
  readonly address: string;
  readonly hasAnswered: boolean;
  /** The last HTTP answer of the admin port, valid or not: a port that answers is reachable, whatever it says. */
  readonly lastAnswer?: AdminAnswer | undefined;
  serverState(signal: AbortSignal): Promise<EnvoyServerState>;
}

export interface ProbeTiming {
  /** First retry delay; doubled after each failure up to `maxRetryMs`. */
  readonly minRetryMs: number;
  readonly maxRetryMs: number;
  /**
   * Failures before this are Envoy still starting (the sidecar usually starts first, a native sidecar
   * always): logged once at info. Warning about them in every pod would teach operators to ignore the warning.
   */
  readonly warnAfterMs: number;
  /** Once warning, at most one warning per this interval. */
  readonly warnEveryMs: number;
}

export const DEFAULT_PROBE_TIMING: ProbeTiming = { minRetryMs: 100, maxRetryMs: 2_000, warnAfterMs: 15_000, warnEveryMs: 30_000 };

export interface AdminProbe {
  /** Stops retrying (the process is stopping); a call in flight is cancelled. */
  stop(): void;
  /** Settles when the probe has stopped, answered or not. */
  readonly finished: Promise<void>;
}

export function startAdminProbe(
  target: ProbeTarget,
  log: SidecarLog,
  timing: ProbeTiming = DEFAULT_PROBE_TIMING,
  clock: Clock = systemClock,
): AdminProbe {
  const stopping = new AbortController();
  const finished = probeUntilAnswered(target, log, timing, stopping.signal, clock);
  return { stop: () => stopping.abort(), finished };
}

async function probeUntilAnswered(target: ProbeTarget, log: SidecarLog, timing: ProbeTiming, signal: AbortSignal, clock: Clock): Promise<void> {
  const startedAt = clock.now();
  const report = failureReporter(target, log, timing, startedAt, clock);
  let delayMs = timing.minRetryMs;
  // The drain's own calls count too: once one of them got an answer there is nothing left to learn.
  while (!signal.aborted && !target.hasAnswered) {
    try {
      const state = await target.serverState(signal);
      log.info(
        { event: 'envoy_admin_reachable', envoy_admin: target.address, envoy_state: state, after_ms: clock.now() - startedAt, failed_attempts: report.failures() },
        `Envoy admin API answered at ${target.address} (state ${state})`,
      );
      return;
    } catch (error) {
      if (signal.aborted) return;
      report.failure(error);
    }
    await clock.sleep(delayMs, signal).catch(() => undefined); // rejected only when stopping
    delayMs = Math.min(delayMs * 2, timing.maxRetryMs);
  }
}

/** Info at the first failure; a warning with the fix once unreachable for `warnAfterMs`, then every `warnEveryMs`. */
function failureReporter(target: ProbeTarget, log: SidecarLog, timing: ProbeTiming, startedAt: number, clock: Clock) {
  let failures = 0;
  const warnings = new RateLimit(timing.warnEveryMs, clock);
  return {
    failures: () => failures,
    failure(error: unknown): void {
      failures += 1;
      const now = clock.now();
      const fields = {
        envoy_admin: target.address,
        error: error instanceof Error ? error.message : String(error),
        unreachable_for_ms: now - startedAt,
        failed_attempts: failures,
      };
      const kind = failureKindOf(error);
      if (now - startedAt < timing.warnAfterMs) {
        if (failures === 1) {
          log.info(
            { event: 'envoy_admin_waiting', kind, ...fields },
            `${notYet(kind, target.address)}; retrying, with a warning if it stays so for ${timing.warnAfterMs} ms`,
          );
        }
        return;
      }
      if (warnings.note() === undefined) return;
      const answer = target.lastAnswer;
      const found =
        answer === undefined
          ? `Envoy admin API not reachable at ${target.address}`
          : `Envoy admin API at ${target.address} answers, but not as Envoy does (last: ${answer.endpoint} answered HTTP ${answer.status} ${JSON.stringify(answer.excerpt)})`;
      log.warn(
        { event: 'envoy_admin_unreachable', kind, ...fields, ...(answer === undefined ? {} : { last_answer_status: answer.status, last_answer: answer.excerpt }) },
        `${found}: ${adminPortHint(target.address)}. Until it answers, /shutdown cannot drain Envoy; retrying`,
      );
    },
  };
}

/**
 * The first failure, told by kind: only a refusal is likely to be Envoy still starting; a port that answers
 * 500, or takes the connection and says nothing, is something else, and saying "may still be starting" would
 * send the operator to wait.
 */
function notYet(kind: AdminFailureKind, address: string): string {
  switch (kind) {
    case 'refused':
      return `Envoy admin API not reachable yet at ${address}: nothing listens there yet (Envoy may still be starting)`;
    case 'timeout':
      return `Envoy admin API at ${address} took the connection but did not answer in time (an Envoy still starting, an overloaded one, or not Envoy)`;
    case 'invalid-answer':
      return `Envoy admin API at ${address} answered, but not as Envoy does: is this Envoy's admin port?`;
    case 'transport':
      return `Envoy admin API at ${address} could not be reached (the connection failed)`;
  }
}
