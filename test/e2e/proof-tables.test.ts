/**
 * docs/proof.md says what `npm run proof` gives; this test fails when the code no longer gives it. It reads the
 * committed tables, checks that they have exactly the rows the proof runs (every table), and runs the rows of
 * the load-balancer table again on a smaller fleet: 4 pods instead of 20, with as many clients per pod
 * (CLIENTS_FOR_REPLICAS), four rows at a time (one model's four drains), time still run 20 times faster. For
 * each row it compares the verdict of the committed table with the run's: whether any request/response was
 * lost (the loss columns summed), and whether any pod was SIGKILLed. Each loss column's own zero/non-zero is
 * not compared: where a row loses, a column with a handful of losses in one run has none in another (see
 * docs/proof.md, "What the test checks"); a row's verdict was the same in every run we made.
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { describe, it } from 'node:test';
import { patternOf, readPatterns, rowsOf, runRow, TABLE_NAMES, type RowPattern } from './fleet/proof-tables.js';

const DOC = new URL('../../docs/proof.md', import.meta.url);
const REPLICAS = 4;
const SCALE = 20;
/** Rows run at once: the fleets share the process's one thread, and 4 small fleets load it less than the proof's one of 20. */
const AT_ONCE = 4;

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
    const written = new Map(readPatterns('lb-models', doc).map((row) => [row.key, verdict(row)]));
    const rows = rowsOf('lb-models');
    const mismatches: string[] = [];
    for (let start = 0; start < rows.length; start += AT_ONCE) {
      const batch = rows.slice(start, start + AT_ONCE);
      const reports = await Promise.all(batch.map((row) => runRow(row, { replicas: REPLICAS, scale: SCALE, thinkMs: 25 })));
      batch.forEach((row, index) => {
        const report = reports[index];
        assert.ok(report !== undefined);
        assert.equal(report.complete, true, `${row.key.join(' | ')}: the rollout did not complete`);
        const got = verdict(patternOf(row, report));
        const expected = written.get(row.key.join(' | '));
        if (expected === undefined || got.lost !== expected.lost || got.killed !== expected.killed) {
          const losses = report.kinds.map((kind) => `${kind.name} ${kind.failed}/${kind.ok}`).join(', ');
          mismatches.push(`${row.key.join(' | ')}: table says ${JSON.stringify(expected)}, run gave ${JSON.stringify(got)} (${losses})`);
        }
      });
    }
    assert.deepEqual(mismatches, [], `docs/proof.md no longer matches the code:\n${mismatches.join('\n')}`);
  });
});
