/**
 * What `envoy-shutdown-manager check` reports: the findings (finding.ts), each from a check with a stable name,
 * and the report they make. Pure data: the checks (webhook.ts, pods.ts, drains.ts) make findings, render.ts
 * prints them.
 */
import type { DrainsReport } from './drains.js';
import type { CheckStatus, Finding, SectionName } from './finding.js';

export type { CheckStatus, Finding, SectionName } from './finding.js';

export interface CheckReport {
  /** The JSON format's version: bumped when a field changes meaning or goes away. */
  readonly version: 1;
  /** True when at least one check failed: the exit status is then 1. */
  readonly failed: boolean;
  readonly counts: Readonly<Record<CheckStatus, number>>;
  readonly findings: readonly Finding[];
  /**
   * Each workload's drain settings and the load balancer's lag its drains observed (read from Prometheus), and
   * how that lag was read: `lag.status` is `unknown` (not asked), `read` or `failed`.
   */
  readonly drains: DrainsReport;
}

export const SECTION_TITLES: Readonly<Record<SectionName, string>> = {
  pre: 'Before install',
  webhook: 'The webhook',
  pods: 'Envoy pods',
  drains: "Drains and the load balancer's lag",
};

const NO_DRAINS: DrainsReport = { lag: { status: 'unknown' }, workloads: [] };

export function makeReport(findings: readonly Finding[], drains: DrainsReport = NO_DRAINS): CheckReport {
  const counts: Record<CheckStatus, number> = { ok: 0, info: 0, warning: 0, failure: 0 };
  for (const finding of findings) counts[finding.status] += 1;
  return { version: 1, failed: counts.failure > 0, counts, findings, drains };
}
