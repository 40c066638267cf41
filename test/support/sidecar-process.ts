/**
 * Runs the built sidecar (`node dist/main.js mode=sidecar …`) as a child process, as the pod does, and
 * reads its JSON logs. Run `npm run build` first (`npm test` does).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

export const BUILT_MAIN = fileURLToPath(new URL('../../dist/main.js', import.meta.url));

export type LogLine = Record<string, unknown>;

export interface Exit {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
}

export interface SidecarProcess {
  readonly child: ChildProcess;
  readonly port: number;
  readonly logs: readonly LogLine[];
  readonly exited: Promise<Exit>;
  url(path: string): string;
  stderr(): string;
  /** Resolves with the first log line (already seen or to come) matching `predicate`. */
  waitForLog(predicate: (line: LogLine) => boolean, timeoutMs?: number): Promise<LogLine>;
  /** SIGKILL if still running; for t.after(). */
  kill(): Promise<void>;
}

function assertBuilt(): void {
  if (!existsSync(BUILT_MAIN)) throw new Error(`${BUILT_MAIN} is missing: run \`npm run build\` before these tests`);
}

export interface SpawnOptions {
  readonly readyTimeoutMs?: number;
  /** --serve-address; null leaves the sidecar's default (every interface, both families). Default 127.0.0.1. */
  readonly serveAddress?: string | null;
  /** Runs the sidecar under `ulimit -n <fileLimit>` (bash), as a container with that open-file limit would. */
  readonly fileLimit?: number;
}

/** Starts the sidecar and resolves once it logs that it listens (its port read from that line). */
export async function spawnSidecar(flags: readonly string[], options: SpawnOptions = {}): Promise<SidecarProcess> {
  const { readyTimeoutMs = 10_000, serveAddress = '127.0.0.1', fileLimit } = options;
  const addressFlag = serveAddress === null ? [] : [`--serve-address=${serveAddress}`];
  return spawnSidecarWith(['mode=sidecar', ...addressFlag, '--serve-port=0', ...flags], {}, readyTimeoutMs, fileLimit);
}

/**
 * Starts `dist/main.js` with exactly `args` (the args of a pod spec, say) and `env` on top of a clean
 * environment: no SHUTDOWN_MANAGER_* from the caller's, so that the given configuration is the whole of it.
 */
export async function spawnSidecarWith(
  args: readonly string[],
  env: Readonly<Record<string, string>>,
  readyTimeoutMs = 10_000,
  fileLimit?: number,
): Promise<SidecarProcess> {
  assertBuilt();
  const command = [BUILT_MAIN, ...args];
  // `exec` keeps one process: signals sent to the child reach node itself, not a shell in between.
  const [file, argv] =
    fileLimit === undefined
      ? [process.execPath, command]
      : ['bash', ['-c', `ulimit -n ${Math.trunc(fileLimit)} && exec "$@"`, 'bash', process.execPath, ...command]];
  const child = spawn(file, argv, {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...withoutSidecarSettings(process.env), NODE_OPTIONS: '', ...env },
  });
  const logs: LogLine[] = [];
  const waiters = new Set<{ predicate: (line: LogLine) => boolean; resolve: (line: LogLine) => void }>();
  let stderr = '';
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  createInterface({ input: child.stdout! }).on('line', (text) => {
    let line: LogLine;
    try {
      line = JSON.parse(text) as LogLine;
    } catch {
      line = { unparsed: text };
    }
    logs.push(line);
    for (const waiter of waiters) {
      if (waiter.predicate(line)) {
        waiters.delete(waiter);
        waiter.resolve(line);
      }
    }
  });
  // 'close', not 'exit': 'exit' can come before the last stdout lines are read, and waitForLog would
  // then reject for a line that was logged.
  const exited = once(child, 'close').then(([code, signal]) => ({ code, signal }) as Exit);

  const waitForLog = (predicate: (line: LogLine) => boolean, timeoutMs = 5_000): Promise<LogLine> => {
    const seen = logs.find(predicate);
    if (seen !== undefined) return Promise.resolve(seen);
    return new Promise((resolve, reject) => {
      const waiter = {
        predicate,
        resolve: (line: LogLine) => {
          clearTimeout(timer);
          resolve(line);
        },
      };
      const timer = setTimeout(() => {
        waiters.delete(waiter);
        reject(new Error(`no matching sidecar log within ${timeoutMs} ms; logs:\n${logs.map((l) => JSON.stringify(l)).join('\n')}\nstderr: ${stderr}`));
      }, timeoutMs);
      waiters.add(waiter);
      void exited.then(() => {
        if (!waiters.has(waiter)) return;
        waiters.delete(waiter);
        clearTimeout(timer);
        reject(new Error(`sidecar exited before the expected log; stderr: ${stderr}`));
      });
    });
  };

  const kill = async (): Promise<void> => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGKILL');
      await exited;
    }
  };
  let listening: LogLine;
  try {
    listening = await waitForLog((line) => line['event'] === 'listening', readyTimeoutMs);
  } catch (error) {
    await kill();
    throw error;
  }
  const port = Number(listening['port']);
  return {
    child,
    port,
    logs,
    exited,
    url: (path) => `http://127.0.0.1:${port}${path}`,
    stderr: () => stderr,
    waitForLog,
    kill,
  };
}

function withoutSidecarSettings(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(env).filter(([name]) => !name.startsWith('SHUTDOWN_MANAGER_')));
}

/** Runs the sidecar to completion (for --help and bad flags), bounded by `timeoutMs`; a clean environment as spawnSidecarWith's. */
export async function runSidecarToExit(args: readonly string[], timeoutMs = 10_000): Promise<Exit & { stdout: string; stderr: string }> {
  assertBuilt();
  const child = spawn(process.execPath, [BUILT_MAIN, 'mode=sidecar', ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    timeout: timeoutMs,
    env: { ...withoutSidecarSettings(process.env), NODE_OPTIONS: '' },
  });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  const [code, signal] = (await once(child, 'close')) as [number | null, NodeJS.Signals | null];
  return { code, signal, stdout, stderr };
}
