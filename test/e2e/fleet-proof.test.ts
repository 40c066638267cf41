/**
 * `npm run proof` and the risk table's script refuse to write docs/proof.md's tables at another scale than the
 * committed one (issue 33, item 7): such a table would read like the committed one, with other figures.
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { describe, test } from 'node:test';
import { runNode } from '../support/process.js';

const DOC = new URL('../../docs/proof.md', import.meta.url);
const ROOT = new URL('../..', import.meta.url).pathname;

describe('the proof refuses to overwrite its committed tables at another scale', () => {
  test('the fleet proof at 4 pods: exit 2 before any run, the tables untouched, the way out named', async () => {
    const before = await readFile(DOC, 'utf8');
    const run = await runNode(['--import', 'tsx', 'test/e2e/fleet-proof.ts', '--table=lb-models', '--replicas=4'], { cwd: ROOT, timeoutMs: 30_000 });
    assert.equal(run.code, 2, run.stderr);
    assert.match(run.stderr, /committed at 20 pods, scale 20; this run \(4 pods, scale 20\) would overwrite them\. Add --print-only .*or --any-scale/);
    assert.equal(await readFile(DOC, 'utf8'), before);
  });

  test('the risk table with fewer runs: printed, not written (exit 2); control: with --print-only it exits 0', async () => {
    const before = await readFile(DOC, 'utf8');
    const fewer = await runNode(['--import', 'tsx', 'test/e2e/lb-risk.ts', '--runs=2', '--rules=shipped'], { cwd: ROOT, timeoutMs: 60_000 });
    assert.equal(fewer.code, 2, fewer.stderr);
    assert.match(fewer.stderr, /not written: docs\/proof\.md's risk table is committed at \d+ runs a cell/);
    assert.match(fewer.stdout, /Produced by `node --import tsx test\/e2e\/lb-risk\.ts --runs=2 --rules=shipped`/, 'the figures are still printed');
    const printed = await runNode(['--import', 'tsx', 'test/e2e/lb-risk.ts', '--runs=2', '--rules=shipped', '--print-only'], { cwd: ROOT, timeoutMs: 60_000 });
    assert.equal(printed.code, 0, printed.stderr);
    assert.equal(await readFile(DOC, 'utf8'), before);
  });
});
