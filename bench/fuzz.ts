/**
 * npm run fuzz: many generated hostile AdmissionReviews (FUZZ_COUNT, default 10,000) against a real webhook
 * over HTTPS, with the same checks as the property test. Prints answers by HTTP status and by what they said,
 * the webhook's own count of reviews by result, and the first problems found; exits 1 if there were any.
 * `npm run fuzz -- --drain` runs the drain's model-based fault search instead (bench/fuzz-drain.ts).
 */
import fc from 'fast-check';
import pino from 'pino';
import { sampleOf } from '../test/support/prometheus.js';
import { classify, hostileCases, hostileClient, loadBases, problemsWith, type HostileCase } from '../test/webhook/hostile-reviews.js';
import { httpsRequest, startTestWebhook } from '../test/support/webhook.js';

if (process.argv.includes('--drain')) {
  await import('./fuzz-drain.js');
  process.exit();
}

const COUNT = Number(process.env.FUZZ_COUNT ?? 10_000);
const SEED = Number(process.env.FUZZ_SEED ?? Date.now() % 2 ** 31);
const CONNECTIONS = 8;
const BODY_LIMIT = 65_536;

// Errors only: a 5xx logs its stack here.
const webhook = await startTestWebhook([`--body-limit=${BODY_LIMIT}`], 10_000, { logger: pino({ level: 'error' }) });
const client = hostileClient(webhook.server.url, webhook.ca, CONNECTIONS);
const byStatus = new Map<string, number>();
const problems: string[] = [];
let problemCases = 0;
const started = performance.now();
try {
  const cases = fc.sample(hostileCases(loadBases(), BODY_LIMIT), { numRuns: COUNT, seed: SEED });
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < cases.length) {
      const hostile = cases[next++] as HostileCase;
      const answer = await client.send(hostile);
      const kind = classify(answer);
      byStatus.set(kind, (byStatus.get(kind) ?? 0) + 1);
      const found = problemsWith(hostile, answer, BODY_LIMIT);
      if (found.length > 0) {
        problemCases += 1;
        if (problems.length < 20) problems.push(`${hostile.steps.join(' | ').slice(0, 400)}\n    ${found.join('\n    ')}`);
      }
    }
  };
  await Promise.all(Array.from({ length: CONNECTIONS }, worker));
  const seconds = (performance.now() - started) / 1000;

  console.log(`${COUNT} hostile reviews in ${seconds.toFixed(1)} s over ${CONNECTIONS} keep-alive connections (FUZZ_SEED=${SEED})\n`);
  console.log('answers:');
  for (const [kind, count] of [...byStatus].sort((a, b) => b[1] - a[1])) console.log(`  ${kind.padEnd(20)} ${count}`);
  const metrics = (await httpsRequest(`${webhook.server.url}/metrics`, { ca: webhook.ca, method: 'GET' })).text;
  console.log('\nshutdown_manager_webhook_reviews_total by result:');
  for (const result of ['injected', 'skipped', 'denied', 'ignored', 'invalid', 'error']) {
    console.log(`  ${result.padEnd(20)} ${sampleOf(metrics, `shutdown_manager_webhook_reviews_total{result="${result}"}`) ?? 0}`);
  }
  console.log(`\ncases with problems: ${problemCases}`);
  for (const problem of problems) console.log(`- ${problem}`);
  if (problemCases > 0) process.exitCode = 1;
} finally {
  client.close();
  await webhook.close();
}
