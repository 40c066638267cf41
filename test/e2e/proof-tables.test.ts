/**
 * docs/proof.md says what `npm run proof` gives; this test fails when the code no longer gives it. It reads the
 * committed tables, checks that they have exactly the rows the proof runs (every table), and runs the rows of
 * the load-balancer table again on a smaller fleet: 4 pods instead of 20, with as many clients per pod
 * (CLIENTS_FOR_REPLICAS), four rows at a time (one model's four drains), time still run 20 times faster. For
 * each row it compares the verdict of the committed table with the run's: whether any request/response was
 * lost (the loss columns together), and whether any pod was SIGKILLed. A row that lost in the table gets up to
 * three runs to lose again (its losses are a few random events on 4 pods); a row that lost nothing must lose
 * nothing in its one run, unless the run's event loop stalled past STALL_MS (a busy machine: a SIGKILL can then
 * beat the sidecar's deadline), when it runs again, up to three times. Each loss column's own zero/non-zero is not compared: where a row loses, a column with
 * a handful of losses in one run has none in another (docs/proof.md, "What the test checks").
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { describe, it } from 'node:test';
import { checkedCell, patternOf, readPatterns, rowsOf, runRow, TABLE_NAMES, type Row, type RowPattern } from './fleet/proof-tables.js';
import { runsAlone } from '../support/exclusive.js';

// It loads or times the machine: never beside another such file (see test/support/exclusive.ts).
runsAlone();

const DOC = new URL('../../docs/proof.md', import.meta.url);
const REPLICAS = 4;
const SCALE = 20;
/** Rows run at once: the fleets share the process's one thread, and 4 small fleets load it less than the proof's one of 20. */
const AT_ONCE = 4;
/** Runs a row that lost in the committed table gets to lose again (and a row run on a stalled machine, to run again). */
const ATTEMPTS = 3;
/**
 * Real ms of event-loop stall past which a run's verdict is not the code's: half the 450 ms (9 s of cluster time,
 * at scale 20) between the sidecar's deadline and the kubelet's SIGKILL, which a stall can eat.
 */
const STALL_MS = 200;

/** A row's verdict: any loss among the request columns, and any pod killed. */
function verdict(pattern: RowPattern): { lost: boolean; killed: boolean } {
  const entries = Object.entries(pattern.losses);
  return {
    lost: entries.some(([title, value]) => title !== 'killed' && value === 'non-zero'),
    killed: pattern.losses['killed'] === 'non-zero',
  };
}

describe('docs/proof.md matches what the proof gives', { timeout: 200_000 }, () => {
  it('has exactly the rows the proof runs, in every table', async () => {
    const doc = await readFile(DOC, 'utf8');
    for (const table of TABLE_NAMES) {
      assert.deepEqual(
        readPatterns(table, doc).map((row) => row.key),
        rowsOf(table).map((row) => row.key.join(' | ')),
        `docs/proof.md table ${table}: rows differ from the proof's (run npm run proof)`,
      );
    }
  });

  it('load-balancer models: each row loses (or not) and kills (or not) as the committed table says, at 4 pods', async () => {
    const doc = await readFile(DOC, 'utf8');
    const table = readPatterns('lb-models', doc);
    const written = new Map(table.map((row) => [row.key, verdict(row)]));
    // Rows whose verdict varies between runs are named in the code (proof-tables.ts VARIES) and in the table alike.
    assert.deepEqual(
      table.map((row) => `${row.key}: ${row.checked ?? '?'}`),
      rowsOf('lb-models').map((row) => `${row.key.join(' | ')}: ${checkedCell(row)}`),
      'docs/proof.md: the rows whose verdict is checked differ from the code (run npm run proof)',
    );
    const rows = rowsOf('lb-models').filter((row) => row.varies === undefined);
    const mismatches: string[] = [];
    const settings = { replicas: REPLICAS, scale: SCALE, thinkMs: 25 };
    const check = async (row: Row, attempt: number): Promise<void> => {
      const report = await runRow(row, settings);
      const key = row.key.join(' | ');
      assert.equal(report.complete, true, `${key}: the rollout did not complete`);
      const got = verdict(patternOf(row, report));
      const expected = written.get(key);
      const matches = expected !== undefined && got.lost === expected.lost && got.killed === expected.killed;
      // A losing row's losses are a few random events on 4 pods: it gets up to ATTEMPTS runs to show one.
      if (expected?.lost === true && !got.lost && got.killed === expected.killed && attempt < ATTEMPTS) return check(row, attempt + 1);
      // A run during which the process's one thread stalled long enough for the kubelet's SIGKILL to beat the
      // sidecar's deadline (their margin is 450 ms of real time) says something of the machine, not of the code.
      if (!matches && report.loopDelayMs.max > STALL_MS && attempt < ATTEMPTS) return check(row, attempt + 1);
      if (!matches) {
        const losses = report.kinds.map((kind) => `${kind.name} ${kind.failed}/${kind.ok}`).join(', ');
        const delay = `event-loop delay p99 ${Math.round(report.loopDelayMs.p99)} ms, max ${Math.round(report.loopDelayMs.max)} ms`;
        mismatches.push(`${key}: table says ${JSON.stringify(expected)}, run ${attempt} gave ${JSON.stringify(got)} (${losses}; ${delay})`);
      }
    };
    for (let start = 0; start < rows.length; start += AT_ONCE) {
      await Promise.all(rows.slice(start, start + AT_ONCE).map((row) => check(row, 1)));
    }
    assert.deepEqual(mismatches, [], `docs/proof.md no longer matches the code:\n${mismatches.join('\n')}`);
  });
});
