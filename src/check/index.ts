/** The pure core of `check`: what was read from the cluster in, the report out. */
import type { ClusterSnapshot } from './cluster.js';
import type { Expectations } from './expectations.js';
import { podFindings } from './pods.js';
import { makeReport, type CheckReport } from './report.js';
import { webhookFindings } from './webhook.js';

export function checkCluster(snapshot: ClusterSnapshot, expected: Expectations, now: Date): CheckReport {
  return makeReport([
    ...webhookFindings({ objects: snapshot.webhook, now }),
    ...podFindings({ namespaces: snapshot.namespaces, replicaSetOwners: snapshot.replicaSetOwners, expected }),
  ]);
}
