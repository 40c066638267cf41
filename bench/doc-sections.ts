/**
 * docs/performance.md's tables of figures are written by the command that measures them (`npm run bench --
 * --write-docs`, `npm run bench:budgets -- --write-docs`), never pasted: one section per command and Node major,
 * between `<!-- bench:<command>-node<major>:begin -->` and its `end` marker (test/support/generated-sections.ts, the
 * mechanism of docs/proof.md), a line saying how and when it was written, then the table the command printed.
 * test/docs/performance.test.ts reads them back with parseSection and checks every row against benchFigureNames.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { cpus } from 'node:os';
import { CHECK_FIGURE } from './check.js';
import { listenerFloodFigureNames } from './listener-flood.js';
import { sidecarFigureNames } from './sidecar.js';
import { loadAverage, tableLines, TABLE_HEADERS, type Figure } from './support.js';
import { WATCH_WEEK_FIGURES } from './watch-week.js';
import { webhookFigureNames } from './webhook.js';
import { webhookMemoryFigureNames } from './webhook-memory.js';
import { between, replaceBetween } from '../test/support/generated-sections.js';

export const PERFORMANCE_DOC = new URL('../docs/performance.md', import.meta.url);
export const SECTION_KIND = 'bench';
export type BenchCommand = 'bench' | 'bench:budgets';

/** What a run was: the header line of its section. */
export interface RunRecord {
  readonly command: BenchCommand;
  readonly quick: boolean;
  readonly date: string;
  readonly nodeVersion: string;
  readonly cpus: number;
  readonly loadAtStart: string;
  readonly loadAtEnd: string;
  readonly seconds: number;
}

/** `results-node24` for `npm run bench` on Node 24, `budgets-node20` for `npm run bench:budgets` on Node 20. */
export function sectionName(command: BenchCommand, nodeVersion: string): string {
  return `${command === 'bench' ? 'results' : 'budgets'}-node${majorOf(nodeVersion)}`;
}

const majorOf = (nodeVersion: string): number => Number(/^v?(\d+)\./.exec(nodeVersion)?.[1]);

const commandLine = (run: Pick<RunRecord, 'command' | 'quick'>): string => `npm run ${run.command} -- ${run.quick ? '--quick ' : ''}--write-docs`;

/** The record of a run that started at `startedMs` (performance.now()) with `loadAtStart`, ending now. */
export function finishedRun(command: BenchCommand, quick: boolean, loadAtStart: string, startedMs: number): RunRecord {
  const seconds = Math.round((performance.now() - startedMs) / 1000);
  return { command, quick, date: new Date().toISOString().slice(0, 10), nodeVersion: process.version, cpus: cpus().length, loadAtStart, loadAtEnd: loadAverage(), seconds };
}

export function headerLine(run: RunRecord): string {
  const profile = run.quick ? 'quick run: fewer and shorter rounds, noisier figures' : 'full run';
  return (
    `Written by \`${commandLine(run)}\` on ${run.date}; do not edit. Node ${run.nodeVersion}, ${run.cpus} CPUs, ` +
    `load average ${run.loadAtStart} at the start and ${run.loadAtEnd} at the end, ${run.seconds} s (${profile}).`
  );
}

/** The inverse of headerLine; undefined for a line it did not write. */
export function parseHeader(line: string): RunRecord | undefined {
  const match =
    /^Written by `npm run (bench|bench:budgets) -- (--quick )?--write-docs` on (\d{4}-\d{2}-\d{2}); do not edit\. Node (v\d+\.\d+\.\d+), (\d+) CPUs, load average (\d+\.\d\d) at the start and (\d+\.\d\d) at the end, (\d+) s \((full run|quick run: [^)]+)\)\.$/.exec(
      line,
    );
  if (match === null) return undefined;
  const [, command, quick, date, nodeVersion, cpus, loadAtStart, loadAtEnd, seconds] = match as unknown as string[];
  const run = { command: command as BenchCommand, quick: quick !== undefined, date: date ?? '', nodeVersion: nodeVersion ?? '', cpus: Number(cpus), loadAtStart: loadAtStart ?? '', loadAtEnd: loadAtEnd ?? '', seconds: Number(seconds) };
  return headerLine(run) === line ? run : undefined;
}

export function renderSection(run: RunRecord, figures: readonly Figure[]): string {
  return [headerLine(run), '', ...tableLines(figures)].join('\n');
}

/** Throws, before a run of minutes, when docs/performance.md has no section for this command and Node major. */
export async function requireSection(command: BenchCommand): Promise<void> {
  between(await readFile(PERFORMANCE_DOC, 'utf8'), SECTION_KIND, sectionName(command, process.version));
}

/** Writes the run's section into docs/performance.md; its markers must be there (a new Node major's are added by hand). */
export async function writeSection(run: RunRecord, figures: readonly Figure[]): Promise<void> {
  const name = sectionName(run.command, run.nodeVersion);
  const doc = await readFile(PERFORMANCE_DOC, 'utf8');
  await writeFile(PERFORMANCE_DOC, replaceBetween(doc, SECTION_KIND, name, renderSection(run, figures)));
  console.log(`Written to docs/performance.md (section ${name}).`);
}

/** A row read back: its cells, unescaped. */
export interface Row {
  readonly name: string;
  readonly value: string;
  readonly target: string;
  readonly result: string;
}

/** A section's content read back; throws on anything its writer would not have written. */
export function parseSection(name: string, content: string): { run: RunRecord; rows: Row[] } {
  const [header, blank, titles, rule, ...lines] = content.trim().split('\n');
  const run = parseHeader(header ?? '');
  if (run === undefined) throw new Error(`${name}: its first line is not the line npm run bench writes: ${header}`);
  if (sectionName(run.command, run.nodeVersion) !== name) throw new Error(`${name}: written by ${run.command} on Node ${run.nodeVersion}, not what its name says`);
  if (blank !== '' || cellsOf(titles ?? '').join() !== TABLE_HEADERS.join() || !/^\|(-+\|)+$/.test(rule ?? '')) throw new Error(`${name}: no results table under its header`);
  const rows = lines.map((line) => {
    const [rowName = '', value = '', target = '', result = '', ...extra] = cellsOf(line);
    if (extra.length > 0 || !line.startsWith('|')) throw new Error(`${name}: not a row of four cells: ${line}`);
    return { name: rowName, value, target, result };
  });
  return { run, rows };
}

/** A Markdown row's cells, split on the pipes tableLines does not escape. */
function cellsOf(line: string): string[] {
  return line
    .trim()
    .replace(/^\|/, '')
    .replace(/\|$/, '')
    .split(/(?<!\\)\|/)
    .map((cell) => cell.trim().replaceAll('\\|', '|'));
}

/** Every figure name `npm run bench` and `npm run bench:budgets` can report. */
export function benchFigureNames(): Set<string> {
  return new Set([...webhookFigureNames(), ...webhookMemoryFigureNames(), ...sidecarFigureNames(), ...listenerFloodFigureNames(), ...WATCH_WEEK_FIGURES, CHECK_FIGURE]);
}
