/**
 * Webhook figures, as /work/shared/reference/benchmarks.md asks: each one next to a floor measured in the
 * same run, in alternating rounds (the machine's other load drifts, and both sides should share it), median
 * of the rounds. The floor is a bare node:https server (same key, same TLS settings, same fixture) that parses
 * the body and answers the webhook's own answer. Servers run in their own processes, started as the image
 * starts them, so that the load generator does not share their event loop.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import { Client } from 'undici';
import { parseAllDocuments } from 'yaml';
import { generateCertificates } from '../src/certs/generate.js';
import { parseWebhookConfig } from '../src/config/webhook.js';
import { injectPod } from '../src/inject/injector.js';
import { podPatch } from '../src/inject/patch.js';
import { newConnectionLoad } from './new-connections.js';
import { cpuMicros, freePort, imageNodeOptions, loadAverage, median, mib, percent, percentile, residentMib, waitUntil, type Figure } from './support.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const FIXTURE = join(ROOT, 'test/fixtures/admission/deployment-envoy-pod.json');
const DEPLOYMENT = join(ROOT, 'manifests/base/deployment.yaml');

export interface WebhookBenchProfile {
  readonly rounds: number;
  /** Keep-alive throughput, per target and round. */
  readonly seconds: number;
  /** New-connection throughput, per target and round. */
  readonly newConnectionSeconds: number;
  readonly warmupSeconds: number;
  /** Sequential requests per target and round. */
  readonly sequentialRequests: number;
  /** Also measure Fastify answering a fixed body (for information: the framework's share). */
  readonly fastify: boolean;
}

export interface Target {
  readonly name: string;
  readonly port: number;
  readonly url: string;
  readonly process: ChildProcess;
}

const KEEP_ALIVE_CONNECTIONS = [10, 50] as const;

/** The figures' names, for the code below and test/docs/performance.test.ts (docs/performance.md's generated rows). */
const WEBHOOK_FIGURES = {
  cpu: (load: string): string => `server CPU per review, ${load}`,
  keepAliveCpu: (connections: number): string => `keep-alive c=${connections}`,
  throughput: (connections: number): string => `webhook throughput, keep-alive TLS c=${connections} (retired target)`,
  fastify: 'Fastify answering a fixed body, c=10',
  sequential: 'sequential latency p99 (1 connection)',
  newConnection: 'new TLS connection per review, c=10',
  newConnectionCpu: 'new TLS connection per review',
  idle: 'webhook RSS idle (after start and one review)',
  underLoad: 'webhook RSS under load (peak, c=10 and c=50)',
  injector: 'pure injector + patch per pod',
} as const;

/** Every figure name this file can report. */
export function webhookFigureNames(): string[] {
  const { cpu, keepAliveCpu, throughput, newConnectionCpu, ...fixed } = WEBHOOK_FIGURES;
  const perConnections = KEEP_ALIVE_CONNECTIONS.flatMap((connections) => [throughput(connections), cpu(keepAliveCpu(connections))]);
  return [...perConnections, cpu(newConnectionCpu), ...Object.values(fixed)];
}

