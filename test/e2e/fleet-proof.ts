/**
 * `npm run proof`: a fleet of Envoy pods rolled behind each load-balancer model (test/e2e/fleet/), with the
 * fixed rule below and above the model's lag, the observed rule, and no sidecar (the control); see
 * test/e2e/fleet/proof-tables.ts for the rows and docs/proof.md for how to read the tables. It prints each
 * table and writes it into docs/proof.md between its markers (`<!-- proof:<table>:begin -->` ... `end`),
 * with a line saying how it was produced. Durations are cluster time, run `--scale` times faster.
 *
 *   npm run proof                                    every table, 20 pods, scale 20, written to docs/proof.md
 *   npm run proof -- --table=lb-models               one table (lb-models, mixed, long-lived, haproxy, risk)
 *   npm run proof -- --replicas=8 --scale=10 --print-only   a smaller or slower fleet (written only with --any-scale)
 *   npm run proof -- --print-only --rows=NLB         rows whose key contains NLB, printed, docs untouched
 */
import { execFileSync } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import os from 'node:os';
import { parseArgs } from 'node:util';
import { replaceBetween, rowsOf, runRow, TABLE_NAMES, tableHeader, tableRow, type TableName } from './fleet/proof-tables.js';

const DOC = new URL('../../docs/proof.md', import.meta.url);
/** Real ms between two requests of a busy client. */
const THINK_MS = 25;

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      replicas: { type: 'string', default: '20' },
      scale: { type: 'string', default: '20' },
      table: { type: 'string', default: 'all' },
      rows: { type: 'string' },
      'print-only': { type: 'boolean', default: false },
      'any-scale': { type: 'boolean', default: false },
    },
  });
  const replicas = Number(values.replicas);
  const scale = Number(values.scale);
  refuseOtherScale(replicas, scale, values['print-only'] || values.rows !== undefined || values['any-scale']);
  // Two tables have scripts of their own (a real HAProxy; a Monte Carlo of the watch), run after the fleet's.
  const apart = Object.keys(SCRIPTS_APART).filter((table) => values.table === 'all' || values.table === table);
  const tables: TableName[] = values.table === 'all' ? [...TABLE_NAMES] : apart.length > 0 ? [] : [values.table as TableName];
  for (const table of tables) if (!TABLE_NAMES.includes(table)) throw new Error(`--table: ${table} is none of all, ${[...TABLE_NAMES, ...Object.keys(SCRIPTS_APART)].join(', ')}`);
  const runApart = (): void => {
    for (const table of apart) {
      console.log(`\n${table}: ${SCRIPTS_APART[table]}`);
      execFileSync(process.execPath, ['--import', 'tsx', SCRIPTS_APART[table] ?? '', ...(values['print-only'] ? ['--print-only'] : [])], { stdio: 'inherit' });
    }
  };
  if (tables.length === 0) return runApart();
  const write = !values['print-only'] && values.rows === undefined;
  const machine = `nproc ${os.availableParallelism()}, Node ${process.version}`;
  console.log(`Fleet rollout proof: ${replicas} pods, maxSurge 25% / maxUnavailable 25%, scale ${scale}; ${machine}`);
  let doc = write ? await readFile(DOC, 'utf8') : '';
  const started = performance.now();
  for (const table of tables) {
    const tableStarted = performance.now();
    const rows = rowsOf(table).filter((row) => values.rows === undefined || row.key.join(' ').includes(values.rows));
    const lines = tableHeader(table);
    console.log(`\n${table}\n\n${lines.join('\n')}`);
    const loadBefore = os.loadavg()[0] ?? 0;
    let loopP99 = 0;
    for (const row of rows) {
      const report = await runRow(row, { replicas, scale, thinkMs: THINK_MS });
      loopP99 = Math.max(loopP99, report.loopDelayMs.p99);
      const line = tableRow(row, report);
      lines.push(line);
      console.log(line);
    }
    const took = Math.round((performance.now() - tableStarted) / 1000);
    const command = `npm run proof${replicas === 20 && scale === 20 ? '' : ` -- --replicas=${replicas} --scale=${scale}`}`;
    const load = `load average ${loadBefore.toFixed(1)} at its start, ${(os.loadavg()[0] ?? 0).toFixed(1)} at its end`;
    const delay = `event-loop delay p99 at most ${Math.round(loopP99)} ms (${((loopP99 * scale) / 1000).toFixed(1)} s of cluster time)`;
    const produced = `Produced by \`${command}\` (${replicas} pods, scale ${scale}) on ${new Date().toISOString().slice(0, 10)}, ${machine}; ${took} s for this table, ${load}, ${delay}.`;
    if (loopP99 * scale > 2_000) console.warn(`warning: ${delay}: timers of the model ran late; is the machine busy (${load})?`);
    if (write) {
      doc = replaceBetween(doc, table, `${produced}\n\n${lines.join('\n')}`);
      await writeFile(DOC, doc);
    }
  }
  console.log(`\nRun time: ${Math.round((performance.now() - started) / 1000)} s${write ? '; written to docs/proof.md' : ''}`);
  runApart();
}

/** The scale docs/proof.md's fleet tables are committed at, which proof-tables.test.ts reads them as. */
const COMMITTED = { replicas: 20, scale: 20 };

/**
 * A table written at another scale would pass for the committed one (its rows read the same, its figures are not):
 * refused, unless it is only printed or asked for (--any-scale).
 */
function refuseOtherScale(replicas: number, scale: number, allowed: boolean): void {
  if (allowed || (replicas === COMMITTED.replicas && scale === COMMITTED.scale)) return;
  console.error(
    `npm run proof: docs/proof.md's tables are committed at ${COMMITTED.replicas} pods, scale ${COMMITTED.scale}; this run (${replicas} pods, scale ${scale}) would overwrite them. ` +
      'Add --print-only to see its figures, or --any-scale to write them anyway.',
  );
  process.exit(2);
}

/** The tables written by scripts of their own, by table name. */
const SCRIPTS_APART: Readonly<Record<string, string>> = {
  haproxy: 'test/e2e/haproxy-proof.ts',
  risk: 'test/e2e/lb-risk.ts',
};

await main();
