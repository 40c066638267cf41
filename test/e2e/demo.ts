/**
 * `npm run demo`: the pod lifecycle, end to end, on this machine. The real webhook injects an Envoy pod, a
 * simulated kubelet runs it (the Envoy admin emulator standing in for Envoy, the real sidecar), clients
 * keep keep-alive connections busy, and one of these happens under that load:
 *
 *   npm run demo                                   the pod is deleted (a rollout step)
 *   npm run demo -- --scenario=sidecar-restart     the kubelet restarts the sidecar alone (liveness failure)
 *   npm run demo -- --scenario=modify-only         deletion with MODIFY_ONLY listeners (Envoy Gateway's)
 *
 * Add `--unprotected` to see the same without the protection, and what it costs: a deletion runs the pod
 * without the shutdown-manager (Envoy gets SIGTERM at once: requests are lost), modify-only leaves Envoy its
 * default drain flags (requests lost), sidecar-restart gives the sidecar the old draining hook (a healthy pod
 * drained). Prints what happened. Exit status: 0 when the outcome is the one the scenario shows (no loss, or
 * with --unprotected the loss), 1 when it is not, 2 on a usage error.
 */
import { parseArgs } from 'node:util';
import { closestName } from '../../src/config/settings.js';
import { httpRequest } from '../support/connections.js';
import type { TimelineEvent } from './kubelet.js';
import type { LoadReport } from './load.js';
import { FAST_DRAIN_DEFAULTS, shortWaitWindow, startPod, withDrainingSidecarHook, withoutSidecar, type RunningPod } from './rollout.js';

const SCENARIOS = ['deletion', 'sidecar-restart', 'modify-only'] as const;
type Scenario = (typeof SCENARIOS)[number];

const FLAGS = { scenario: { type: 'string', default: 'deletion' }, unprotected: { type: 'boolean', default: false } } as const;
const FLAG_LIST = `flags: --scenario=${SCENARIOS.join('|')}, --unprotected`;

/** A usage error: one line naming the bad flag or value, exit 2, no stack trace (a demo is a first contact). */
function usageError(message: string): never {
  process.stderr.write(`npm run demo: ${message}\n`);
  process.exit(2);
}

function options(): { scenario: Scenario; unprotected: boolean } {
  let values;
  try {
    ({ values } = parseArgs({ args: process.argv.slice(2), options: FLAGS, strict: true, allowPositionals: false }));
  } catch (error) {
    usageError(flagProblem(error instanceof Error ? error.message : String(error)));
  }
  const scenario = SCENARIOS.find((name) => name === values.scenario);
  if (scenario === undefined) {
    const closest = closestName(String(values.scenario), SCENARIOS);
    usageError(`unknown --scenario=${String(values.scenario)}${closest === undefined ? '' : `; did you mean --scenario=${closest}?`} (expected one of ${SCENARIOS.join(', ')})`);
  }
  return { scenario, unprotected: values.unprotected === true };
}

/** parseArgs's reason, said in one line with the flag it names, and the closest known flag when it is a typo. */
function flagProblem(reason: string): string {
  const unknown = /^Unknown option '(-[^']*)'/.exec(reason)?.[1];
  if (unknown !== undefined) {
    const closest = closestName(unknown.replace(/^--?/, ''), Object.keys(FLAGS));
    return `unknown flag ${unknown}${closest === undefined ? '' : `; did you mean --${closest}?`} (${FLAG_LIST})`;
  }
  const positional = /^Unexpected argument '([^']*)'/.exec(reason)?.[1];
  if (positional !== undefined) return `unexpected argument "${positional}": the demo takes flags only (${FLAG_LIST})`;
  return `${reason.split('\n')[0] ?? reason} (${FLAG_LIST})`;
}

function printTimeline(events: readonly TimelineEvent[], title: string): void {
  console.log(`\n${title}`);
  for (const event of events) {
    console.log(`  ${String(Math.max(0, event.atMs)).padStart(6)}  ${event.container.padEnd(17)} ${event.event}${event.detail ? `  ${event.detail}` : ''}`);
  }
}

function printTraffic(load: LoadReport): void {
  console.log('\nTraffic:');
  console.log(`  requests served: ${load.requests} (this pod ${load.byReplica.first}, other replica ${load.byReplica.second})`);
  console.log(`  requests failed: ${load.failures.length}`);
  if (load.failures.length > 0) console.log(`    ${[...new Set(load.failures)].slice(0, 5).join('\n    ')}`);
}

async function envoyMutations(pod: RunningPod): Promise<string[]> {
  const answer = await httpRequest(`http://127.0.0.1:${pod.simulated.envoy.admin}/emulator/requests`);
  return (JSON.parse(answer.body) as { method: string; path: string }[]).filter((r) => r.method === 'POST').map((r) => r.path);
}