export async function runWebhookBench(profile: WebhookBenchProfile): Promise<Figure[]> {
  const directory = await mkdtemp(join(tmpdir(), 'esm-bench-'));
  const targets: Target[] = [];
  const figures: Figure[] = [];
  try {
    const bundle = await generateCertificates({ dnsNames: ['localhost'], ipAddresses: ['127.0.0.1'] });
    const certFile = join(directory, 'tls.crt');
    const keyFile = join(directory, 'tls.key');
    await writeFile(certFile, bundle.certPem);
    await writeFile(keyFile, bundle.keyPem);
    const body = await readFile(FIXTURE, 'utf8');
    const ca = bundle.caCertPem;

    // As the image starts it: with the runtime stage's NODE_OPTIONS (see webhook-memory.ts).
    const imageOptions = imageNodeOptions();
    const webhookArgs = [join(ROOT, 'dist/entry.cjs'), '--address=127.0.0.1', '--shutdown-delay=0s', `--tls-cert-file=${certFile}`, `--tls-key-file=${keyFile}`];
    const webhook = await startTarget('webhook', webhookArgs, '--port=', ca, [], imageOptions === '' ? {} : { NODE_OPTIONS: imageOptions });
    targets.push(webhook);
    const realResponse = await post(webhook.url, ca, body);
    const responseFile = join(directory, 'response.json');
    await writeFile(responseFile, realResponse);
    const floor = await startTarget('floor', [join(ROOT, 'bench/floor-server.mjs')], '', ca, [certFile, keyFile, responseFile]);
    targets.push(floor);
    await post(floor.url, ca, body);
    const fastify = profile.fastify
      ? await startTarget('fastify', [join(ROOT, 'bench/fastify-floor.mjs')], '', ca, [certFile, keyFile, responseFile])
      : undefined;
    if (fastify !== undefined) targets.push(fastify);

    // Idle: started, one review answered, a second to settle; before any load.
    await sleep(1000);
    const idle = { webhook: residentMib(pid(webhook)).rss, floor: residentMib(pid(floor)).rss };

    console.log(
      `Webhook: AdmissionReview ${body.length} B in, ${realResponse.length} B out; ${profile.rounds} alternating rounds, median; ` +
        `load average ${loadAverage()}`,
    );
    const keepAlive = fastify === undefined ? [floor, webhook] : [floor, fastify, webhook];
    // JIT warm-up: the webhook's review code is optimized only after some thousands of reviews.
    for (const target of keepAlive) await keepAliveLoad(target, body, 10, profile.warmupSeconds);

    // Server CPU per review, next to each rate: the client shares the two cores, and when it is the bottleneck
    // (new connections: a TLS client works harder than the server) the rates hide what the server spends.
    const cpu = new Map<string, number[]>();
    const withCpu =
      (key: string, run: (target: Target) => Promise<{ rate: number; completed: number }>) =>
      async (target: Target): Promise<number> => {
        const before = cpuMicros(pid(target));
        const { rate, completed } = await run(target);
        const samples = cpu.get(`${key} ${target.name}`) ?? [];
        samples.push((cpuMicros(pid(target)) - before) / completed);
        cpu.set(`${key} ${target.name}`, samples);
        return rate;
      };
    const cpuFigure = (key: string, name: string): Figure => {
      const webhookUs = median(cpu.get(`${key} webhook`) ?? []);
      const floorUs = median(cpu.get(`${key} floor`) ?? []);
      return {
        name: WEBHOOK_FIGURES.cpu(name),
        value: `webhook ${webhookUs.toFixed(0)} µs vs floor ${floorUs.toFixed(0)} µs (floor / webhook ${percent(floorUs / webhookUs)})`,
        target: '',
        pass: undefined,
      };
    };

    for (const connections of KEEP_ALIVE_CONNECTIONS) {
      const rounds = await alternate(
        profile.rounds,
        connections === 10 ? keepAlive : [floor, webhook],
        withCpu(`c=${connections}`, (target) => keepAliveLoad(target, body, connections, profile.seconds)),
      );
      const share = ratio(rounds, 'webhook', 'floor');
      console.log(`  keep-alive c=${connections}: ${describeRates(rounds, 'req/s')}`);
      // Printed, not graded: the throughput target against a bare TLS server is retired (docs/performance.md,
      // "The webhook's other figures"). The API server waits on admission latency (graded below), and a webhook
      // that builds a patch per review never reaches a floor that only writes a fixed answer; grading it made
      // every run FAIL for a figure nobody acts on.
      figures.push({
        name: WEBHOOK_FIGURES.throughput(connections),
        value: `${percent(share)} of floor (${perSecond(rounds, 'webhook')} vs ${perSecond(rounds, 'floor')} req/s)`,
        target: '',
        pass: undefined,
      });
      figures.push(cpuFigure(`c=${connections}`, WEBHOOK_FIGURES.keepAliveCpu(connections)));
      if (connections === 10 && fastify !== undefined) {
        figures.push({
          name: WEBHOOK_FIGURES.fastify,
          value: `${percent(ratio(rounds, 'fastify', 'floor'))} of floor (the framework's share)`,
          target: '',
          pass: undefined,
        });
      }
    }
    const underLoad = residentMib(pid(webhook));

    const latency = await alternate(profile.rounds, [floor, webhook], (target) => sequentialP99(target.url, ca, body, profile.sequentialRequests));
    const p99 = { webhook: median(latency.get('webhook') ?? []), floor: median(latency.get('floor') ?? []) };
    console.log(`  sequential p99 per round (µs): ${describeRates(latency, 'µs')}`);
    figures.push({
      name: WEBHOOK_FIGURES.sequential,
      value: `${Math.round(p99.webhook)} µs vs floor ${Math.round(p99.floor)} µs (${(p99.webhook / p99.floor).toFixed(2)} ×)`,
      target: '≤ 2 × floor',
      pass: p99.webhook <= 2 * p99.floor,
    });

    for (const target of [floor, webhook]) await newConnectionLoad(target.port, body, 10, 1);
    const fresh = await alternate(
      profile.rounds,
      [floor, webhook],
      withCpu('new', async (target) => {
        const { perSecond, completed } = await newConnectionLoad(target.port, body, 10, profile.newConnectionSeconds);
        return { rate: perSecond, completed };
      }),
    );
    const freshShare = ratio(fresh, 'webhook', 'floor');
    console.log(`  new TLS connection per review c=10: ${describeRates(fresh, '/s')}`);
    figures.push({
      name: WEBHOOK_FIGURES.newConnection,
      value: `${percent(freshShare)} of floor (${perSecond(fresh, 'webhook')} vs ${perSecond(fresh, 'floor')} /s)`,
      target: '≥ 80 % of floor',
      pass: freshShare >= 0.8,
    });
    figures.push(cpuFigure('new', WEBHOOK_FIGURES.newConnectionCpu));

    figures.push({
      name: WEBHOOK_FIGURES.idle,
      value: `${mib(idle.webhook)} vs floor ${mib(idle.floor)} (${(idle.webhook / idle.floor).toFixed(2)} ×)`,
      target: '≤ 1.3 × floor',
      pass: idle.webhook <= 1.3 * idle.floor,
    });
    const request = await deploymentMemoryRequestMib();
    figures.push({
      name: WEBHOOK_FIGURES.underLoad,
      value: `${mib(underLoad.peak)}; manifests request ${request} Mi (${(request / underLoad.peak).toFixed(2)} × peak)`,
      target: 'request ≥ peak (sized on Node 24)',
      pass: request >= underLoad.peak,
    });
    figures.push({ name: WEBHOOK_FIGURES.injector, value: injectorScaling(), target: '', pass: undefined });
    return figures;
  } finally {
    for (const target of targets) {
      target.process.kill('SIGTERM');
      if (target.process.exitCode === null && target.process.signalCode === null) await once(target.process, 'exit');
    }
    await rm(directory, { recursive: true, force: true });
  }
}

