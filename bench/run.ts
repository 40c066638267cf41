/**
 * `npm run bench`: every figure the project reports, each against a floor measured in the same run or as
 * sequential timings, then one table with each figure's target and PASS or FAIL; it prints how long it took. The
 * longest parts are a simulated week of the sidecar watching Envoy, the webhook's memory by young-generation cap and
 * a drain with 10,000 connections held 20 s; `npm run bench -- --quick` runs fewer and shorter rounds (noisier
 * figures). Figures are for the Node that runs it: `PATH=<node 24>/bin:$PATH npm run bench` for the image's.
 * The machine is shared: the load average is printed with each part, and a figure that fails on a busy
 * machine should be taken again on a quiet one before it is believed.
 */
import { cpus } from 'node:os';
import { runCheckBench } from './check.js';
import { runSidecarBench, type SidecarBenchProfile } from './sidecar.js';
import { finishedRun, requireSection, writeSection } from './doc-sections.js';
import { loadAverage, printTable } from './support.js';
import { runWatchWeekBench } from './watch-week.js';
import { runWebhookBench, type WebhookBenchProfile } from './webhook.js';
import { runWebhookMemoryBench, type WebhookMemoryProfile } from './webhook-memory.js';

const quick = process.argv.includes('--quick');
// --write-docs: the table printed is also written into docs/performance.md, this Node major's section.
const writeDocs = process.argv.includes('--write-docs');
if (writeDocs) await requireSection('bench');

const PROFILES: Record<'full' | 'quick', { webhook: WebhookBenchProfile; webhookMemory: WebhookMemoryProfile; sidecar: SidecarBenchProfile; watchDays: number }> = {
  full: {
    webhook: { rounds: 5, seconds: 3, newConnectionSeconds: 2, warmupSeconds: 3, sequentialRequests: 1000, fastify: true },
    webhookMemory: { reviews: 10_000, pacedSeconds: 5 },
    sidecar: { starts: 11, drains: 9, floodSeconds: 4 },
    watchDays: 7,
  },
  quick: {
    webhook: { rounds: 3, seconds: 1, newConnectionSeconds: 1, warmupSeconds: 1, sequentialRequests: 300, fastify: false },
    webhookMemory: { reviews: 2_000, pacedSeconds: 2 },
    sidecar: { starts: 5, drains: 3, floodSeconds: 2 },
    watchDays: 3,
  },
};

const profile = PROFILES[quick ? 'quick' : 'full'];
const started = performance.now();
const loadAtStart = loadAverage();
console.log(`npm run bench${quick ? ' -- --quick' : ''}: Node ${process.version}, ${cpus().length} CPUs, load average ${loadAtStart} at the start`);
const figures = [
  ...(await runWebhookBench(profile.webhook)),
  ...(await runWebhookMemoryBench(profile.webhookMemory)),
  ...(await runSidecarBench(profile.sidecar)),
  ...(await runWatchWeekBench(profile.watchDays)),
  ...(await runCheckBench()),
];
const run = finishedRun('bench', quick, loadAtStart, started);
console.log(`\nResults (${run.seconds} s; load average ${run.loadAtEnd} at the end):\n`);
printTable(figures);
if (writeDocs) await writeSection(run, figures);
const judged = figures.filter((figure) => figure.pass !== undefined);
console.log(`\n${judged.filter((figure) => figure.pass).length} of ${judged.length} targets met.`);
