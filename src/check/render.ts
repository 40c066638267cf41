/** The report for people (grouped by section, colour optional) and for machines (JSON or YAML, the same content). */
import { stringify } from 'yaml';
import { seconds, type DrainsReport, type WorkloadDrain } from './drains.js';
import { SECTION_TITLES, type CheckReport, type CheckStatus, type Finding, type SectionName } from './report.js';

const MARKS: Readonly<Record<CheckStatus, string>> = { ok: 'ok  ', info: 'info', warning: 'warn', failure: 'FAIL' };
/** ANSI SGR codes: green, cyan, yellow, bold red. */
const COLOURS: Readonly<Record<CheckStatus, string>> = { ok: '32', info: '36', warning: '33', failure: '1;31' };
/** More than this many pods are summarised, so a report on a big cluster stays readable (JSON lists them all). */
const PODS_SHOWN = 5;

export function renderJson(report: CheckReport): string {
  return `${JSON.stringify(report, null, 2)}\n`;
}

/** The JSON report's content in YAML (kubectl's -o yaml): the same keys and values, in the same order. */
export function renderYaml(report: CheckReport): string {
  return stringify(JSON.parse(JSON.stringify(report)) as unknown);
}

/** What a script reading -o json or -o yaml gets when no report could be made: the message and the exit code. */
export function renderMachineError(format: 'json' | 'yaml', message: string, exitCode: number): string {
  const error = { error: { message, exitCode } };
  return format === 'json' ? `${JSON.stringify(error, null, 2)}\n` : stringify(error);
}

export function renderText(report: CheckReport, colour: boolean): string {
  const paint = (status: CheckStatus, text: string): string => (colour ? `\x1b[${COLOURS[status]}m${text}\x1b[0m` : text);
  const lines: string[] = [];
  for (const section of Object.keys(SECTION_TITLES) as SectionName[]) {
    const findings = report.findings.filter((finding) => finding.section === section);
    if (findings.length === 0) continue;
    if (lines.length > 0) lines.push('');
    lines.push(section === 'drains' ? drainsTitle(report.drains) : SECTION_TITLES[section]);
    if (section === 'drains') lines.push(...drainsTable(report.drains));
    for (const finding of findings) lines.push(...findingLines(finding, paint));
  }
  lines.push('', summaryLine(report, paint));
  return `${lines.join('\n')}\n`;
}

function drainsTitle({ lag }: DrainsReport): string {
  const title = SECTION_TITLES.drains;
  return lag.status === 'read' ? `${title} (the largest over ${lag.window ?? ''}, from ${lag.source ?? ''})` : title;
}

const COLUMNS: readonly { readonly title: string; readonly cell: (row: WorkloadDrain, lag: DrainsReport['lag']) => string; readonly right?: boolean }[] = [
  { title: 'WORKLOAD', cell: (row) => `${row.kind} ${row.namespace}/${row.name}` },
  { title: 'PODS', cell: (row) => String(row.pods), right: true },
  { title: 'GRACE', cell: (row) => seconds(row.gracePeriodSeconds) },
  { title: 'DEADLINE', cell: (row) => seconds(row.deadlineSeconds) },
  { title: 'CHECK-DELAY', cell: (row) => seconds(row.checkDelaySeconds) },
  { title: 'QUIET-PERIOD', cell: (row) => (row.quietPeriod ? 'on' : 'off') },
  {
    title: 'LB LAG',
    cell: (row, lag) => (row.loadBalancerLagSeconds !== null ? seconds(row.loadBalancerLagSeconds) : lag.status === 'read' ? 'no drain seen' : 'unknown'),
  },
];

/** One row per workload of injected pods: its drain's settings beside the lag its drains observed. */
function drainsTable({ lag, workloads }: DrainsReport): string[] {
  if (workloads.length === 0) return [];
  const cells = [COLUMNS.map((column) => column.title), ...workloads.map((row) => COLUMNS.map((column) => column.cell(row, lag)))];
  const widths = COLUMNS.map((_, index) => Math.max(...cells.map((line) => (line[index] as string).length)));
  return cells.map(
    (line) =>
      `  ${line
        .map((cell, index) => (COLUMNS[index]?.right === true ? cell.padStart(widths[index] as number) : cell.padEnd(widths[index] as number)))
        .join('  ')
        .trimEnd()}`,
  );
}

function findingLines(finding: Finding, paint: (status: CheckStatus, text: string) => string): string[] {
  const lines = [`  ${paint(finding.status, MARKS[finding.status])} ${finding.message}  [${finding.check}]`];
  const pods = finding.pods ?? [];
  if (pods.length > 1 && finding.status !== 'ok') {
    const shown = pods.slice(0, PODS_SHOWN).join(', ');
    lines.push(`         pods: ${shown}${pods.length > PODS_SHOWN ? ` and ${pods.length - PODS_SHOWN} more` : ''}`);
  }
  if (finding.fix !== undefined) lines.push(`         fix: ${finding.fix}`);
  return lines;
}

function summaryLine(report: CheckReport, paint: (status: CheckStatus, text: string) => string): string {
  const { ok, info, warning, failure } = report.counts;
  // check --pre reports on the cluster before install: no Envoy pod is concerned yet.
  const before = report.findings.length > 0 && report.findings.every((finding) => finding.section === 'pre');
  const failed = before ? 'Not ready to install:' : 'Not every Envoy pod is protected:';
  const verdict = report.failed ? paint('failure', failed) : 'No check failed:';
  return `${verdict} ${failure} failed, ${warning} warning${warning === 1 ? '' : 's'}, ${ok} ok, ${info} for information.`;
}