export function pid(target: Target): number {
  return target.process.pid as number;
}

/** Runs `measure` on each target in turn, `rounds` times; the values by target name. */
async function alternate(rounds: number, targets: readonly Target[], measure: (target: Target) => Promise<number>): Promise<Map<string, number[]>> {
  const values = new Map<string, number[]>(targets.map((target) => [target.name, []]));
  for (let round = 0; round < rounds; round += 1) {
    for (const target of targets) values.get(target.name)?.push(await measure(target));
  }
  return values;
}

/** The median of each round's a / b: rounds pair measurements taken seconds apart, under the same drift. */
function ratio(values: Map<string, number[]>, a: string, b: string): number {
  const as = values.get(a) ?? [];
  const bs = values.get(b) ?? [];
  return median(as.map((value, round) => value / (bs[round] ?? NaN)));
}

function perSecond(values: Map<string, number[]>, name: string): string {
  return Math.round(median(values.get(name) ?? [])).toLocaleString('en-US');
}

function describeRates(values: Map<string, number[]>, unit: string): string {
  return [...values].map(([name, list]) => `${name} ${list.map((value) => Math.round(value)).join('/')} ${unit}`).join('; ');
}

/** Starts a server as its own process with a clean environment (plus `env`), and waits until it answers. */
export async function startTarget(
  name: string,
  args: string[],
  portFlag: string,
  ca: string,
  trailing: string[] = [],
  env: Readonly<Record<string, string>> = {},
): Promise<Target> {
  const port = await freePort();
  const portArgs = portFlag === '' ? [String(port)] : [`${portFlag}${port}`];
  // A clean environment, as in a pod: no SHUTDOWN_MANAGER_* settings from the caller's shell, and no
  // NODE_EXTRA_CA_CERTS, which makes Node read a CA bundle at start (tens of ms and some MiB, to both sides).
  const child = spawn(process.execPath, [...args, ...portArgs, ...trailing], { stdio: ['ignore', 'ignore', 'inherit'], env: { PATH: process.env.PATH, ...env } });
  const url = `https://127.0.0.1:${port}`;
  await waitUntil(async () => (await post(url, ca, '{}', '/healthz', 'GET')).length >= 0, 10_000, name);
  return { name, port, url, process: child };
}

