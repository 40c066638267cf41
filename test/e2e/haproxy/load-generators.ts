/**
 * Real load generators against HAProxy's frontend, where Debian has them: `wrk` (package wrk) and `hey` (package
 * hey) for HTTP/1.1 keep-alive, `h2load` (package nghttp2-client) for HTTP/2 (h2c with prior knowledge, which
 * HAProxy's HTTP frontend takes: it upgrades a connection that starts with the HTTP/2 preface). Each runs for a fixed
 * duration at a paced rate (wrk through a Lua `delay()`, hey with `-q`, h2load with `--rps`), so that it loads the
 * machine as the project's own clients do, and its summary is parsed into served and failed requests. A missing
 * tool is reported with the reason, and the caller skips it.
 */
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export type LoadGeneratorName = 'wrk' | 'hey' | 'h2load';

/** The Debian package each comes from. */
export const PACKAGE_OF: Readonly<Record<LoadGeneratorName, string>> = { wrk: 'wrk', hey: 'hey', h2load: 'nghttp2-client' };

/** Why `tool` cannot run here, or undefined when it can. */
export function loadGeneratorUnavailable(tool: LoadGeneratorName): string | undefined {
  // Each prints its usage or version; only a missing binary fails to spawn.
  const probe = spawnSync(tool, tool === 'h2load' ? ['--version'] : tool === 'wrk' ? ['--version'] : ['-h'], { encoding: 'utf8', timeout: 10_000 });
  if (probe.error !== undefined) return `${tool} is not installed (apt-get install ${PACKAGE_OF[tool]})`;
  return undefined;
}

export interface LoadGeneratorResult {
  readonly served: number;
  readonly failed: number;
  readonly failures: ReadonlyMap<string, number>;
  /** The tool's summary as printed, for diagnostics. */
  readonly output: string;
}

export interface LoadGeneratorRun {
  readonly tool: LoadGeneratorName;
  /** Settles when the tool has exited, with its parsed summary. */
  readonly result: Promise<LoadGeneratorResult>;
  /** Kills the tool if it still runs (its summary is then lost) and waits for its exit. */
  kill(): Promise<void>;
}

export interface LoadGeneratorOptions {
  readonly port: number;
  readonly durationMs: number;
  /** Connections (h2load: clients, one stream at a time each). */
  readonly connections: number;
  /** Requests per second per connection. */
  readonly ratePerConnection: number;
}

/** Starts `tool` against http://127.0.0.1:`port`/ for `durationMs`. */
export async function startLoadGenerator(tool: LoadGeneratorName, options: LoadGeneratorOptions): Promise<LoadGeneratorRun> {
  const url = `http://127.0.0.1:${options.port}/`;
  const seconds = Math.max(1, Math.round(options.durationMs / 1000));
  const directory = tool === 'wrk' ? await mkdtemp(join(tmpdir(), 'esm-wrk-')) : undefined;
  let args: string[];
  if (tool === 'wrk') {
    const script = join(directory ?? '', 'pace.lua');
    // wrk calls delay() before each request of a connection: the pause, in ms.
    await writeFile(script, `function delay()\n  return ${Math.round(1000 / options.ratePerConnection)}\nend\n`);
    args = ['-t1', `-c${options.connections}`, `-d${seconds}s`, '--timeout', '5s', '-s', script, url];
  } else if (tool === 'hey') {
    args = ['-z', `${seconds}s`, '-c', String(options.connections), '-q', String(options.ratePerConnection), '-t', '5', url];
  } else {
    args = ['-c', String(options.connections), '-m', '1', '--rps', String(options.ratePerConnection), '-D', String(seconds), url];
  }
  const child = spawn(tool, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (output = output.length > 200_000 ? output : output + chunk));
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (output = output.length > 200_000 ? output : output + chunk));
  const closed = once(child, 'close').catch(() => undefined);
  // Should this process exit first (a crash), the tool must not outlive it.
  const killOnExit = (): void => void child.kill('SIGKILL');
  process.once('exit', killOnExit);
  // Bounded: the tool's duration and a margin; then it is killed and its summary is missing.
  const watchdog = setTimeout(() => child.kill('SIGKILL'), options.durationMs + 15_000);
  const result = (async (): Promise<LoadGeneratorResult> => {
    try {
      await closed;
    } finally {
      clearTimeout(watchdog);
      process.off('exit', killOnExit);
      if (directory !== undefined) await rm(directory, { recursive: true, force: true });
    }
    const parsed = tool === 'wrk' ? parseWrk(output) : tool === 'hey' ? parseHey(output) : parseH2load(output);
    if (parsed === undefined) throw new Error(`${tool} ${args.join(' ')}: no summary in its output (exit ${child.exitCode ?? child.signalCode}):\n${output}`);
    return { ...parsed, output };
  })();
  return {
    tool,
    result,
    kill: async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await result.catch(() => undefined);
    },
  };
}

