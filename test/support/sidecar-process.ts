/**
 * Runs the built sidecar as a child process, as the image does in a pod (`node dist/entry.cjs mode=sidecar …`),
 * and reads its JSON logs (see process.ts).
 */
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
}

/** Starts the sidecar and resolves once it logs that it listens (its port read from that line). */
export async function spawnSidecar(flags: readonly string[], options: SpawnOptions = {}): Promise<SidecarProcess> {
  const { readyTimeoutMs = 10_000, serveAddress = '127.0.0.1', fileLimit } = options;
  const addressFlag = serveAddress === null ? [] : [`--serve-address=${serveAddress}`];
  return spawnSidecarWith(['mode=sidecar', ...addressFlag, '--serve-port=0', ...flags], {}, readyTimeoutMs, fileLimit);
}

/**
 * Starts `dist/entry.cjs` with exactly `args` (the args of a pod spec, say) and `env` on top of a clean
 * environment: no SHUTDOWN_MANAGER_* from the caller's, so that the given configuration is the whole of it.
 */
export async function spawnSidecarWith(
  args: readonly string[],
  env: Readonly<Record<string, string>>,
  readyTimeoutMs = 10_000,
  fileLimit?: number,
): Promise<SidecarProcess> {
  const sidecar = await startBuiltEntry(args, {
    ready: (line) => line['event'] === 'listening',
    readyTimeoutMs,
    env,
    ...(fileLimit === undefined ? {} : { fileLimit }),
  });
  const port = Number(sidecar.ready['port']);
  return { ...sidecar, port, url: (path) => `http://127.0.0.1:${port}${path}` };
}

/** Runs the sidecar to completion (for --help and bad flags), bounded by `timeoutMs`. */
export function runSidecarToExit(args: readonly string[], timeoutMs = 10_000): Promise<Finished> {
  return runBuiltEntry(['mode=sidecar', ...args], { timeoutMs });
}