export async function post(url: string, ca: string, body: string, path = '/mutate', method: 'POST' | 'GET' = 'POST'): Promise<string> {
  const client = new Client(url, { connect: { ca } });
  try {
    const response = await client.request({
      path,
      method,
      headers: { 'content-type': 'application/json' },
      ...(method === 'POST' ? { body } : {}),
    });
    return await response.body.text();
  } finally {
    await client.close();
  }
}

export async function keepAliveLoad(target: Target, body: string, connections: number, seconds: number): Promise<{ rate: number; completed: number }> {
  const result = await autocannon({
    url: `${target.url}/mutate`,
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body,
    connections,
    duration: seconds,
  });
  if (result.non2xx > 0 || result.errors > 0) throw new Error(`${target.name}: ${result.non2xx} non-2xx, ${result.errors} errors`);
  return { rate: result.requests.average, completed: result.requests.total };
}

/** p99 of `count` sequential requests on one keep-alive connection, in µs (after 100 unmeasured ones). */
async function sequentialP99(url: string, ca: string, body: string, count: number): Promise<number> {
  const client = new Client(url, { connect: { ca }, pipelining: 1 });
  const samples: number[] = [];
  try {
    for (let i = 0; i < count + 100; i += 1) {
      const started = process.hrtime.bigint();
      const response = await client.request({ path: '/mutate', method: 'POST', headers: { 'content-type': 'application/json' }, body });
      await response.body.text();
      if (i >= 100) samples.push(Number(process.hrtime.bigint() - started) / 1000);
    }
  } finally {
    await client.close();
  }
  return percentile(samples.sort((a, b) => a - b), 99);
}

/** The webhook container's memory request in manifests/base/deployment.yaml, in MiB. */
async function deploymentMemoryRequestMib(): Promise<number> {
  for (const document of parseAllDocuments(await readFile(DEPLOYMENT, 'utf8'))) {
    const manifest = document.toJS() as { kind?: string; spec?: { template?: { spec?: { containers?: { resources?: { requests?: { memory?: string } } }[] } } } };
    const memory = manifest.kind === 'Deployment' ? manifest.spec?.template?.spec?.containers?.[0]?.resources?.requests?.memory : undefined;
    const mebibytes = /^(\d+)Mi$/.exec(memory ?? '')?.[1];
    if (mebibytes !== undefined) return Number(mebibytes);
  }
  throw new Error(`no memory request in Mi found in ${DEPLOYMENT}`);
}

/** The pure injector alone (decision + diff), on pods with more and more containers. */
function injectorScaling(): string {
  const config = parseWebhookConfig([], {}).injection;
  const parts: string[] = [];
  for (const count of [1, 10, 50]) {
    const pod = {
      metadata: { generateName: 'envoy-', labels: { app: 'envoy' } },
      spec: {
        containers: Array.from({ length: count }, (_, i) => ({
          name: i === 0 ? 'envoy' : `app-${i}`,
          image: i === 0 ? 'envoyproxy/envoy:v1.31.2' : 'nginx:1.27',
          ports: [{ containerPort: 10_000 + i }],
          env: [{ name: 'A', value: 'b' }],
        })),
      },
    };
    const iterations = 20_000;
    const started = process.hrtime.bigint();
    for (let i = 0; i < iterations; i += 1) {
      const outcome = injectPod(pod, config, 'bench-token');
      if (outcome.action === 'inject') podPatch(pod, outcome.pod);
    }
    parts.push(`${count} container(s) ${(Number(process.hrtime.bigint() - started) / 1000 / iterations).toFixed(1)} µs`);
  }
  return parts.join(', ');
}
