/** The pure core of `check`: what was read from the cluster in, the report out. */
import type { ClusterSnapshot } from './cluster.js';
import { drainFindings, type LagReading } from './drains.js';
import type { Expectations } from './expectations.js';
import { podFindings } from './pods.js';
import { makeReport, type CheckReport } from './report.js';
import { webhookFindings } from './webhook.js';

export function checkCluster(snapshot: ClusterSnapshot, expected: Expectations, now: Date, lag: LagReading = { status: 'unknown' }): CheckReport {
  const { namespaces, replicaSetOwners, scope } = snapshot;
  const drains = drainFindings({ namespaces, replicaSetOwners, expected, lag });
  return makeReport(
    [...webhookFindings({ objects: snapshot.webhook, now }), ...podFindings({ namespaces, replicaSetOwners, expected, ...(scope === undefined ? {} : { scope }) }), ...drains.findings],
    drains.report,
  );
}
