/** Small helpers shared by the bench scripts: free ports, waiting for a server, percentiles. */
export { freePort } from '../test/support/ports.js';
import { setTimeout as sleep } from 'node:timers/promises';

/** Calls `probe` until it resolves true, at most `limitMs`. */
export async function waitUntil(probe: () => Promise<boolean>, limitMs: number, what: string): Promise<void> {
  const deadline = Date.now() + limitMs;
  while (Date.now() < deadline) {
    if (await probe().catch(() => false)) return;
    await sleep(20);
  }
  throw new Error(`${what} was not ready within ${limitMs} ms`);
}

export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return NaN;
  const index = Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1);
  return sorted[Math.max(0, index)] as number;
}

export function summarize(values: readonly number[]): { min: number; median: number; max: number } {
  const sorted = [...values].sort((a, b) => a - b);
  return { min: sorted[0] ?? NaN, median: percentile(sorted, 50), max: sorted[sorted.length - 1] ?? NaN };
}
