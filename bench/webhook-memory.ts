/**
 * The webhook's working memory and V8's young generation (issue 22): under load V8 grows each semi-space of the
 * new space up to its cap (16 MiB on Node 20, 32 MiB on Node 24, three of them in use) although the webhook keeps
 * next to nothing between reviews. Each candidate cap is started fresh and taken through the same life: idle
 * after one review; paced loads of 200 and then 1,000 reviews a second, with their p99 latency, peak resident
 * memory and CPU per review; on at 1,000 a second to 10,000 reviews in all, and the RSS then; last a burst at
 * full speed (50 keep-alive connections for 3 s) and its peak. The floor, a bare node:https server
 * (bench/floor-server.mjs) at V8's defaults, goes through the same steps in the same run.
 *
 * The image's setting (ENV NODE_OPTIONS in the Dockerfile, which the injected sidecar's own NODE_OPTIONS
 * replaces) is read from the Dockerfile, so that the figure marked "image" is the webhook as the image runs it.
 */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { Pool } from 'undici';
import { generateCertificates } from '../src/certs/generate.js';
import { cpuMicros, imageNodeOptions, loadAverage, mib, peakMemoryDuring, percentile, residentMib, type Figure } from './support.js';
import { keepAliveLoad, pid, post, startTarget, type Target } from './webhook.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const FIXTURE = join(ROOT, 'test/fixtures/admission/deployment-envoy-pod.json');

export interface WebhookMemoryProfile {
  /** Reviews sent before "after 10,000 reviews" is read. */
  readonly reviews: number;
  /** Length of each paced load. */
  readonly pacedSeconds: number;
}

interface Life {
  readonly idle: number;
  readonly afterReviews: number;
  readonly paced: ReadonlyMap<number, Paced>;
  /** Peak RSS under a burst at full speed, after everything else. */
  readonly burstPeak: number;
}

interface Paced {
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly peakMiB: number;
  readonly cpuMicrosPerReview: number;
}

const RATES = [200, 1_000] as const;

/**
 * `rate` reviews a second for `seconds` over a pool of keep-alive connections, each timed from when it was sent.
 * Sent on a 1 ms schedule (a burst of what fell due since the last tick), never more than 200 outstanding: a
 * server that falls behind is measured by its latency, not buried under an unbounded queue.
 */
async function pacedLoad(target: Target, ca: string, body: string, rate: number, seconds: number): Promise<Paced> {
  const pool = new Pool(target.url, { connect: { ca }, connections: 16, pipelining: 1 });
  const latencies: number[] = [];
  const total = rate * seconds;
  const cpuBefore = cpuMicros(pid(target));
  const { rssMiB: peakMiB } = await peakMemoryDuring(pid(target), async () => {
    const started = performance.now();
    const inFlight = new Set<Promise<void>>();
    let sent = 0;
    while (sent < total && performance.now() - started < seconds * 1000 + 10_000) {
      const due = Math.min(total, Math.floor(((performance.now() - started) / 1000) * rate) + 1);
      while (sent < due && inFlight.size < 200) {
        const sentAt = performance.now();
        const review = pool
          .request({ path: '/mutate', method: 'POST', headers: { 'content-type': 'application/json' }, body })
          .then(async (response) => {
            await response.body.text();
            if (response.statusCode !== 200) throw new Error(`${target.name} answered ${response.statusCode}`);
            latencies.push(performance.now() - sentAt);
          })
          .finally(() => inFlight.delete(review));
        inFlight.add(review);
        sent += 1;
      }
      await sleep(1);
    }
    await Promise.all(inFlight);
  }).finally(() => pool.close());
  const sorted = latencies.sort((a, b) => a - b);
  return {
    p50Ms: percentile(sorted, 50),
    p99Ms: percentile(sorted, 99),
    peakMiB,
    cpuMicrosPerReview: (cpuMicros(pid(target)) - cpuBefore) / Math.max(1, latencies.length),
  };
}

