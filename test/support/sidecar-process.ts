/**
 * Runs the built sidecar as a child process, as the image does in a pod (`node dist/entry.cjs mode=sidecar …`),
 * and reads its JSON logs (see process.ts).
 */
import { readFileSync } from 'node:fs';
import type { PodDrainValues } from '../../src/config/drain.js';
import { SHUTDOWN_TOKEN_ENV } from '../../src/config/sidecar.js';
import { SIDECAR_ENV, sidecarArgs } from '../../src/inject/sidecar.js';
import { runBuiltEntry, startBuiltEntry, type Finished, type LoggingProcess } from './process.js';

export interface SidecarProcess extends LoggingProcess {
  readonly port: number;
  url(path: string): string;
}

export interface SpawnOptions {
  readonly readyTimeoutMs?: number;
  /** --serve-address; null leaves the sidecar's default (every interface, both families). Default 127.0.0.1. */
  readonly serveAddress?: string | null;
  /** Runs the sidecar under `ulimit -n <fileLimit>` (bash), as a container with that open-file limit would. */
  readonly fileLimit?: number;
  /** See StartOptions: a mount namespace, a user. */
  readonly launcher?: readonly string[];
  readonly uid?: number;
  readonly gid?: number;
}

/** Starts the sidecar and resolves once it logs that it listens (its port read from that line). */
export async function spawnSidecar(flags: readonly string[], options: SpawnOptions = {}): Promise<SidecarProcess> {
  const { serveAddress = '127.0.0.1', ...start } = options;
  const addressFlag = serveAddress === null ? [] : [`--serve-address=${serveAddress}`];
  // The observed rule (quiet-period, on by default) makes every drain last its quiet period: the tests of other
  // promises run with it off, and those of the rule (load-balancer-process.test.ts) turn it on; a flag given wins.
  return spawnSidecarWith(['mode=sidecar', ...addressFlag, '--serve-port=0', '--quiet-period=0s', ...flags], {}, start);
}

/**
 * Starts `dist/entry.cjs` with exactly `args` (the args of a pod spec, say) and `env` on top of a clean
 * environment: no SHUTDOWN_MANAGER_* from the caller's, so that the given configuration is the whole of it.
 */
export async function spawnSidecarWith(
  args: readonly string[],
  env: Readonly<Record<string, string>>,
  options: Omit<SpawnOptions, 'serveAddress'> = {},
): Promise<SidecarProcess> {
  const { readyTimeoutMs = 10_000, ...start } = options;
  const sidecar = await startBuiltEntry(args, { ready: (line) => line['event'] === 'listening', readyTimeoutMs, env, ...start });
  const port = Number(sidecar.ready['port']);
  return { ...sidecar, port, url: (path) => `http://127.0.0.1:${port}${path}` };
}

/** Runs the sidecar to completion (for --help and bad flags), bounded by `timeoutMs`. */
export function runSidecarToExit(args: readonly string[], timeoutMs = 10_000): Promise<Finished> {
  return runBuiltEntry(['mode=sidecar', ...args], { timeoutMs });
}

/** What the injector's args set that a test on a shared machine must move: where to listen, Envoy's admin port, the state directory. */
const MOVED_FLAGS = ['--serve-address=', '--serve-port=', '--admin-port=', '--state-dir='];

export interface InjectedOptions {
  /** Envoy's admin port (the emulator's). */
  readonly adminPort: number;
  /** A writable state directory in place of the pod's emptyDir. */
  readonly stateDir: string;
  /** The pod's shutdown token, given by environment as the injector does. */
  readonly token: string;
  /** false leaves out SIDECAR_ENV (NODE_OPTIONS): the same sidecar at V8's default heap settings, for comparison. Default true. */
  readonly sidecarEnv?: boolean;
}

/**
 * Starts the sidecar as the injector writes it into a pod: the args of sidecarArgs(plan) and the container's
 * environment (SIDECAR_ENV and the token), on a clean environment. Only where it listens (loopback, a free
 * port), Envoy's admin port and its state directory are moved.
 */
export function spawnInjectedSidecar(plan: PodDrainValues, options: InjectedOptions): Promise<SidecarProcess> {
  const args = [
    ...sidecarArgs(plan).filter((arg) => !MOVED_FLAGS.some((flag) => arg.startsWith(flag))),
    '--serve-address=127.0.0.1',
    '--serve-port=0',
    `--admin-port=${options.adminPort}`,
    `--state-dir=${options.stateDir}`,
  ];
  const injected = options.sidecarEnv === false ? [] : SIDECAR_ENV;
  const env = Object.fromEntries([...injected, { name: SHUTDOWN_TOKEN_ENV, value: options.token }].map(({ name, value }) => [name, value]));
  return spawnSidecarWith(args, env);
}

/** A process's environment as the kernel gave it at exec (/proc/<pid>/environ); Linux only. */
export function processEnvironment(pid: number): Record<string, string> {
  const entries = readFileSync(`/proc/${pid}/environ`, 'latin1').split('\0').filter((entry) => entry !== '');
  return Object.fromEntries(entries.map((entry) => [entry.slice(0, entry.indexOf('=')), entry.slice(entry.indexOf('=') + 1)]));
}
