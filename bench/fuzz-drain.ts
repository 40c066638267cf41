/**
 * `npm run fuzz -- --drain`: the drain's model-based fault search (test/support/drain-model.ts) for longer than
 * `npm test` runs it: FUZZ_COUNT runs (default 300) from FUZZ_SEED. Prints how the drains ended and every run
 * whose invariants broke, with its scenario as JSON to keep as a regression test (KEPT in
 * test/sidecar/drain-model.test.ts); exits 1 if any did.
 */
import fc from 'fast-check';
import { problemsOf, runScenario, scenarioArbitrary } from '../test/support/drain-model.js';

const COUNT = Number(process.env['FUZZ_COUNT'] ?? 300);
const SEED = Number(process.env['FUZZ_SEED'] ?? Date.now() % 2 ** 31);

const reasons = new Map<string, number>();
let failedRuns = 0;
const started = performance.now();
for (const scenario of fc.sample(scenarioArbitrary, { numRuns: COUNT, seed: SEED })) {
  const report = await runScenario(scenario);
  for (const line of report.log) {
    if (line.fields['event'] === 'drain_finished') reasons.set(String(line.fields['reason']), (reasons.get(String(line.fields['reason'])) ?? 0) + 1);
  }
  const problems = problemsOf(report);
  if (problems.length === 0) continue;
  failedRuns += 1;
  console.log(`\nrun with problems:\n  ${problems.join('\n  ')}\n  scenario: ${JSON.stringify(scenario)}`);
}
console.log(`\n${COUNT} runs in ${((performance.now() - started) / 1000).toFixed(1)} s (FUZZ_SEED=${SEED}); drains by how they ended:`);
for (const [reason, count] of [...reasons].sort((a, b) => b[1] - a[1])) console.log(`  ${reason.padEnd(20)} ${count}`);
console.log(`runs with problems: ${failedRuns}`);
if (failedRuns > 0) process.exitCode = 1;
