/**
 * This project's programs run as users run them: node in a child process, usually on the built entry point
 * (`npm run build` first; `npm test` does), in an environment without the caller's SHUTDOWN_MANAGER_*
 * settings. A command runs to its exit; a server (the webhook, the sidecar) has its stdout read as JSON log
 * lines, and is ready once it logs the line that says so.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

export const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
/** The image's entry point (the Dockerfile's ENTRYPOINT): every mode and command, as a pod or a user starts it. */
export const BUILT_ENTRY = fileURLToPath(new URL('../../dist/entry.cjs', import.meta.url));

/** The environment for a spawned process under test: the caller's, minus any SHUTDOWN_MANAGER_* it happens to set. */
export function cleanEnvironment(extra: Readonly<Record<string, string>> = {}): NodeJS.ProcessEnv {
  const inherited = Object.entries(process.env).filter(([name]) => !name.startsWith('SHUTDOWN_MANAGER_'));
  return { ...Object.fromEntries(inherited), NODE_OPTIONS: '', ...extra };
}

function assertBuilt(): void {
  if (!existsSync(BUILT_ENTRY)) throw new Error(`${BUILT_ENTRY} is missing: run \`npm run build\` before these tests`);
}

export interface Exit {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
}

export interface Finished extends Exit {
  readonly stdout: string;
  readonly stderr: string;
}

export interface RunOptions {
  /** On top of the clean environment. */
  readonly env?: Readonly<Record<string, string>>;
  /** Written to standard input, which is then closed; without it, standard input is empty. */
  readonly input?: string;
  readonly cwd?: string;
  /** SIGTERM after this long; default 10 s. */
  readonly timeoutMs?: number;
}

/** `node ARGS` to its exit. */
export async function runNode(args: readonly string[], options: RunOptions = {}): Promise<Finished> {
  const child = spawn(process.execPath, args, {
    stdio: [options.input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
    timeout: options.timeoutMs ?? 10_000,
    env: cleanEnvironment(options.env),
    ...(options.cwd === undefined ? {} : { cwd: options.cwd }),
  });
  child.stdin?.end(options.input);
  let stdout = '';
  let stderr = '';
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  const [code, signal] = (await once(child, 'close')) as [number | null, NodeJS.Signals | null];
  return { code, signal, stdout, stderr };
}

/** `node dist/entry.cjs ARGS` to its exit. */
export function runBuiltEntry(args: readonly string[], options: RunOptions = {}): Promise<Finished> {
  assertBuilt();
  return runNode([BUILT_ENTRY, ...args], options);
}

export type LogLine = Record<string, unknown>;

export interface LoggingProcess {
  readonly child: ChildProcess;
  readonly logs: readonly LogLine[];
  /** The line that said it was ready. */
  readonly ready: LogLine;
  readonly exited: Promise<Exit>;
  stderr(): string;
  /** Resolves with the first log line (already seen or to come) matching `predicate`. */
  waitForLog(predicate: (line: LogLine) => boolean, timeoutMs?: number): Promise<LogLine>;
  /** SIGKILL if still running; for t.after(). */
  kill(): Promise<void>;
}

export interface StartOptions {
  /** The log line that says the process is ready to be used. */
  readonly ready: (line: LogLine) => boolean;
  readonly readyTimeoutMs?: number;
  /** On top of the clean environment. */
  readonly env?: Readonly<Record<string, string>>;
  readonly cwd?: string;
  /** Runs node under `ulimit -n <fileLimit>` (bash), as a container with that open-file limit would. */
  readonly fileLimit?: number;
  /**
   * A command that runs node in its place (it must end by exec'ing its remaining arguments), such as a mount
   * namespace of the container's volumes (see mount-namespace.ts).
   */
  readonly launcher?: readonly string[];
  /** The user and group to run as (a container's runAsUser and runAsGroup); only root may change them. */
  readonly uid?: number;
  readonly gid?: number;
}

/** Starts `node ARGS` and resolves once it logs its ready line; a process that does not is killed. */
export async function startNode(args: readonly string[], options: StartOptions): Promise<LoggingProcess> {
  const { ready, readyTimeoutMs = 10_000, env = {}, cwd, fileLimit, launcher = [], uid, gid } = options;
  // `exec` keeps one process: signals sent to the child reach node itself, not a shell in between.
  const command = [...launcher, process.execPath, ...args];
  const [file, ...argv] = fileLimit === undefined ? command : ['bash', '-c', `ulimit -n ${Math.trunc(fileLimit)} && exec "$@"`, 'bash', ...command];
  const child = spawn(file ?? process.execPath, argv, {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: cleanEnvironment(env),
    ...(cwd === undefined ? {} : { cwd }),
    ...(uid === undefined ? {} : { uid }),
    ...(gid === undefined ? {} : { gid }),
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
        reject(new Error(`no matching log within ${timeoutMs} ms; logs:\n${logs.map((l) => JSON.stringify(l)).join('\n')}\nstderr: ${stderr}`));
      }, timeoutMs);
      waiters.add(waiter);
      void exited.then(() => {
        if (!waiters.has(waiter)) return;
        waiters.delete(waiter);
        clearTimeout(timer);
        reject(new Error(`the process exited before the expected log; stderr: ${stderr}`));
      });
    });
  };

  const kill = async (): Promise<void> => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGKILL');
      await exited;
    }
  };
  try {
    const readyLine = await waitForLog(ready, readyTimeoutMs);
    return { child, logs, ready: readyLine, exited, stderr: () => stderr, waitForLog, kill };
  } catch (error) {
    await kill();
    throw error;
  }
}

/** `node dist/entry.cjs ARGS`, once it logs its ready line. */
export function startBuiltEntry(args: readonly string[], options: StartOptions): Promise<LoggingProcess> {
  assertBuilt();
  return startNode([BUILT_ENTRY, ...args], options);
}

export interface WebhookProcess extends LoggingProcess {
  /** https://127.0.0.1:port, from its 'webhook listening' line. */
  readonly url: string;
}

export const WEBHOOK_LISTENING = (line: LogLine): boolean => line['msg'] === 'webhook listening';

/** `node dist/entry.cjs ARGS` as the webhook, once it listens. */
export async function startWebhook(args: readonly string[], options: Omit<StartOptions, 'ready'> = {}): Promise<WebhookProcess> {
  const webhook = await startBuiltEntry(args, { ...options, ready: WEBHOOK_LISTENING });
  return { ...webhook, url: String(webhook.ready['url']) };
}