type Parsed = Omit<LoadGeneratorResult, 'output'>;

/**
 * wrk's summary: "N requests in 3.01s, ..." counts completed responses, "Non-2xx or 3xx responses: M" the ones of
 * them that were not 2xx or 3xx, "Socket errors: connect a, read b, write c, timeout d" what never got a response.
 */
export function parseWrk(output: string): Parsed | undefined {
  const total = /(\d+) requests in /.exec(output);
  if (total === null) return undefined;
  const non2xx = Number(/Non-2xx or 3xx responses: (\d+)/.exec(output)?.[1] ?? 0);
  const failures = new Map<string, number>();
  if (non2xx > 0) failures.set('non-2xx/3xx', non2xx);
  const socket = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(output);
  const kinds = ['connect', 'read', 'write', 'timeout'] as const;
  kinds.forEach((kind, index) => {
    const count = Number(socket?.[index + 1] ?? 0);
    if (count > 0) failures.set(`socket ${kind} error`, count);
  });
  return { served: Number(total[1]) - non2xx, failed: [...failures.values()].reduce((sum, count) => sum + count, 0), failures };
}

/** hey's "Status code distribution" ([200] N responses) and "Error distribution" ([N] error text). */
export function parseHey(output: string): Parsed | undefined {
  if (!output.includes('Summary:')) return undefined;
  let served = 0;
  const failures = new Map<string, number>();
  for (const match of output.matchAll(/^\s*\[(\d{3})\]\s+(\d+) responses/gm)) {
    const status = Number(match[1]);
    const count = Number(match[2]);
    if (status >= 200 && status < 400) served += count;
    else failures.set(`HTTP ${status}`, (failures.get(`HTTP ${status}`) ?? 0) + count);
  }
  const errors = output.split('Error distribution:')[1] ?? '';
  for (const match of errors.matchAll(/^\s*\[(\d+)\]\s+(.*)$/gm)) {
    const text = match[2] ?? '';
    const kind = /connection refused/.test(text) ? 'connection refused' : /reset/.test(text) ? 'connection reset' : /EOF/.test(text) ? 'EOF' : /deadline|timeout/i.test(text) ? 'timeout' : 'error';
    failures.set(kind, (failures.get(kind) ?? 0) + Number(match[1]));
  }
  return { served, failed: [...failures.values()].reduce((sum, count) => sum + count, 0), failures };
}

/**
 * h2load's "requests: ... done, S succeeded, F failed, E errored, T timeout" and "status codes: a 2xx, b 3xx, c 4xx,
 * d 5xx": served are the 2xx and 3xx; failed are the 4xx and 5xx, and the requests that errored (a stream reset,
 * a connection lost) or timed out.
 */
export function parseH2load(output: string): Parsed | undefined {
  const requests = /requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout/.exec(output);
  const codes = /status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx/.exec(output);
  if (requests === null || codes === null) return undefined;
  const failures = new Map<string, number>();
  const add = (kind: string, count: number): void => {
    if (count > 0) failures.set(kind, count);
  };
  add('HTTP 4xx', Number(codes[3]));
  add('HTTP 5xx', Number(codes[4]));
  add('stream errored', Number(requests[3]));
  add('timeout', Number(requests[4]));
  return { served: Number(codes[1]) + Number(codes[2]), failed: [...failures.values()].reduce((sum, count) => sum + count, 0), failures };
}
