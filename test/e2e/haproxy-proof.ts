/**
 * Pod deletions behind a real HAProxy (test/e2e/haproxy/): every scenario under every rule (the fixed rule below and
 * above HAProxy's DOWN time, the observed rule, no sidecar), printed as a markdown table and written into
 * docs/proof.md between `<!-- proof:haproxy:begin -->` and `<!-- proof:haproxy:end -->`, with a line saying how it
 * was produced. Needs `haproxy` (Debian package haproxy, 2.6) and `npm run build`; wrk, hey and h2load (packages wrk,
 * hey, nghttp2-client) where installed, their rows skipped with the reason otherwise.
 *
 *   node --import tsx test/e2e/haproxy-proof.ts                       every row, written to docs/proof.md
 *   node --import tsx test/e2e/haproxy-proof.ts --scenarios=a,d       some scenarios (keys), printed only
 *   node --import tsx test/e2e/haproxy-proof.ts --rules=observed      some rules, printed only
 *   node --import tsx test/e2e/haproxy-proof.ts --commit=HEAD         the sidecar built from a commit apart (git archive
 *                                                                     into a temporary directory), not from dist/
 */
import { execFileSync } from 'node:child_process';
import { mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { replaceBetween } from './fleet/proof-tables.js';
import { haproxyUnavailable, haproxyVersion } from './haproxy/haproxy.js';
import { RULE_NAMES, SCENARIOS, scenarioUnavailable, type RuleName, type RunOptions } from './haproxy/scenarios.js';
import { runRow, tableHeader, tableRow } from './haproxy/table.js';
import { REPO_ROOT } from '../support/process.js';

const DOC = join(REPO_ROOT, 'docs/proof.md');
const COMMAND = 'node --import tsx test/e2e/haproxy-proof.ts';

function git(...args: string[]): string {
  return execFileSync('git', ['-C', REPO_ROOT, ...args], { encoding: 'utf8' }).trim();
}

/** The sidecar of `commit`, built apart: git archive into a temporary directory, node_modules linked, npm run build. */
async function buildCommit(commit: string): Promise<{ entry: string; directory: string }> {
  const directory = await mkdtemp(join(os.tmpdir(), 'esm-haproxy-proof-'));
  execFileSync('bash', ['-c', `git -C "$1" archive "$2" | tar -x -C "$3"`, 'bash', REPO_ROOT, commit, directory]);
  await symlink(join(REPO_ROOT, 'node_modules'), join(directory, 'node_modules'));
  console.log(`Building the sidecar of ${commit} in ${directory}...`);
  execFileSync('npm', ['run', '-s', 'build'], { cwd: directory, stdio: ['ignore', 'ignore', 'inherit'] });
  return { entry: join(directory, 'dist/entry.cjs'), directory };
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      scenarios: { type: 'string' },
      rules: { type: 'string' },
      commit: { type: 'string' },
      'print-only': { type: 'boolean', default: false },
    },
  });
  const unavailable = haproxyUnavailable();
  if (unavailable !== undefined) {
    console.error(`${unavailable}: nothing to run`);
    process.exitCode = 1;
    return;
  }
  const scenarios = values.scenarios === undefined ? SCENARIOS : SCENARIOS.filter((scenario) => values.scenarios?.split(',').includes(scenario.key));
  const rules = values.rules === undefined ? RULE_NAMES : RULE_NAMES.filter((rule) => values.rules?.split(',').includes(rule));
  if (scenarios.length === 0 || rules.length === 0) throw new Error(`no scenario or rule selected; scenarios: ${SCENARIOS.map((s) => s.key).join(', ')}; rules: ${RULE_NAMES.join(', ')}`);
  const write = !values['print-only'] && values.scenarios === undefined && values.rules === undefined;

  const head = git('rev-parse', '--short', 'HEAD');
  let built: { entry: string; directory: string } | undefined;
  let sidecar: string;
  if (values.commit !== undefined) {
    built = await buildCommit(values.commit);
    sidecar = `the sidecar built from commit ${git('rev-parse', '--short', values.commit)} apart`;
  } else {
    const dirty = git('status', '--porcelain', '--', 'src').split('\n').filter((line) => line !== '').length;
    sidecar = `the sidecar of dist/ built from this checkout (HEAD ${head}${dirty === 0 ? '' : `, with ${dirty} uncommitted changes in src/`})`;
  }
  const options: RunOptions = built === undefined ? {} : { sidecarEntry: built.entry };
  const machine = `nproc ${os.availableParallelism()}, Node ${process.version}, ${haproxyVersion()}`;
  console.log(`Pod deletions behind HAProxy; ${machine}; ${sidecar}\n`);
  const lines = tableHeader();
  console.log(lines.join('\n'));
  const skipped: string[] = [];
  const started = performance.now();
  const loadBefore = os.loadavg()[0] ?? 0;
  let loopP99 = 0;
  try {
    for (const scenario of scenarios) {
      const reason = scenarioUnavailable(scenario);
      if (reason !== undefined) {
        skipped.push(`${scenario.label}: skipped, ${reason}`);
        console.log(`(${scenario.label}: skipped, ${reason})`);
        continue;
      }
      for (const rule of rules as readonly RuleName[]) {
        const reports = await runRow(scenario, rule, options);
        for (const report of reports) {
          loopP99 = Math.max(loopP99, report.loopDelayMs.p99);
          if (report.failedBeforeDeletion > 0) console.warn(`warning: ${scenario.key} ${rule}: ${report.failedBeforeDeletion} requests failed before the deletion`);
          if (report.lagMs !== undefined && report.lagMs !== null && report.loggedLagMs !== report.lagMs) {
            console.warn(`warning: ${scenario.key} ${rule}: /drain's lag ${report.lagMs} ms, the drain_finished line's ${String(report.loggedLagMs)}`);
          }
        }
        const line = tableRow(scenario, rule, reports);
        lines.push(line);
        console.log(line);
      }
    }
  } finally {
    if (built !== undefined) await rm(built.directory, { recursive: true, force: true });
  }
  const took = Math.round((performance.now() - started) / 1000);
  const load = `load average ${loadBefore.toFixed(1)} at its start, ${(os.loadavg()[0] ?? 0).toFixed(1)} at its end`;
  const command = values.commit === undefined ? COMMAND : `${COMMAND} --commit=${values.commit}`;
  const produced =
    `Produced by \`${command}\` on ${new Date().toISOString().slice(0, 10)}, ${machine}, with ${sidecar}; ` +
    `${took} s for this table, ${load}, event-loop delay p99 at most ${Math.round(loopP99)} ms (the emulators' and clients' process).`;
  const body = [produced, ...skipped.map((line) => `\n${line}`), '', ...lines].join('\n');
  console.log(`\n${produced}`);
  if (write) {
    await writeFile(DOC, replaceBetween(await readFile(DOC, 'utf8'), 'haproxy', body));
    console.log('Written to docs/proof.md');
  }
}

await main();
