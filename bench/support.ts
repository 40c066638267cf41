/** Helpers shared by the bench scripts: ports, waiting, statistics, /proc readings and the results table. */
export { freePort } from '../test/support/ports.js';
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseDockerfile, runtimeEnv } from '../test/docker/dockerfile.js';
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

export function median(values: readonly number[]): number {
  return summarize(values).median;
}

/** Resident and peak resident memory of a process, in MiB, from /proc (what the kubelet's cgroup sees, near enough). */
export function residentMib(pid: number): { rss: number; peak: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const field = (name: string): number => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN) / 1024;
  return { rss: field('VmRSS'), peak: field('VmHWM') };
}

/**
 * What a process's resident memory costs a fleet, in MiB (/proc/PID/status): `anonymous` (RssAnon: heap,
 * stacks, JIT code) is paid by every instance; `fileBacked` (RssFile + RssShmem: the node binary's and
 * libraries' pages) is shared by every container on a node that maps the same image layer.
 */
export function memoryShares(pid: number): { anonymous: number; fileBacked: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const field = (name: string): number => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN) / 1024;
  return { anonymous: field('RssAnon'), fileBacked: field('RssFile') + field('RssShmem') };
}

/**
 * Runs `work` while reading `pid`'s resident and private memory every `everyMs` ms; their peaks, a last reading
 * included (what /proc/PID/status's VmHWM would give for RSS, but for this stretch of time alone).
 */
export async function peakMemoryDuring<T>(pid: number, work: () => Promise<T>, everyMs = 25): Promise<{ result: T; rssMiB: number; anonymousMiB: number }> {
  let rssMiB = 0;
  let anonymousMiB = 0;
  const read = (): void => {
    rssMiB = Math.max(rssMiB, residentMib(pid).rss);
    anonymousMiB = Math.max(anonymousMiB, memoryShares(pid).anonymous);
  };
  const sampler = setInterval(read, everyMs);
  try {
    const result = await work();
    read();
    return { result, rssMiB, anonymousMiB };
  } finally {
    clearInterval(sampler);
  }
}

/** CPU time a process has used so far (user + system), in µs; /proc counts it in clock ticks (10 ms). */
export function cpuMicros(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? [];
  return (Number(fields[11]) + Number(fields[12])) * 10_000;
}

/** The 1-minute load average: how busy the (shared) machine was while a figure was taken. */
export function loadAverage(): string {
  return (loadavg()[0] ?? NaN).toFixed(2);
}

/** One line of the results table. `pass` is undefined for figures shown for information, without a target. */
export interface Figure {
  readonly name: string;
  readonly value: string;
  readonly target: string;
  readonly pass: boolean | undefined;
}

export const TABLE_HEADERS = ['figure', 'measured', 'target', 'result'] as const;
export const resultOf = (figure: Figure): string => (figure.pass === undefined ? 'info' : figure.pass ? 'PASS' : 'FAIL');

/** The results table as Markdown lines, the same printed and written into docs/performance.md (bench/doc-sections.ts). */
export function tableLines(figures: readonly Figure[]): string[] {
  const rows = figures.map((f) => [f.name, f.value, f.target, resultOf(f)].map((cell) => cell.replaceAll('|', '\\|')));
  const widths = TABLE_HEADERS.map((header, column) => Math.max(header.length, ...rows.map((row) => (row[column] as string).length)));
  const line = (cells: readonly string[]): string => `| ${cells.map((cell, column) => cell.padEnd(widths[column] as number)).join(' | ')} |`;
  return [line(TABLE_HEADERS), `|${widths.map((width) => '-'.repeat(width + 2)).join('|')}|`, ...rows.map(line)];
}

export function printTable(figures: readonly Figure[]): void {
  for (const line of tableLines(figures)) console.log(line);
}

export const percent = (ratio: number): string => `${(ratio * 100).toFixed(1)} %`;
export const mib = (value: number): string => `${value.toFixed(1)} MiB`;

/** The image's NODE_OPTIONS for the webhook (the runtime stage's ENV), or '' when it sets none. */
export function imageNodeOptions(): string {
  const dockerfile = readFileSync(join(fileURLToPath(new URL('..', import.meta.url)), 'Dockerfile'), 'utf8');
  return runtimeEnv(parseDockerfile(dockerfile))['NODE_OPTIONS'] ?? '';
}

const EMULATOR_CLI = fileURLToPath(new URL('../src/emulator/cli.ts', import.meta.url));

/**
 * The Envoy emulator in a process of its own (src/emulator/cli.ts), when what is measured must not share its
 * process: 10,000 connections are 10,000 descriptors on each side, and a heap figure must be the sidecar's alone.
 */
export async function spawnEmulatorProcess(): Promise<{ admin: number; tcp: number; child: ChildProcess }> {
  const child = spawn(process.execPath, ['--import', 'tsx', EMULATOR_CLI, '--admin-port=0', '--http-port=0', '--tcp-port=0', '--host=127.0.0.1'], {
    stdio: ['ignore', 'pipe', 'inherit'],
    env: { PATH: process.env.PATH },
  });
  const [line] = (await Promise.race([once(child.stdout as NodeJS.ReadableStream, 'data'), sleep(20_000).then(() => [undefined])])) as [Buffer | undefined];
  if (line === undefined) throw new Error('the emulator did not start within 20 s');
  const ports = JSON.parse(line.toString().split('\n')[0] as string) as { admin: number; tcp: number };
  return { ...ports, child };
}
