/**
 * `npm run proof`: a fleet of Envoy pods rolled behind a load balancer, for each setting of the matrix:
 * deregistration lag 0, 10 s and 30 s, each with check-delay below, at and above it (drain-delay 0), and
 * the negative control without the sidecar (Envoy SIGTERMed at deletion, no preStop drain); then the same
 * for externalTrafficPolicy: Local. Prints one Markdown table (cluster seconds: durations are run `--scale`
 * times faster and converted back).
 *
 *   npm run proof                          20 pods, scale 20
 *   npm run proof -- --replicas=8 --scale=10
 */
import os from 'node:os';
import { parseArgs } from 'node:util';
import { http1KeepAlive, rawTcp } from './fleet/clients.js';
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

function releaseTimes(report: FleetReport): string {
  const times = report.releases.map((release) => release.shutdownToReleaseMs).sort((a, b) => a - b);
  if (times.length === 0) return '-';
  const median = times[Math.floor(times.length / 2)] ?? 0;
  return `${seconds(times[0] ?? 0)} / ${seconds(median)} / ${seconds(times[times.length - 1] ?? 0)}`;
}

function row(setting: Setting, report: FleetReport): string {
  const [http, tcp] = report.kinds;
  const cells = [
    setting.mode === 'cluster' ? 'Cluster' : 'Local',
    `${seconds(setting.lagMs)} s`,
    drainLabel(setting.drain),
    `${http?.failed ?? '?'} / ${http?.ok ?? '?'}`,
    String(http?.cut ?? '?'),
    `${tcp?.failed ?? '?'}`,
    String(tcp?.cut ?? '?'),
    releaseTimes(report),
    `${seconds(report.rolloutMs)}${report.complete ? '' : ' (incomplete)'}`,
  ];
  return `| ${cells.join(' | ')} |`;
}

const HEADER = [
  '| LB (externalTrafficPolicy) | deregistration lag | drain | HTTP/1.1 requests failed / served | HTTP/1.1 connections cut | TCP connects failed | TCP connections cut | /shutdown to release, s (min / median / max) | rollout, s |',
  '|---|---|---|---|---|---|---|---|---|',
];

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
  console.log(`Clients: ${HTTP_CLIENTS} HTTP/1.1 keep-alive (a new connection every 20 requests), ${TCP_CLIENTS} long-lived TCP echo\n`);
  console.log(HEADER.join('\n'));
  for (const setting of matrix()) {
    const report = await runFleet({
      replicas,
      scale,
      loadBalancer: { mode: setting.mode, deregistrationLagMs: setting.lagMs, pollIntervalMs: LB_POLL_INTERVAL_MS },
      drain: setting.drain,
      gracePeriodS: GRACE_PERIOD_S,
      clients: [
        { kind: http1KeepAlive(), count: HTTP_CLIENTS },
        { kind: rawTcp(), count: TCP_CLIENTS },
      ],
      thinkMs: 25,
      maxRealMs: 120_000,
    });
    console.log(row(setting, report));
  }
  console.log(`\nRun time: ${Math.round((performance.now() - started) / 1000)} s`);
}

const HTTP_CLIENTS = 30;
const TCP_CLIENTS = 10;

await main();
