/**
 * `npm run bench:check`: `envoy-shutdown-manager check` on a big cluster: 10,000 Envoy pods in 200 opted-in
 * namespaces on the fake API server (TLS, a kubeconfig file, the built command in a child process), one
 * Deployment without the sidecar every 20 namespaces. Prints the wall time of each run (process start
 * included) and the API calls it made.
 */
import { performance } from 'node:perf_hooks';
import { addNamespace, addPod, installWebhook, startCheckCluster } from '../test/support/check-cluster.js';
import { pathToFileURL } from 'node:url';
import { runBuiltEntry } from '../test/support/process.js';
import type { Figure } from './support.js';

const NAMESPACES = 200;
const PODS_PER_NAMESPACE = 50;
const RUNS = 3;

/** The figure's name (test/docs/performance.test.ts checks docs/performance.md's rows against it). */
export const CHECK_FIGURE = `check on ${(NAMESPACES * PODS_PER_NAMESPACE).toLocaleString('en-US')} pods in ${NAMESPACES} namespaces (fake API server, node start included)`;

/** Runs `check` RUNS times on the big fake cluster; the figures for `npm run bench` (and this script's output). */
export async function runCheckBench(): Promise<Figure[]> {
  const target = await startCheckCluster();
  try {
    await installWebhook(target.fake);
    for (let n = 0; n < NAMESPACES; n += 1) {
      const namespace = `edge-${n}`;
      addNamespace(target.fake, namespace);
      for (let p = 0; p < PODS_PER_NAMESPACE; p += 1) {
        const unprotected = n % 20 === 0 && p < 5;
        addPod(target.fake, namespace, `envoy-${p}`, unprotected ? { owner: 'Deployment/legacy', injected: false } : { owner: 'Deployment/envoy' });
      }
    }
    const times: number[] = [];
    let calls = 0;
    let podLists = 0;
    for (let run = 0; run < RUNS; run += 1) {
      const before = target.fake.requests.length;
      const started = performance.now();
      const result = await runBuiltEntry(['check', '--kubeconfig', target.kubeconfig, '--output', 'json'], { timeoutMs: 120_000 });
      times.push(performance.now() - started);
      if (result.code !== 1) throw new Error(`expected exit 1 (the legacy Deployments), got ${String(result.code)}: ${result.stderr}`);
      const requests = target.fake.requests.slice(before);
      calls = requests.length;
      podLists = requests.filter((request) => request.path.endsWith('/pods')).length;
    }
    times.sort((a, b) => a - b);
    const median = times[Math.floor(times.length / 2)] ?? 0;
    console.log(`\ncheck: ${NAMESPACES * PODS_PER_NAMESPACE} pods in ${NAMESPACES} namespaces`);
    console.log(`  wall time per run (node start included): median ${(median / 1000).toFixed(2)} s, runs ${times.map((t) => (t / 1000).toFixed(2)).join(' / ')} s`);
    console.log(`  API calls per run: ${calls} (${podLists} pod lists, one page of 500 per namespace)`);
    return [
      {
        name: CHECK_FIGURE,
        value: `median ${(median / 1000).toFixed(2)} s; ${calls} API calls (${podLists} pod lists)`,
        target: '≤ 5 s',
        pass: median <= 5_000,
      },
    ];
  } finally {
    await target.close();
  }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) await runCheckBench();
