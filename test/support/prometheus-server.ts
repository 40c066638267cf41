/**
 * A real Prometheus server for end-to-end tests: the `prometheus` binary of Debian's package, the one CI installs
 * for promtool (.ci/run). It runs with a test's config file, its TSDB in the test's directory, and listens on
 * loopback only.
 *
 * Its port: Prometheus cannot be told to take port 0 and then say which port it got (it logs the address it was
 * given, 127.0.0.1:0). So a free port is chosen first (ports.ts: below the kernel's ephemeral range, where no
 * outgoing connection takes it meanwhile) and handed to it; should another process bind it first, Prometheus exits
 * with "address already in use" and is started again on another port, a bounded number of times.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { freePort } from './ports.js';

const BINARY = 'prometheus';
/** Starts on another port after an "address already in use", at most this many times in all. */
const PORT_ATTEMPTS = 5;
/** The TSDB opens and the config loads in well under a second on an idle machine: generous for a loaded one. */
const READY_TIMEOUT_MS = 60_000;
const STOP_TIMEOUT_MS = 15_000;
/** The end of its log kept for failure messages; Prometheus logs a few lines a second at most. */
const LOG_LIMIT = 64 * 1024;

/**
 * Why a Prometheus server cannot run here, or undefined when it can. CI installs the package and says why in
 * PROMTOOL_UNAVAILABLE when it could not (the same package brings promtool and the server).
 */
export function prometheusUnavailable(): string | undefined {
  const probe = spawnSync(BINARY, ['--version'], { encoding: 'utf8', timeout: 20_000 });
  if (probe.status === 0) return undefined;
  const why = process.env['PROMTOOL_UNAVAILABLE'];
  if (process.env['CI'] === 'true' && why === undefined) throw new Error('the prometheus server is missing: .ci/run installs it (Debian package prometheus)');
  return `the prometheus server is not installed (${why ?? 'apt-get install prometheus'}); CI runs this`;
}

/** Prometheus's answer to an instant query, as its HTTP API gives it. */
export interface QueryAnswer {
  readonly httpStatus: number;
  readonly status: 'success' | 'error';
  readonly errorType?: string;
  readonly error?: string;
  readonly data?: { readonly resultType: string; readonly result: readonly { readonly metric: Record<string, string>; readonly value: [number, string] }[] };
}

export interface PrometheusServer {
  /** http://127.0.0.1:PORT */
  readonly url: string;
  /** GET /api/v1/query?query=... at the present time. */
  query(promql: string): Promise<QueryAnswer>;
  /** The end of what it logged (stderr), for failure messages. */
  log(): string;
  /** SIGTERM, then SIGKILL if it has not exited within 15 s; resolves once it has. */
  stop(): Promise<void>;
}

/** Starts Prometheus on `config` (a prometheus.yml's text), its data under `dir`; resolves once /-/ready answers 200. */
export async function startPrometheus(dir: string, config: string): Promise<PrometheusServer> {
  const configFile = join(dir, 'prometheus.yml');
  await writeFile(configFile, config);
  const failures: string[] = [];
  for (let attempt = 1; attempt <= PORT_ATTEMPTS; attempt += 1) {
    const port = await freePort();
    // A data directory per attempt: a killed attempt's lock file cannot be in the next one's way.
    const dataDir = join(dir, `data-${attempt}`);
    await mkdir(dataDir);
    const server = launch(configFile, dataDir, port);
    const outcome = await untilReady(server);
    if (outcome === 'ready') return server;
    await server.stop();
    if (!/address already in use/.test(server.log())) throw new Error(`prometheus did not become ready on port ${port}: ${outcome}\n${server.log()}`);
    failures.push(`port ${port} was taken`);
  }
  throw new Error(`prometheus could not listen in ${PORT_ATTEMPTS} attempts: ${failures.join('; ')}`);
}

interface Launched extends PrometheusServer {
  readonly child: ChildProcess;
  readonly exited: Promise<void>;
}

function launch(configFile: string, dataDir: string, port: number): Launched {
  const child = spawn(
    BINARY,
    [
      `--config.file=${configFile}`,
      `--storage.tsdb.path=${dataDir}`,
      `--web.listen-address=127.0.0.1:${port}`,
      // Debian's defaults point the console templates at /etc/prometheus: nothing of the host's is read.
      `--web.console.templates=${dataDir}`,
      `--web.console.libraries=${dataDir}`,
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let log = '';
  const keep = (chunk: string): void => {
    log = (log + chunk).slice(-LOG_LIMIT);
  };
  child.stdout?.setEncoding('utf8').on('data', keep);
  child.stderr?.setEncoding('utf8').on('data', keep);
  // A spawn failure (ENOENT) emits 'error', then 'close'.
  child.on('error', (error) => keep(`spawn failed: ${error.message}\n`));
  const exited = once(child, 'close').then(() => undefined);
  const url = `http://127.0.0.1:${port}`;
  const running = (): boolean => child.exitCode === null && child.signalCode === null;
  return {
    child,
    exited,
    url,
    log: () => log,
    query: async (promql) => {
      const response = await fetch(`${url}/api/v1/query?${new URLSearchParams({ query: promql }).toString()}`, { signal: AbortSignal.timeout(20_000) });
      return { httpStatus: response.status, ...((await response.json()) as Omit<QueryAnswer, 'httpStatus'>) };
    },
    stop: async () => {
      if (!running()) return exited;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), STOP_TIMEOUT_MS);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** 'ready' once /-/ready answers 200 as Prometheus does; else why not: it exited, or the time ran out. */
async function untilReady(server: Launched): Promise<'ready' | string> {
  let exited = false;
  void server.exited.then(() => (exited = true));
  const deadline = Date.now() + READY_TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (exited) return `it exited (code ${server.child.exitCode}, signal ${server.child.signalCode})`;
    try {
      const response = await fetch(`${server.url}/-/ready`, { signal: AbortSignal.timeout(5_000) });
      const body = await response.text();
      // Its own words: not some other server that happens to hold the port.
      if (response.status === 200 && /Prometheus Server is Ready/.test(body) && !exited) return 'ready';
    } catch {
      // Not listening yet.
    }
    await sleep(100);
  }
  return `/-/ready did not answer 200 within ${READY_TIMEOUT_MS} ms`;
}
