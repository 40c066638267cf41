/**
 * `npm run proof`: a fleet of Envoy pods rolled behind a load balancer, for each setting of the matrix:
 * deregistration lag 0, 10 s and 30 s, each with check-delay below, at and above it (drain-delay 0), and
 * the negative control without the sidecar (Envoy SIGTERMed at deletion, no preStop drain); then the same
 * for externalTrafficPolicy: Local; every client kind at once (HTTP/1.1, HTTP/2, gRPC server streams,
 * WebSocket, TCP). Then a WebSocket-heavy population with and without long-lived-grace. Prints two Markdown
 * tables (cluster seconds: durations are run `--scale` times faster and converted back).
 *
 *   npm run proof                          20 pods, scale 20
 *   npm run proof -- --replicas=8 --scale=10
 */
import os from 'node:os';
import { parseArgs } from 'node:util';
import { http1KeepAlive, rawTcp, type ClientKind } from './fleet/clients.js';
import { grpcServerStream, http2RequestResponse, webSocket } from './fleet/streaming-clients.js';
import type { LoadBalancerMode } from './fleet/load-balancer.js';
import { runFleet, type DrainSetting, type FleetReport } from './fleet/simulation.js';

interface Setting {
  readonly mode: LoadBalancerMode;
  readonly lagMs: number;
  readonly drain: DrainSetting;
}

const CHECK_INTERVAL_MS = 5_000;
const LB_POLL_INTERVAL_MS = 5_000;
const GRACE_PERIOD_S = 60;

function matrix(): Setting[] {
  const withDelays = (mode: LoadBalancerMode, lagMs: number, checkDelays: readonly number[]): Setting[] => [
    ...checkDelays.map((checkDelayMs) => ({ mode, lagMs, drain: { checkDelayMs, checkIntervalMs: CHECK_INTERVAL_MS } })),
    { mode, lagMs, drain: 'no-sidecar' as const },
  ];
  return [
    // Lag 0: nothing below it; "at" is 0, "above" 5 s.
    ...withDelays('cluster', 0, [0, 5_000]),
    ...withDelays('cluster', 10_000, [5_000, 10_000, 20_000]),
    ...withDelays('cluster', 30_000, [15_000, 30_000, 45_000]),
    ...withDelays('local', 10_000, [5_000, 20_000]),
  ];
}

const seconds = (ms: number): string => `${Math.round(ms / 100) / 10}`;

function drainLabel(drain: DrainSetting): string {
  return drain === 'no-sidecar' ? 'no sidecar (control)' : `check-delay ${seconds(drain.checkDelayMs)} s`;
}


/** A kind's report by name (the clients list decides the order, the table its columns). */
function kind(report: FleetReport, name: string): FleetReport['kinds'][number] | undefined {
  return report.kinds.find((candidate) => candidate.name === name);
}

const served = (report: FleetReport, name: string): string => `${kind(report, name)?.failed ?? '?'} / ${kind(report, name)?.ok ?? '?'}`;
const cut = (report: FleetReport, name: string): string => String(kind(report, name)?.cut ?? '?');

function releaseTimes(report: FleetReport): string {
  const times = report.releases.map((release) => release.shutdownToReleaseMs).sort((a, b) => a - b);
  if (times.length === 0) return '-';
  return `${seconds(times[Math.floor(times.length / 2)] ?? 0)} / ${seconds(times[times.length - 1] ?? 0)}`;
}

const rollout = (report: FleetReport): string => `${seconds(report.rolloutMs)}${report.complete ? '' : ' (incomplete)'}`;

function row(setting: Setting, report: FleetReport): string {
  const cells = [
    setting.mode === 'cluster' ? 'Cluster' : 'Local',
    `${seconds(setting.lagMs)} s`,
    drainLabel(setting.drain),
    served(report, HTTP1.name),
    served(report, HTTP2.name),
    `${kind(report, GRPC.name)?.failed ?? '?'} / ${cut(report, GRPC.name)}`,
    cut(report, WEBSOCKET.name),
    cut(report, TCP.name),
    releaseTimes(report),
    rollout(report),
  ];
  return `| ${cells.join(' | ')} |`;
}

