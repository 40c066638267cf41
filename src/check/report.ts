/**
 * What `envoy-shutdown-manager check` reports: findings, each from a check with a stable name, and the report
 * they make. Pure data: the checks (webhook.ts, pods.ts, drains.ts) make findings, render.ts prints them.
 */
import type { DrainsReport } from './drains.js';

/** `info` is neither good nor bad: something the reader should know (an opted-out pod, a failurePolicy). */
export type CheckStatus = 'ok' | 'info' | 'warning' | 'failure';

/** `pre`: check --pre, before install; the others: the installed webhook and the pods it protects. */
export type SectionName = 'pre' | 'webhook' | 'pods' | 'drains';

export interface Finding {
  /** Stable, for scripts: `webhook.endpoints`, `pods.missing-sidecar`... */
  readonly check: string;
  readonly section: SectionName;
  readonly status: CheckStatus;
  /** One line saying what was found. */
  readonly message: string;
  /** The command or setting that fixes it; absent when there is nothing to fix. */
  readonly fix?: string;
  /** The pods concerned (namespace/name), for findings about pods. */
  readonly pods?: readonly string[];
}

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
