/**
 * The real admin client as a drain's target, with what it reports changed: the controls of the drain tests run the
 * same drain on evidence taken away (the witness, the hot restart gauges), to show what that evidence protects.
 */
import { AdminRefusedError } from '../../src/envoy/admin-errors.js';
import type { WitnessedAdminClient } from '../../src/envoy/process/witnessed-admin.js';
import type { ConnectionCount } from '../../src/envoy/stats.js';
import type { EnvoyDrainTarget } from '../../src/sidecar/drain.js';

type Read = Awaited<ReturnType<EnvoyDrainTarget['countOpenConnections']>>;

export interface Changes {
  /** What each read reports instead (default: as read). */
  readonly read?: (read: Awaited<ReturnType<WitnessedAdminClient['countOpenConnections']>>) => Read;
  /** Whether refusals keep the witness's evidence (default: yes). */
  readonly refusalEvidence?: boolean;
}

export function changedTarget(client: WitnessedAdminClient, changes: Changes): EnvoyDrainTarget {
  const refusals = async <T>(call: Promise<T>): Promise<T> => {
    try {
      return await call;
    } catch (error) {
      if (changes.refusalEvidence === false && error instanceof AdminRefusedError) delete error.evidence;
      throw error;
    }
  };
  return {
    get address() {
      return client.address;
    },
    get hasAnswered() {
      return client.hasAnswered;
    },
    connectionMarker: () => client.connectionMarker(),
    connectedSince: (marker) => client.connectedSince(marker),
    failHealthChecks: (signal) => refusals(client.failHealthChecks(signal)),
    drainListeners: (signal) => refusals(client.drainListeners(signal)),
    countOpenConnections: async (signal) => {
      const read = await refusals(client.countOpenConnections(signal));
      return changes.read === undefined ? read : changes.read(read);
    },
  };
}

/** The counter-only rule: reads and refusals stripped of the witness's evidence. */
export function withoutWitness(client: WitnessedAdminClient): EnvoyDrainTarget {
  return changedTarget(client, { refusalEvidence: false, read: ({ evidence: _evidence, ...count }): ConnectionCount => count });
}
