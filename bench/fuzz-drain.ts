/**
 * `npm run fuzz -- --drain`: the drain's model-based fault search (test/support/drain-model.ts) for longer than
 * `npm test` runs it: FUZZ_COUNT scenarios (default 300) from FUZZ_SEED, each run as written and at another pace
 * (brisk and leisurely in turn: PACES), so that a verdict does not hang on the machine's load. Prints how the drains
 * ended and every run whose invariants broke, with its scenario as JSON and its pace, to keep as a regression test
 * (KEPT in test/sidecar/drain-model.test.ts); exits 1 if any did.
 */
import fc from 'fast-check';
import { loadavg } from 'node:os';
import { PACES, problemsOf, runScenario, scenarioArbitrary, type Pace, type Scenario } from '../test/support/drain-model.js';

const COUNT = Number(process.env['FUZZ_COUNT'] ?? 300);
const SEED = Number(process.env['FUZZ_SEED'] ?? Date.now() % 2 ** 31);

const reasons = new Map<string, number>();
/** What the runs exercised: setups (transport, listener-heavy, trims) and events (hot restarts followed, path changes…). */
const exercised = new Map<string, number>();
const note = (what: string): void => void exercised.set(what, (exercised.get(what) ?? 0) + 1);
const EVENTS = ['envoy_hot_restarted', 'hot_restart_parent_holds', 'envoy_counters_reset', 'envoy_replaced', 'envoy_admin_address_lost', 'envoy_unmarked'];
let failedRuns = 0;
const started = performance.now();
let runs = 0;

async function runOnce(scenario: Scenario, pace: Pace): Promise<void> {
  runs += 1;
  const report = await runScenario(scenario, pace);
  note(`transport ${scenario.transport ?? 'tcp'}`);
  note(`pace ${pace.name}`);
  if ((scenario.extraListeners ?? 0) > 0) note('listener-heavy');
  for (const step of scenario.steps) if (step.kind === 'hot-restart' || step.kind === 'socket-path' || step.kind === 'parent-exit') note(`step ${step.kind}`);
  for (const trim of [scenario.trim, ...scenario.steps.map((step) => ('trim' in step ? step.trim : undefined))]) if (trim !== undefined && trim !== 'none') note(`trim ${trim}`);
  for (const line of report.log) {
    const event = String(line.fields['event']);
    if (event === 'drain_finished') reasons.set(String(line.fields['reason']), (reasons.get(String(line.fields['reason'])) ?? 0) + 1);
    if (EVENTS.includes(event)) note(`logged ${event}`);
  }
  const problems = problemsOf(report);
  if (problems.length === 0) return;
  failedRuns += 1;
  console.log(`\nrun with problems (pace: ${pace.name}):\n  ${problems.join('\n  ')}\n  scenario: ${JSON.stringify(scenario)}`);
}

for (const [index, scenario] of fc.sample(scenarioArbitrary, { numRuns: COUNT, seed: SEED }).entries()) {
  for (const pace of [PACES['as written'], index % 2 === 0 ? PACES.brisk : PACES.leisurely]) await runOnce(scenario, pace);
}
console.log(
  `\n${COUNT} scenarios, ${runs} runs in ${((performance.now() - started) / 1000).toFixed(1)} s (FUZZ_SEED=${SEED}; Node ${process.version}; load average at the end ${loadavg()[0]?.toFixed(1)}); drains by how they ended:`,
);
for (const [reason, count] of [...reasons].sort((a, b) => b[1] - a[1])) console.log(`  ${reason.padEnd(20)} ${count}`);
console.log('exercised (runs or steps, and log lines):');
for (const [what, count] of [...exercised].sort()) console.log(`  ${what.padEnd(36)} ${count}`);
console.log(`runs with problems: ${failedRuns}`);
if (failedRuns > 0) process.exitCode = 1;
