/** The report for people (grouped by section, colour optional) and for machines (JSON, the same content). */
import { SECTION_TITLES, type CheckReport, type CheckStatus, type Finding, type SectionName } from './report.js';

const MARKS: Readonly<Record<CheckStatus, string>> = { ok: 'ok  ', info: 'info', warning: 'warn', failure: 'FAIL' };
/** ANSI SGR codes: green, cyan, yellow, bold red. */
const COLOURS: Readonly<Record<CheckStatus, string>> = { ok: '32', info: '36', warning: '33', failure: '1;31' };
/** More than this many pods are summarised, so a report on a big cluster stays readable (JSON lists them all). */
const PODS_SHOWN = 5;

export function renderJson(report: CheckReport): string {
  return `${JSON.stringify(report, null, 2)}\n`;
}

export function renderText(report: CheckReport, colour: boolean): string {
  const paint = (status: CheckStatus, text: string): string => (colour ? `\x1b[${COLOURS[status]}m${text}\x1b[0m` : text);
  const lines: string[] = [];
  for (const section of Object.keys(SECTION_TITLES) as SectionName[]) {
    const findings = report.findings.filter((finding) => finding.section === section);
    if (findings.length === 0) continue;
    if (lines.length > 0) lines.push('');
    lines.push(SECTION_TITLES[section]);
    for (const finding of findings) lines.push(...findingLines(finding, paint));
  }
  lines.push('', summaryLine(report, paint));
  return `${lines.join('\n')}\n`;
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
  const verdict = report.failed ? paint('failure', 'Not every Envoy pod is protected:') : 'No check failed:';
  return `${verdict} ${failure} failed, ${warning} warning${warning === 1 ? '' : 's'}, ${ok} ok, ${info} for information.`;
}
