/**
 * Running the documented commands as a newcomer types them: the code blocks read from README.md and docs/, npm
 * spawned in the checkout, its output collected line by line. npm scripts compile with `tsc -b`, which
 * skips an up-to-date dist/ (npm test builds first), so spawning `npm start` costs a second, not a build.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { resolve } from 'node:path';
import { cleanEnvironment, REPO_ROOT } from '../support/process.js';

/** A documentation file of the checkout, by its path from the root: README.md, docs/development.md, ... */
export function doc(path: string): string {
  return readFileSync(resolve(REPO_ROOT, path), 'utf8');
}

export function packageScripts(): Readonly<Record<string, string>> {
  return (JSON.parse(readFileSync(resolve(REPO_ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts;
}

/** The text of the section of `path` under `heading` (any level), up to the next heading of any level. */
export function docSection(path: string, heading: string): string {
  const lines = doc(path).split('\n');
  // A `# comment` inside a code block is not a heading.
  let fenced = false;
  const isHeading = lines.map((line) => {
    if (line.startsWith('```')) fenced = !fenced;
    return !fenced && /^#+ /.test(line);
  });
  const start = lines.findIndex((line, index) => isHeading[index] && line.replace(/^#+ /, '') === heading);
  assert.ok(start !== -1, `${path} has no section "${heading}"`);
  const end = lines.findIndex((_, index) => index > start && isHeading[index]);
  return lines.slice(start + 1, end === -1 ? undefined : end).join('\n');
}

/** The commands of the `sh` code blocks of a section (continued lines joined), neither blank nor comments. */
export function docCommands(path: string, heading: string): string[] {
  const blocks = [...docSection(path, heading).matchAll(/^```sh\n([\s\S]*?)^```$/gm)].map((match) => match[1] ?? '');
  assert.ok(blocks.length > 0, `${path} section "${heading}" has no sh block`);
  return blocks
    .flatMap((block) => block.replaceAll('\\\n', ' ').split('\n'))
    .map((line) => line.trim())
    .filter((line) => line !== '' && !line.startsWith('#'));
}

/** Words of a command line without quotes or expansions, as the documented local commands are written. */
export function words(line: string): string[] {
  assert.doesNotMatch(line, /["'`$\\]/, `"${line}" needs a real shell to split`);
  return line.split(/\s+/).filter((word) => word !== '');
}

/** `--name=value` in `args`, the last one winning as in the programs' own parsers. */
export function flagValue(args: readonly string[], name: string): string | undefined {
  return args.filter((arg) => arg.startsWith(`--${name}=`)).at(-1)?.slice(name.length + 3);
}

export interface Npm {
  readonly child: ChildProcess;
  stdout(): string;
  stderr(): string;
  /** Resolves with the first stdout line (seen or to come) that `predicate` accepts. */
  line(predicate: (line: string) => boolean, timeoutMs?: number): Promise<string>;
  /** The first JSON object printed on stdout (a log line, the emulator's ports) that `predicate` accepts. */
  json(predicate: (value: Record<string, unknown>) => boolean, timeoutMs?: number): Promise<Record<string, unknown>>;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** SIGKILL to npm and everything it started (its process group); for t.after(). */
  kill(): void;
}

/**
 * `npm ARGS` in the checkout, in a process group of its own: a terminal's Ctrl-C is a SIGINT to the whole
 * group, and cleaning up after a failed test must reach the server that npm's shell started.
 */
export function spawnNpm(args: readonly string[], options: { env?: Record<string, string>; input?: string } = {}): Npm {
  const child = spawn('npm', args, {
    cwd: REPO_ROOT,
    detached: true,
    stdio: [options.input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
    env: cleanEnvironment(options.env),
  });
  if (options.input !== undefined) child.stdin?.end(options.input);
  let stdout = '';
  let stderr = '';
  const waiters = new Set<() => void>();
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
    stdout += chunk;
    for (const waiter of waiters) waiter();
  });
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  let running = true;
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolvePromise) => {
    child.once('exit', (code, signal) => {
      running = false;
      for (const waiter of waiters) waiter();
      resolvePromise({ code, signal });
    });
  });
  const line = (predicate: (line: string) => boolean, timeoutMs = 30_000): Promise<string> =>
    new Promise((resolvePromise, reject) => {
      const check = (): void => {
        const found = stdout.split('\n').find(predicate);
        if (found !== undefined) {
          done();
          resolvePromise(found);
        } else if (!running) {
          done();
          reject(new Error(`npm ${args.join(' ')} exited without the line expected\nstdout:\n${stdout}\nstderr:\n${stderr}`));
        }
      };
      const timer = setTimeout(() => {
        done();
        reject(new Error(`npm ${args.join(' ')}: no line expected within ${timeoutMs} ms\nstdout:\n${stdout}\nstderr:\n${stderr}`));
      }, timeoutMs);
      const done = (): void => {
        clearTimeout(timer);
        waiters.delete(check);
      };
      waiters.add(check);
      check();
    });
  const parse = (text: string): Record<string, unknown> | undefined => {
    if (!text.startsWith('{')) return undefined;
    try {
      return JSON.parse(text) as Record<string, unknown>;
    } catch {
      return undefined;
    }
  };
  return {
    child,
    stdout: () => stdout,
    stderr: () => stderr,
    line,
    json: async (predicate, timeoutMs) => {
      const found = await line((text) => {
        const value = parse(text);
        return value !== undefined && predicate(value);
      }, timeoutMs);
      return parse(found) as Record<string, unknown>;
    },
    exited,
    kill: () => {
      // Even once npm has exited: a server its shell left behind stays in the group.
      if (child.pid !== undefined) {
        try {
          process.kill(-child.pid, 'SIGKILL');
        } catch {
          // The group is already gone.
        }
      }
    },
  };
}

/** Whether nothing listens on the port any more: it can be bound again. */
export function portIsFree(port: number, host = '127.0.0.1'): Promise<boolean> {
  return new Promise((resolvePromise) => {
    const server = createServer();
    server.once('error', () => resolvePromise(false));
    server.listen(port, host, () => server.close(() => resolvePromise(true)));
  });
}