async function lifeOf(target: Target, ca: string, body: string, profile: WebhookMemoryProfile): Promise<Life> {
  await post(target.url, ca, body);
  await sleep(1_000);
  const idle = residentMib(pid(target)).rss;
  const paced = new Map<number, Paced>();
  for (const rate of RATES) paced.set(rate, await pacedLoad(target, ca, body, rate, profile.pacedSeconds));
  // On to `reviews` at the higher rate: what a busy cluster's webhook has done after a while.
  const done = RATES.reduce((sum, rate) => sum + rate * profile.pacedSeconds, 0);
  const rest = Math.max(0, profile.reviews - done);
  if (rest > 0) await pacedLoad(target, ca, body, 1_000, Math.ceil(rest / 1_000));
  await sleep(1_000);
  const afterReviews = residentMib(pid(target)).rss;
  // Then a burst: as many reviews as 50 keep-alive connections get answered in 3 s (a mass rollout's worth).
  const burst = await peakMemoryDuring(pid(target), () => keepAliveLoad(target, body, 50, 3));
  return { idle, afterReviews, paced, burstPeak: burst.rssMiB };
}

/** The young-generation settings taken, the image's among them. */
const candidatesFor = (imageOptions: string): string[] => [...new Set(['', '--max-semi-space-size=4', '--max-semi-space-size=2', '--max-semi-space-size=1', imageOptions])];

const labelOf = (options: string, imageOptions: string): string =>
  options === 'floor' ? 'bare TLS floor' : `webhook ${options === '' ? 'V8 defaults' : options}${options === imageOptions ? ' (image)' : ''}`;
const lifeFigure = (label: string): string => `${label}: RSS idle / peak at 200, 1,000 reviews/s / after reviews / burst peak`;
const imageFigures = (imageOptions: string): [string, string] => [
  `webhook as the image runs it (${imageOptions === '' ? 'V8 defaults' : imageOptions}): burst peak; at 1,000 reviews/s peak RSS, p99, CPU per review`,
  'webhook as the image runs it, 200 reviews/s: p99',
];

/** Every figure name this file can report with the image's NODE_OPTIONS (test/docs/performance.test.ts). */
export function webhookMemoryFigureNames(imageOptions = imageNodeOptions()): string[] {
  const lives = [...candidatesFor(imageOptions), 'floor'].map((options) => lifeFigure(labelOf(options, imageOptions)));
  return [...lives, ...imageFigures(imageOptions)];
}

export async function runWebhookMemoryBench(profile: WebhookMemoryProfile): Promise<Figure[]> {
  const imageOptions = imageNodeOptions();
  const candidates = candidatesFor(imageOptions);
  console.log(
    `Webhook memory: ${candidates.length} young-generation settings and a bare TLS floor, each fresh: idle, after ${profile.reviews.toLocaleString('en-US')} ` +
      `reviews (${RATES.join(' then ')} reviews/s for ${profile.pacedSeconds} s each, then on at 1,000/s), a 3 s burst at c=50; Node ${process.versions.node}, load average ${loadAverage()}`,
  );
  const directory = await mkdtemp(join(tmpdir(), 'esm-bench-memory-'));
  const lives = new Map<string, Life>();
  try {
    const bundle = await generateCertificates({ dnsNames: ['localhost'], ipAddresses: ['127.0.0.1'] });
    const [certFile, keyFile, responseFile] = ['tls.crt', 'tls.key', 'response.json'].map((name) => join(directory, name)) as [string, string, string];
    await writeFile(certFile, bundle.certPem);
    await writeFile(keyFile, bundle.keyPem);
    const body = await readFile(FIXTURE, 'utf8');
    const ca = bundle.caCertPem;
    const webhookArgs = [join(ROOT, 'dist/entry.cjs'), '--address=127.0.0.1', '--shutdown-delay=0s', `--tls-cert-file=${certFile}`, `--tls-key-file=${keyFile}`];
    // The floor answers the webhook's own answer: it goes last, once the first webhook has given one.
    for (const options of [...candidates, 'floor']) {
      const target =
        options === 'floor'
          ? await startTarget('floor', [join(ROOT, 'bench/floor-server.mjs')], '', ca, [certFile, keyFile, responseFile])
          : await startTarget('webhook', webhookArgs, '--port=', ca, [], options === '' ? {} : { NODE_OPTIONS: options });
      try {
        if (options === candidates[0]) await writeFile(responseFile, await post(target.url, ca, body));
        lives.set(options, await lifeOf(target, ca, body, profile));
      } finally {
        target.process.kill('SIGTERM');
        await new Promise((resolve) => (target.process.exitCode !== null ? resolve(undefined) : target.process.once('exit', resolve)));
      }
    }
  } finally {
    await rm(directory, { recursive: true, force: true });
  }
  return describeLives(lives, imageOptions);
}

