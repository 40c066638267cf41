/**
 * `npm run demo`: one rollout step, end to end, on this machine. The real webhook injects an Envoy pod,
 * a simulated kubelet runs it (the Envoy admin emulator standing in for Envoy, the real sidecar), clients
 * keep keep-alive connections busy, and the pod is deleted under that load. Prints what happened.
 */
import { FAST_DRAIN_DEFAULTS, runRollout } from './rollout.js';

const connections = 16;
console.log(`Rolling one Envoy pod under load from ${connections} keep-alive clients.`);
console.log(`Webhook drain defaults for the demo: ${FAST_DRAIN_DEFAULTS.join(' ')} (a pod may override them)\n`);

const result = await runRollout({ connections, annotations: { 'shutdown-manager.io/termination-grace-period': '10' } });

const sidecar = result.pod.spec?.containers.find((c) => c.name === 'shutdown-manager');
console.log('Injected by the webhook:');
console.log(`  sidecar args: ${sidecar?.args?.join(' ')}`);
console.log(`  terminationGracePeriodSeconds: ${result.pod.spec?.terminationGracePeriodSeconds}\n`);

console.log('Termination timeline (ms since the pod was deleted):');
const drainLines = result.sidecarLogs.filter((l) => ['drain_started', 'poll', 'drain_finished'].includes(String(l.event)));
const startedAt = result.termination.startedAt;
const since = (iso: unknown): number => Math.round(Date.parse(String(iso)) - (performance.timeOrigin + startedAt));
const events = [
  ...result.termination.timeline.map((e) => ({ atMs: e.atMs, text: `${e.container.padEnd(17)} ${e.event}${e.detail ? `  ${e.detail}` : ''}` })),
  ...drainLines.map((l) => ({
    atMs: since(l.time),
    text: `${'shutdown-manager'.padEnd(17)} ${String(l.event)}${l.event === 'poll' ? `  open connections: ${String(l.open_connections)}` : ''}`,
  })),
].sort((a, b) => a.atMs - b.atMs);
for (const event of events) console.log(`  ${String(Math.max(0, event.atMs)).padStart(6)}  ${event.text}`);

const lastClose = result.load.firstReplicaLastCloseAt;
console.log('\nTraffic:');
console.log(`  requests served: ${result.load.requests} (old pod ${result.load.byReplica.first}, other replica ${result.load.byReplica.second})`);
console.log(`  requests failed: ${result.load.failures.length}`);
if (lastClose !== undefined) console.log(`  last client connection to the old pod closed at ${Math.round(lastClose - startedAt)} ms`);
console.log(`  pod gone after ${result.termination.podGoneAtMs} ms of a ${result.termination.gracePeriodMs} ms grace period`);
console.log(result.load.failures.length === 0 ? '\nZero connections lost.' : `\nFailures:\n  ${result.load.failures.join('\n  ')}`);
process.exitCode = result.load.failures.length === 0 ? 0 : 1;
