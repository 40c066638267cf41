/**
 * The HAProxy table of docs/proof.md: a row per scenario and rule, its cells from what each run observed (the
 * clients' counts, HAProxy's log, the sidecar's /drain and /shutdown answers). Where the sidecar reported no lag, the
 * cell says so ("none"); a lag of 0 is the sidecar saying that no client traffic came after the failure.
 */
import { runOnce, ruleLabel, type RuleName, type RunOptions, type RunReport, type Scenario } from './scenarios.js';

export const HEADER = [
  'scenario',
  'rule',
  'failed / served',
  'failures',
  "HAProxy DOWN after /healthcheck/fail, s (control: after Envoy's exit)",
  'last request HAProxy sent the pod, s',
  'requests HAProxy sent the pod after the failure (failed)',
  'lag the sidecar reported, s (lower bound-loadBalancer.lagMs)',
  '/shutdown to release, s (how the drain ended)',
] as const;

export function tableHeader(): string[] {
  return [`| ${HEADER.join(' | ')} |`, `|${HEADER.map(() => '---').join('|')}|`];
}

/** Runs a row: the scenario's runs (one, or `runs`) under `rule`, one after the other. */
export async function runRow(scenario: Scenario, rule: RuleName, options: RunOptions = {}): Promise<RunReport[]> {
  const reports: RunReport[] = [];
  for (let run = 0; run < (scenario.runs ?? 1); run += 1) reports.push(await runOnce(scenario, rule, options));
  return reports;
}

const s = (ms: number): string => (ms / 1000).toFixed(2);
/** One value per run, joined: a row of several runs shows each. */
const each = (reports: readonly RunReport[], cell: (report: RunReport) => string): string => reports.map(cell).join(', ');

export function lagCell(report: RunReport): string {
  if (report.lagMs === undefined) return 'none (no sidecar)';
  if (report.lagMs === null) return 'none';
  if (report.lagMs === 0) return '0 (no client traffic seen)';
  return report.lagAtLeastMs === null || report.lagAtLeastMs === undefined ? s(report.lagMs) : `${s(report.lagAtLeastMs)}-${s(report.lagMs)}`;
}

export function downCell(report: RunReport): string {
  if (report.downAfterMs === undefined) return "not DOWN within 3 s of Envoy's exit";
  const afterExit = report.referenceIs === 'health checks failed' && report.reference + report.downAfterMs > report.deletion.releasedAt;
  return `${s(report.downAfterMs)}${afterExit ? " (after Envoy's exit)" : ''}`;
}

export function releaseCell(report: RunReport): string {
  if (report.reason === undefined && report.shutdownStatus === undefined) return report.lagMs === undefined ? '0 (no hook: SIGTERM at once)' : `${s(report.releaseAfterMs)} (no answer)`;
  const status = report.shutdownStatus === 200 ? '' : `, ${report.shutdownStatus ?? 'no answer'}`;
  return `${s(report.releaseAfterMs)} (${report.reason ?? '?'}${status})`;
}

export function failuresCell(reports: readonly RunReport[]): string {
  const kinds = new Map<string, number>();
  for (const report of reports) for (const [kind, count] of report.failures) kinds.set(kind, (kinds.get(kind) ?? 0) + count);
  return kinds.size === 0 ? '-' : [...kinds].map(([kind, count]) => `${kind} x${count}`).join(', ');
}

export function tableRow(scenario: Scenario, rule: RuleName, reports: readonly RunReport[]): string {
  const sum = (value: (report: RunReport) => number): number => reports.reduce((total, report) => total + value(report), 0);
  const cells = [
    scenario.label,
    ruleLabel(rule),
    `${sum((report) => report.failed)} / ${sum((report) => report.served)}`,
    failuresCell(reports),
    each(reports, downCell),
    each(reports, (report) => (report.lastSentAfterMs === undefined ? 'none after it' : s(report.lastSentAfterMs))),
    each(reports, (report) => `${report.sentAfter} (${report.sentAfterFailed})`),
    each(reports, lagCell),
    each(reports, releaseCell),
  ];
  return `| ${cells.join(' | ')} |`;
}
