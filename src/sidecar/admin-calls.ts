/**
 * Every admin call the sidecar makes (the start-up probe's, the watch's, the drain's, recovery's) counted by how
 * it ended, for /metrics: whether the last one got a valid answer (`up`), and failures by kind. A sidecar whose
 * admin address is wrong exports no connection series at all, so these are what an alert can see
 * (ShutdownManagerEnvoyAdminUnreachable in manifests/monitoring).
 */
import { failureKindOf, noFailures, type AdminFailureKind } from '../envoy/admin-errors.js';
import type { WitnessedAdminClient } from '../envoy/process/witnessed-admin.js';
import type { ProbeTarget } from './admin-probe.js';
import type { SupervisedEnvoy } from './supervisor.js';

export interface AdminCallCounts {
  /** Whether the last call ended with a valid answer; null before the first call ended. */
  readonly up: boolean | null;
  /** Failed calls by kind since the sidecar started (counters: they never go down). */
  readonly failures: Readonly<Record<AdminFailureKind, number>>;
}

/** The client, with every call counted into `counts`. */
export function countedAdmin(client: WitnessedAdminClient): { readonly envoy: SupervisedEnvoy & ProbeTarget; readonly counts: () => AdminCallCounts } {
  let up: boolean | null = null;
  const failures = noFailures();
  const counted = <T>(signal: AbortSignal | undefined, call: (signal: AbortSignal | undefined) => Promise<T>): Promise<T> =>
    call(signal).then(
      (value) => {
        up = true;
        return value;
      },
      (error: unknown) => {
        // A call the sidecar cancelled itself (a drain that ended, the process stopping) says nothing about Envoy.
        if (signal?.aborted !== true) {
          up = false;
          failures[failureKindOf(error)] += 1;
        }
        throw error;
      },
    );
  const envoy: SupervisedEnvoy & ProbeTarget = {
    get address() {
      return client.address;
    },
    get hasAnswered() {
      return client.hasAnswered;
    },
    get lastAnswer() {
      return client.lastAnswer;
    },
    connectionMarker: () => client.connectionMarker(),
    connectedSince: (marker) => client.connectedSince(marker),
    serverState: (signal) => counted(signal, (s) => client.serverState(s)),
    serverInfo: (signal) => counted(signal, (s) => client.serverInfo(s)),
    failHealthChecks: (signal) => counted(signal, (s) => client.failHealthChecks(s)),
    drainListeners: (signal) => counted(signal, (s) => client.drainListeners(s)),
    countOpenConnections: (signal) => counted(signal, (s) => client.countOpenConnections(s)),
    passHealthChecks: (signal) => counted(signal, (s) => client.passHealthChecks(s)),
    quit: (signal) => counted(signal, (s) => client.quit(s)),
  };
  return { envoy, counts: () => ({ up, failures: { ...failures } }) };
}