function describeMemory(life: Life): string {
  const peaks = RATES.map((rate) => (life.paced.get(rate) as Paced).peakMiB.toFixed(1));
  return `${life.idle.toFixed(1)} / ${peaks.join(', ')} / ${life.afterReviews.toFixed(1)} / ${life.burstPeak.toFixed(1)} MiB`;
}

function describeLives(lives: ReadonlyMap<string, Life>, imageOptions: string): Figure[] {
  const floor = lives.get('floor') as Life;
  const label = (options: string): string => labelOf(options, imageOptions);
  const figures: Figure[] = [];
  for (const [options, life] of lives) {
    const rates = RATES.map((rate) => {
      const paced = life.paced.get(rate) as Paced;
      return `${rate}/s: peak ${mib(paced.peakMiB)}, p99 ${paced.p99Ms.toFixed(1)} ms, ${paced.cpuMicrosPerReview.toFixed(0)} µs CPU/review`;
    });
    console.log(`  ${label(options)}: idle ${mib(life.idle)}; ${rates.join('; ')}; after reviews ${mib(life.afterReviews)}; burst peak ${mib(life.burstPeak)}`);
    if (options === 'floor') continue;
    figures.push({
      name: lifeFigure(label(options)),
      value: describeMemory(life),
      target: '',
      pass: undefined,
    });
  }
  figures.push({
    name: lifeFigure(label('floor')),
    value: describeMemory(floor),
    target: '',
    pass: undefined,
  });
  const image = lives.get(imageOptions) as Life;
  const defaults = lives.get('') as Life;
  const at = (life: Life, rate: number): Paced => life.paced.get(rate) as Paced;
  figures.push({
    name: imageFigures(imageOptions)[0],
    value:
      `${mib(image.burstPeak)}; ${mib(at(image, 1_000).peakMiB)}, ${at(image, 1_000).p99Ms.toFixed(1)} ms, ${at(image, 1_000).cpuMicrosPerReview.toFixed(0)} µs ` +
      `(V8 defaults ${mib(defaults.burstPeak)}; ${mib(at(defaults, 1_000).peakMiB)}, ${at(defaults, 1_000).p99Ms.toFixed(1)} ms, ` +
      `${at(defaults, 1_000).cpuMicrosPerReview.toFixed(0)} µs; floor ${mib(floor.burstPeak)}; ${mib(at(floor, 1_000).peakMiB)}, ${at(floor, 1_000).p99Ms.toFixed(1)} ms)`,
    target: 'peaks ≤ V8 defaults, p99 ≤ 1.25 × theirs',
    pass:
      image.burstPeak <= defaults.burstPeak &&
      at(image, 1_000).peakMiB <= at(defaults, 1_000).peakMiB &&
      at(image, 1_000).p99Ms <= 1.25 * at(defaults, 1_000).p99Ms,
  });
  figures.push({
    name: imageFigures(imageOptions)[1],
    value: `${at(image, 200).p99Ms.toFixed(1)} ms (V8 defaults ${at(defaults, 200).p99Ms.toFixed(1)}, floor ${at(floor, 200).p99Ms.toFixed(1)})`,
    target: 'p99 ≤ 1.25 × V8 defaults',
    pass: at(image, 200).p99Ms <= 1.25 * at(defaults, 200).p99Ms,
  });
  return figures;
}

if (import.meta.url === `file://${process.argv[1] ?? ''}`) {
  const { printTable } = await import('./support.js');
  printTable(await runWebhookMemoryBench({ reviews: 10_000, pacedSeconds: 5 }));
}
