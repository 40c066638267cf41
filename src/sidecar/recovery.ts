/**
 * What a starting sidecar does about an Envoy it finds left draining. The kubelet never starts a regular
 * container of a terminating pod, so a sidecar that starts while Envoy fails its health checks knows
 * that no deletion is under way: an earlier sidecar (a version whose own preStop started drains, or a
 * drain cut short) left Envoy so, and the pod would otherwise serve nothing until it is deleted.
 *
 * Native sidecars are restarted during termination since Kubernetes 1.33 (KEP-4438), so for them the
 * premise can fail; it does no harm there: a native sidecar that restarts mid-termination was not there to
 * answer Envoy's preStop call, so the kubelet has already sent Envoy SIGTERM, and restarting or undoing
 * the health check of an Envoy that is exiting changes nothing.
 */
import type { EnvoyProcessInfo } from '../envoy/admin-client.js';
import type { JournalEntry } from './journal.js';

export type RecoveryAction = 'none' | 'pass-health-checks' | 'restart-envoy';

export interface RecoveryDecision {
  readonly action: RecoveryAction;
  /** Whether the listeners of this Envoy process were drained, as far as the journal tells. */
  readonly listenersDrained: boolean | 'unknown';
  /** One sentence, for the log and /drain. */
  readonly why: string;
}

/**
 * Two estimates of one process's start differ by up to a second each (Envoy floors its uptime), plus the
 * time an admin call takes: more than this apart, they are two processes.
 */
export const SAME_PROCESS_TOLERANCE_MS = 2_500;

export function isSameProcess(startedAtMs: number | null, process: EnvoyProcessInfo): boolean {
  return startedAtMs !== null && Math.abs(startedAtMs - process.startedAtMs) <= SAME_PROCESS_TOLERANCE_MS;
}

/**
 * A drain of listeners is irreversible: such an Envoy is restarted (POST /quitquitquit, the kubelet starts
 * a fresh one), even if it passes its health checks again. Health checks failed alone are undone. When
 * nothing tells which (no journal, or a record of another process), the listeners may be drained: an
 * Envoy that still accepts but stops its listeners at the end of its drain time is the outage to avoid,
 * so it is restarted too.
 */
export function decideRecovery(envoy: EnvoyProcessInfo, journal: JournalEntry | undefined): RecoveryDecision {
  const record = journal !== undefined && isSameProcess(journal.envoyStartedAtMs, envoy) ? journal : undefined;
  if (record?.listenersDrain != null) {
    return {
      action: 'restart-envoy',
      listenersDrained: true,
      why: `an earlier shutdown manager drained this Envoy's listeners (journal of ${record.updatedAt}), which cannot be undone`,
    };
  }
  if (envoy.state !== 'DRAINING') {
    return { action: 'none', listenersDrained: record === undefined ? 'unknown' : false, why: `Envoy is ${envoy.state}` };
  }
  if (record?.healthChecks != null) {
    return {
      action: 'pass-health-checks',
      listenersDrained: false,
      why: `an earlier shutdown manager failed this Envoy's health checks (journal of ${record.updatedAt}) but did not drain its listeners`,
    };
  }
  return {
    action: 'restart-envoy',
    listenersDrained: 'unknown',
    why: 'Envoy fails its health checks and no journal of this Envoy process says whether its listeners were drained',
  };
}
