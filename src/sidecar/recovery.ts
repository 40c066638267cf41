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
import { sameEnvoyStart, type JournalEntry } from './journal.js';

export { SAME_PROCESS_TOLERANCE_MS } from './journal.js';

export type RecoveryAction = 'none' | 'pass-health-checks' | 'restart-envoy';

export interface RecoveryDecision {
  readonly action: RecoveryAction;
  /**
   * Whether the listeners of this Envoy process were drained, as far as the journal tells: true once Envoy
   * accepted `drain_listeners`; 'unknown' when it was only asked for, or when no record of this process exists.
   */
  readonly listenersDrained: boolean | 'unknown';
  /** One sentence, for the log and /drain. */
  readonly why: string;
}

export function isSameProcess(startedAtMs: number | null, process: EnvoyProcessInfo): boolean {
  return startedAtMs !== null && sameEnvoyStart(startedAtMs, process.startedAtMs);
}

/**
 * The table, first matching row wins. "Record" is the journal's entry for this very Envoy process (same
 * start within the tolerance); an entry of another process, of an unknown one, in an older format or none
 * at all is "no record". An intent is written before each call and an acceptance after Envoy's OK, so
 * an intent alone means the call may or may not have reached Envoy, and no intent means it was never sent.
 *
 * | listeners drain in record | health checks in record | Envoy state | action             |
 * |---------------------------|-------------------------|-------------|--------------------|
 * | accepted                  | any                     | any         | restart-envoy      |
 * | intended                  | any                     | any         | restart-envoy      |
 * | (none)                    | accepted or intended    | DRAINING    | pass-health-checks |
 * | (none)                    | accepted or intended    | not DRAINING| none               |
 * | no record                 |                         | DRAINING    | restart-envoy      |
 * | no record                 |                         | not DRAINING| none               |
 *
 * 1. Listeners accepted: drained for good (`drain_listeners` cannot be undone in a running process); at the
 *    end of its drain time Envoy stops its listeners while still reporting LIVE and passing readiness: the
 *    outage to avoid. Restart, whatever the state: LIVE only means someone passed the health checks again.
 * 2. Listeners intended only: the call may have reached Envoy (a timeout, or this sidecar died waiting), and
 *    nothing Envoy reports tells whether it did. The README's rule for "nothing tells which" applies:
 *    restart, even a LIVE Envoy. A restart costs its connections once; a drained Envoy left serving costs
 *    every connection after its drain time, until the pod is deleted. (The drain sends `drain_listeners`
 *    after `/healthcheck/fail` failed with anything but a refusal, so a LIVE Envoy is no proof either.)
 * 3. Health checks accepted or intended, listeners never sent, Envoy DRAINING: /healthcheck/fail is the only
 *    thing that fails health checks and it was sent; nothing irreversible was. POST /healthcheck/ok undoes it.
 *    An intent counts: Envoy DRAINING shows the call got there.
 * 4. Health checks accepted or intended, Envoy LIVE (or starting): the call never took effect, or the health
 *    checks were passed again since; nothing irreversible was sent. Nothing to do.
 * 5. No record, Envoy DRAINING: something failed its health checks and nothing tells whether its listeners
 *    were drained too: restart (as row 2).
 * 6. No record, Envoy not DRAINING: no sign of any drain. Nothing to do.
 */
export function decideRecovery(envoy: EnvoyProcessInfo, journal: JournalEntry | undefined): RecoveryDecision {
  const record = journal !== undefined && isSameProcess(journal.envoyStartedAtMs, envoy) ? journal : undefined;
  const draining = envoy.state === 'DRAINING';
  if (record?.listenersDrain === 'accepted') {
    return {
      action: 'restart-envoy',
      listenersDrained: true,
      why: `an earlier shutdown manager drained this Envoy's listeners (Envoy accepted it; journal of ${record.updatedAt}), which cannot be undone`,
    };
  }
  if (record?.listenersDrain === 'intended') {
    return {
      action: 'restart-envoy',
      listenersDrained: 'unknown',
      why: `an earlier shutdown manager sent this Envoy a drain of its listeners with no answer recorded (journal of ${record.updatedAt}): they may be draining, which cannot be undone`,
    };
  }
  if (record !== undefined && record.healthChecks !== null) {
    if (!draining) return { action: 'none', listenersDrained: false, why: `Envoy is ${envoy.state}, and its listeners were never sent a drain` };
    const how = record.healthChecks === 'accepted' ? 'failed' : 'asked to fail';
    return {
      action: 'pass-health-checks',
      listenersDrained: false,
      why: `an earlier shutdown manager ${how} this Envoy's health checks (journal of ${record.updatedAt}) and never sent a drain of its listeners`,
    };
  }
  if (!draining) return { action: 'none', listenersDrained: 'unknown', why: `Envoy is ${envoy.state}` };
  return {
    action: 'restart-envoy',
    listenersDrained: 'unknown',
    why: 'Envoy fails its health checks and no journal of this Envoy process says whether its listeners were drained',
  };
}