const HEADER = [
  '| LB (externalTrafficPolicy) | lag | drain | HTTP/1.1 requests failed / served | HTTP/2 requests failed / served | gRPC streams failed / cut | WebSocket cut | TCP cut | /shutdown to release, s (median / max) | rollout, s |',
  '|---|---|---|---|---|---|---|---|---|---|',
];

const HTTP1 = http1KeepAlive();
const HTTP2 = http2RequestResponse();
const GRPC = grpcServerStream();
const WEBSOCKET = webSocket();
const TCP = rawTcp();

/** Every kind at once, in these numbers per rollout. */
const MIXED: readonly { kind: ClientKind; count: number }[] = [
  { kind: HTTP1, count: 24 },
  { kind: HTTP2, count: 16 },
  { kind: GRPC, count: 8 },
  { kind: WEBSOCKET, count: 8 },
  { kind: TCP, count: 8 },
];

/** The long-lived grace's table: mostly WebSockets, with some HTTP/1.1 to see that nothing else is lost. */
const WEBSOCKET_HEAVY: readonly { kind: ClientKind; count: number }[] = [
  { kind: WEBSOCKET, count: 40 },
  { kind: HTTP1, count: 16 },
];
const LONG_LIVED_GRACE_MS = 15_000;

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { replicas: { type: 'string', default: '20' }, scale: { type: 'string', default: '20' } } });
  const replicas = Number(values.replicas);
  const scale = Number(values.scale);
  const started = performance.now();
  console.log(`Fleet rollout proof: ${replicas} pods, maxSurge 25% / maxUnavailable 25%, scale ${scale} (cluster durations run ${scale}x faster)`);
  console.log(`Machine: ${os.cpus().length} CPUs (nproc ${os.availableParallelism()}), Node ${process.version}`);
  console.log(
    `Per pod: terminationGracePeriodSeconds ${GRACE_PERIOD_S}, check-interval ${seconds(CHECK_INTERVAL_MS)} s, drain-delay 0, min-open-connections 0; LB health check every ${seconds(LB_POLL_INTERVAL_MS)} s`,
  );
  console.log(`Clients: ${MIXED.map(({ kind: k, count }) => `${count} ${k.name}`).join(', ')}\n`);
  console.log(HEADER.join('\n'));
  const fleet = { replicas, scale, gracePeriodS: GRACE_PERIOD_S, thinkMs: 25, maxRealMs: 180_000 };
  for (const setting of matrix()) {
    const loadBalancer = { mode: setting.mode, deregistrationLagMs: setting.lagMs, pollIntervalMs: LB_POLL_INTERVAL_MS };
    console.log(row(setting, await runFleet({ ...fleet, loadBalancer, drain: setting.drain, clients: MIXED })));
  }

  console.log(`\nLong-lived connections: ${WEBSOCKET_HEAVY.map(({ kind: k, count }) => `${count} ${k.name}`).join(', ')}; Cluster LB, lag 10 s, check-delay 10 s\n`);
  console.log('| long-lived-grace | WebSocket cut | HTTP/1.1 requests failed / served | /shutdown to release, s (median / max) | rollout, s |');
  console.log('|---|---|---|---|---|');
  for (const longLivedGraceMs of [null, LONG_LIVED_GRACE_MS]) {
    const drain = { checkDelayMs: 10_000, checkIntervalMs: CHECK_INTERVAL_MS, longLivedGraceMs };
    const loadBalancer = { mode: 'cluster' as const, deregistrationLagMs: 10_000, pollIntervalMs: LB_POLL_INTERVAL_MS };
    const report = await runFleet({ ...fleet, loadBalancer, drain, clients: WEBSOCKET_HEAVY });
    const label = longLivedGraceMs === null ? 'off (default)' : `${seconds(longLivedGraceMs)} s`;
    console.log(`| ${[label, cut(report, WEBSOCKET.name), served(report, HTTP1.name), releaseTimes(report), rollout(report)].join(' | ')} |`);
  }
  console.log(`\nRun time: ${Math.round((performance.now() - started) / 1000)} s`);
}

await main();