async function sidecarRestart(unprotected: boolean): Promise<number> {
  console.log(`The kubelet restarts the shutdown-manager container alone (a failed liveness probe), under load from 8 clients.`);
  console.log(unprotected ? 'Unprotected: the sidecar keeps the old preStop GET /shutdown, which starts a drain.\n' : 'Its preStop is GET /wait: it joins a drain, never starts one.\n');
  const edit = unprotected ? (pod: Parameters<typeof shortWaitWindow>[0]) => shortWaitWindow(withDrainingSidecarHook(pod)) : shortWaitWindow;
  const pod = await startPod({ edit, annotations: { 'shutdown-manager.io/recover-envoy': 'false' } });
  try {
    const load = pod.startLoad(8);
    await load.warmedUp(200);
    const restart = await pod.simulated.restartContainer('shutdown-manager');
    await new Promise((resolve) => setTimeout(resolve, 500));
    printTimeline(restart.timeline, 'Restart timeline (ms since the kubelet began):');
    const ready = (await httpRequest(`http://127.0.0.1:${pod.simulated.envoy.admin}/ready`)).status;
    console.log(`\nEnvoy after the restart: admin mutations received ${JSON.stringify(await envoyMutations(pod))}, /ready ${ready}`);
    const report = await load.stop();
    printTraffic(report);
    const drained = report.byReplica.second > 0 || ready !== 200;
    console.log(drained ? '\nA healthy pod was taken out of service.' : '\nEnvoy kept serving: nothing was drained.');
    return drained === unprotected ? 0 : 1;
  } finally {
    await pod.close();
  }
}

async function deletion(modifyOnly: boolean, unprotected: boolean): Promise<number> {
  const annotations: Record<string, string> = { 'shutdown-manager.io/termination-grace-period': modifyOnly ? '4' : '10' };
  if (unprotected) annotations['shutdown-manager.io/envoy-drain-flags'] = 'false';
  // A plain deletion is unprotected without the sidecar at all: Envoy's own drain flags matter only once something drains it.
  const bare = unprotected && !modifyOnly;
  console.log(modifyOnly ? 'Deleting an Envoy pod whose listeners are MODIFY_ONLY (they ignore /healthcheck/fail), under load from 8 clients.' : 'Rolling one Envoy pod under load from 16 keep-alive clients.');
  if (modifyOnly) console.log(unprotected ? "Unprotected: Envoy keeps its default drain (gradual over 600 s).\n" : 'Envoy gets --drain-strategy immediate and --drain-time-s from the injector.\n');
  if (bare) console.log('Unprotected: the same pod without the shutdown-manager, as without this project: Envoy gets SIGTERM at once and closes every connection.\n');
  console.log(`Webhook drain defaults for the demo: ${FAST_DRAIN_DEFAULTS.join(' ')} (a pod may override them)\n`);
  const kubelet = { ...(modifyOnly ? { envoyConfig: ['--http-drain-type=modify_only'] } : {}), ...(bare ? { withoutSidecar: true } : {}) };
  const pod = await startPod({ annotations, kubelet, ...(bare ? { edit: withoutSidecar } : {}) });
  try {
    const load = modifyOnly ? pod.startLoad(8, { path: '/delay/150' }) : pod.startLoad(16);
    await load.warmedUp(modifyOnly ? 16 : 100);
    const envoy = pod.pod.spec?.containers.find((c) => c.name === 'envoy');
    const sidecar = pod.pod.spec?.containers.find((c) => c.name === 'shutdown-manager');
    console.log(bare ? 'Injected by the webhook, then the shutdown-manager and its hooks removed:' : 'Injected by the webhook:');
    console.log(`  envoy args:   ${envoy?.args?.join(' ')}`);
    console.log(`  sidecar args: ${sidecar === undefined ? '(no shutdown-manager container)' : (sidecar.args?.join(' ') ?? '')}`);
    console.log(`  terminationGracePeriodSeconds: ${pod.pod.spec?.terminationGracePeriodSeconds}`);
    const termination = await pod.simulated.terminate();
    const startedAt = termination.startedAt;
    const since = (iso: unknown): number => Math.round(Date.parse(String(iso)) - (performance.timeOrigin + startedAt));
    const drainLines = pod.simulated.sidecarLogs.filter((l) => ['drain_started', 'poll', 'drain_finished'].includes(String(l.event)));
    const events = [
      ...termination.timeline,
      ...drainLines.map((l) => ({
        atMs: since(l.time),
        container: 'shutdown-manager',
        event: String(l.event),
        ...(l.event === 'poll' ? { detail: `open connections: ${String(l.open_connections)}` } : {}),
      })),
    ].sort((a, b) => a.atMs - b.atMs) as TimelineEvent[];
    printTimeline(events, 'Termination timeline (ms since the pod was deleted):');
    const report = await load.stop();
    printTraffic(report);
    const lastClose = report.firstReplicaLastCloseAt;
    if (lastClose !== undefined) console.log(`  last client connection to the old pod closed at ${Math.round(lastClose - startedAt)} ms`);
    console.log(`  pod gone after ${termination.podGoneAtMs} ms of a ${termination.gracePeriodMs} ms grace period`);
    console.log(report.failures.length === 0 ? '\nZero requests lost.' : `\n${report.failures.length} requests lost.`);
    if (unprotected) console.log(report.failures.length > 0 ? 'That is the loss the shutdown-manager prevents: run it without --unprotected.' : 'Expected a loss without the protection, and saw none.');
    return (report.failures.length > 0) === unprotected ? 0 : 1;
  } finally {
    await pod.close();
  }
}

const { scenario, unprotected } = options();
process.exitCode = scenario === 'sidecar-restart' ? await sidecarRestart(unprotected) : await deletion(scenario === 'modify-only', unprotected);
