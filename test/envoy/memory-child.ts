/**
 * Run by admin-client-memory.test.ts in a child process of its own, so that its memory figures are the
 * admin client's alone: `node --expose-gc --import tsx test/envoy/memory-child.ts <mode> <port> [calls]`.
 * Prints one JSON line.
 *
 * - `deep-json`: one stats call answered with 1e6-deep JSON; reports the failure and how far the peak RSS rose.
 * - `calls`: many /ready calls with one long-lived caller signal; reports heap growth (after GC) between a
 *   warm-up and the end, and the abort listeners left on the signal.
 */
import { getEventListeners } from 'node:events';
import { WitnessedAdminClient } from '../../src/envoy/process/witnessed-admin.js';
import type { EnvoyAdminError } from '../../src/envoy/admin-errors.js';

const [mode, portText, callsText] = process.argv.slice(2);
const client = new WitnessedAdminClient({ address: '127.0.0.1', port: Number(portText), timeoutMs: 5_000 });
const mib = (bytes: number): number => Math.round((bytes / 1_048_576) * 10) / 10;
const peakRss = (): number => process.resourceUsage().maxRSS * 1024;

function collect(): void {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (gc === undefined) throw new Error('run with --expose-gc');
  for (let round = 0; round < 3; round += 1) gc();
}

async function deepJson(): Promise<object> {
  const before = peakRss();
  const started = performance.now();
  const error = await client.countOpenConnections().then(() => undefined, (rejection: unknown) => rejection as EnvoyAdminError);
  return { kind: error?.kind, message: error?.message, elapsedMs: Math.round(performance.now() - started), peakRssBeforeMiB: mib(before), peakRssAfterMiB: mib(peakRss()) };
}

async function calls(count: number): Promise<object> {
  const caller = new AbortController();
  const run = async (n: number): Promise<void> => {
    for (let index = 0; index < n; index += 1) await client.serverState(caller.signal);
  };
  await run(2_000);
  collect();
  const before = process.memoryUsage().heapUsed;
  await run(count);
  collect();
  const after = process.memoryUsage().heapUsed;
  return { calls: count, heapGrowthBytes: after - before, listenersLeft: getEventListeners(caller.signal, 'abort').length };
}

const result = mode === 'deep-json' ? await deepJson() : await calls(Number(callsText));
client.close();
process.stdout.write(`${JSON.stringify(result)}\n`);
