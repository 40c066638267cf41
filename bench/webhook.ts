/**
 * Webhook figures, as shared/reference/benchmarks.md asks: throughput over keep-alive TLS next to a bare
 * node:https floor (same run, same key, same fixture), sequential latency in microseconds, and the pure
 * injector's cost as pods grow. Servers run in their own processes so the load generator does not share
 * their event loop. BENCH_SECONDS shortens or lengthens the measured window (default 5).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import { Client } from 'undici';
import { generateCertificates } from '../src/certs/generate.js';
import { parseWebhookConfig } from '../src/config/webhook.js';
import { injectPod } from '../src/inject/injector.js';
import { podPatch } from '../src/inject/patch.js';
import { freePort, percentile, summarize, waitUntil } from './support.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const FIXTURE = join(ROOT, 'test/fixtures/admission/deployment-envoy-pod.json');
const MEASURE_SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const WARMUP_SECONDS = 3;
const ROUNDS = 3;
const SEQUENTIAL_REQUESTS = 3000;

interface Target {
  readonly name: string;
  readonly url: string;
  readonly process: ChildProcess;
}

export async function runWebhookBench(): Promise<void> {
  const directory = await mkdtemp(join(tmpdir(), 'esm-bench-'));
  const targets: Target[] = [];
  try {
    const bundle = await generateCertificates({ dnsNames: ['localhost'], ipAddresses: ['127.0.0.1'] });
    const certFile = join(directory, 'tls.crt');
    const keyFile = join(directory, 'tls.key');
    await writeFile(certFile, bundle.certPem);
    await writeFile(keyFile, bundle.keyPem);
    const body = await readFile(FIXTURE, 'utf8');

    const webhook = await startTarget('webhook', [join(ROOT, 'dist/main.js'), '--address=127.0.0.1', '--shutdown-delay=0s', `--tls-cert-file=${certFile}`, `--tls-key-file=${keyFile}`], '--port=', bundle.caCertPem);
    targets.push(webhook);
    const realResponse = await post(webhook.url, bundle.caCertPem, body);
    const responseFile = join(directory, 'response.json');
    await writeFile(responseFile, realResponse);
    const floor = await startTarget('floor', ['--import', 'tsx', join(ROOT, 'bench/floor-server.ts')], '', bundle.caCertPem, [certFile, keyFile, responseFile]);
    targets.push(floor);
    const fastify = await startTarget('fastify', ['--import', 'tsx', join(ROOT, 'bench/fastify-floor.ts')], '', bundle.caCertPem, [certFile, keyFile, responseFile]);
    targets.push(fastify);
    const measured = [floor, fastify, webhook];

    console.log(
      `\n== Webhook (AdmissionReview ${body.length} B in, ${realResponse.length} B out; 10 keep-alive TLS connections, ` +
        `${ROUNDS} alternating rounds of ${MEASURE_SECONDS}s after ${WARMUP_SECONDS}s warm-up, median)`,
    );
    // Alternating rounds, median of each: the machine's other load drifts, and both sides should share it.
    const samples: Record<string, number[]> = Object.fromEntries(measured.map((target) => [target.name, []]));
    for (const target of measured) await load(target.url, body, WARMUP_SECONDS);
    for (let round = 0; round < ROUNDS; round += 1) {
      for (const target of measured) samples[target.name]?.push(await load(target.url, body, MEASURE_SECONDS));
    }
    const throughput = Object.fromEntries(Object.entries(samples).map(([name, values]) => [name, summarize(values).median]));
    for (const target of measured) {
      const latency = await sequentialLatency(target.url, bundle.caCertPem, body);
      console.log(
        `${target.name.padEnd(8)} ${Math.round(throughput[target.name] ?? 0).toString().padStart(7)} req/s   ` +
          `sequential latency p50 ${latency.p50} µs  p99 ${latency.p99} µs  max ${latency.max} µs`,
      );
    }
    const percentOfFloor = (name: string): string => `${(((throughput[name] ?? 0) / (throughput.floor ?? 1)) * 100).toFixed(1)} %`;
    console.log(`webhook / floor throughput: ${percentOfFloor('webhook')}  (target ≥ 60 %; p99 target < 2000 µs)`);
    console.log(`fastify with a fixed answer / floor: ${percentOfFloor('fastify')}  (the framework's share of the gap)`);
    injectorScaling();
  } finally {
    for (const target of targets) {
      target.process.kill('SIGTERM');
      await once(target.process, 'exit');
    }
    await rm(directory, { recursive: true, force: true });
  }
}

async function startTarget(name: string, args: string[], portFlag: string, ca: string, trailing: string[] = []): Promise<Target> {
  const port = await freePort();
  const portArgs = portFlag === '' ? [String(port)] : [`${portFlag}${port}`];
  const child = spawn(process.execPath, [...args, ...portArgs, ...trailing], { stdio: ['ignore', 'ignore', 'inherit'] });
  const url = `https://127.0.0.1:${port}`;
  await waitUntil(async () => (await post(`${url}`, ca, '{}', '/healthz', 'GET')).length >= 0, 10_000, name);
  return { name, url, process: child };
}

async function post(url: string, ca: string, body: string, path = '/mutate', method: 'POST' | 'GET' = 'POST'): Promise<string> {
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

async function load(url: string, body: string, seconds: number): Promise<number> {
  const result = await autocannon({
    url: `${url}/mutate`,
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body,
    connections: 10,
    duration: seconds,
  });
  if (result.non2xx > 0 || result.errors > 0) throw new Error(`${url}: ${result.non2xx} non-2xx, ${result.errors} errors`);
  return result.requests.average;
}

async function sequentialLatency(url: string, ca: string, body: string): Promise<{ p50: number; p99: number; max: number }> {
  const client = new Client(url, { connect: { ca }, pipelining: 1 });
  const samples: number[] = [];
  try {
    for (let i = 0; i < SEQUENTIAL_REQUESTS + 300; i += 1) {
      const started = process.hrtime.bigint();
      const response = await client.request({ path: '/mutate', method: 'POST', headers: { 'content-type': 'application/json' }, body });
      await response.body.text();
      if (i >= 300) samples.push(Number(process.hrtime.bigint() - started) / 1000);
    }
  } finally {
    await client.close();
  }
  samples.sort((a, b) => a - b);
  return { p50: Math.round(percentile(samples, 50)), p99: Math.round(percentile(samples, 99)), max: Math.round(samples.at(-1) ?? NaN) };
}

/** The pure injector alone (decision + diff), on pods with more and more containers. */
function injectorScaling(): void {
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
    parts.push(`${count} container(s): ${(Number(process.hrtime.bigint() - started) / 1000 / iterations).toFixed(1)} µs`);
  }
  console.log(`pure injector + patch per pod: ${parts.join(', ')}`);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  await runWebhookBench();
}
