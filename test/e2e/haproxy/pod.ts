/**
 * One emulated Envoy pod behind HAProxy: the Envoy emulator in this process (src/emulator/, with Envoy's HTTP
 * health-check filter on the traffic listener at /healthz) and, unless it is the control, the built sidecar as a
 * child process (`node dist/entry.cjs mode=sidecar`, as the image runs it; `npm run build` first), pointed at the
 * emulator's admin port. Its deletion is the kubelet's: Envoy's preStop `GET /shutdown`, and Envoy's SIGTERM (the
 * emulator closed: every connection cut, the ports refuse) the moment it answers; without a sidecar, SIGTERM at
 * once.
 */
import http from 'node:http';
import { EnvoyEmulator } from '../../../src/emulator/envoy-emulator.js';
import { parseJson } from '../fleet/pod.js';
import { SIDECAR_PATHS } from '../../../src/config/endpoints.js';
import { startNode, type LogLine } from '../../support/process.js';
import { spawnSidecar, type SidecarProcess } from '../../support/sidecar-process.js';

/** Envoy's health-check filter path on the traffic listener, which HAProxy's HTTP checks ask for. */
export const HEALTH_CHECK_PATH = '/healthz';

/** The sidecar's load-balancer report, as much of it as the harness reads (src/sidecar/load-balancer.ts). */
export interface LoadBalancerFields {
  readonly lagMs: number | null;
  readonly lagAtLeastMs: number | null;
  readonly neededQuietMs: number | null;
  readonly longestGapMs: number | null;
  readonly watchedListeners: readonly string[];
  readonly observable: boolean;
  readonly quiet: boolean;
  readonly sinceHealthChecksFailed: { readonly requests: number; readonly connections: number; readonly healthChecks: number };
}

export interface Deletion {
  /** Date.now() when the kubelet sent the preStop hook (no sidecar: when Envoy got SIGTERM). */
  readonly deletedAt: number;
  /** Date.now() when Envoy's emulator took POST /healthcheck/fail; undefined if it never did (no sidecar). */
  readonly healthChecksFailedAt: number | undefined;
  /** Date.now() when /shutdown answered and Envoy got SIGTERM (no sidecar: deletedAt). */
  readonly releasedAt: number;
  /** /shutdown's status; undefined without a sidecar or when it failed. */
  readonly shutdownStatus: number | undefined;
  /** /shutdown's JSON answer (the drain's outcome), if any. */
  readonly outcome: { readonly reason?: string; readonly description?: string; readonly loadBalancer?: LoadBalancerFields } | undefined;
  /** The sidecar's GET /drain once /shutdown answered: `loadBalancer` among it. */
  readonly drain: { readonly loadBalancer?: LoadBalancerFields; readonly reason?: string | null } | undefined;
  /** The sidecar's drain_finished log line, if it came within a second of the answer. */
  readonly finishedLog: LogLine | undefined;
}

export interface PodOptions {
  readonly name: string;
  /** The sidecar's flags (besides --admin-port), given Envoy's ports; undefined: no sidecar, the control. */
  readonly sidecarFlags: ((ports: EnvoyEmulator['ports']) => readonly string[]) | undefined;
  /**
   * The sidecar's entry point: default the repository's dist/entry.cjs (`npm run build`); another build's (say, one
   * of a commit built apart, so that a build of the working tree meanwhile changes nothing) when given.
   */
  readonly sidecarEntry?: string;
}

/** The sidecar as spawnSidecar starts it (loopback, a free port, the observed rule off unless a flag says), from `entry`. */
async function spawnSidecarFrom(entry: string | undefined, flags: readonly string[]): Promise<SidecarProcess> {
  if (entry === undefined) return spawnSidecar(flags, { readyTimeoutMs: 20_000 });
  const args = [entry, 'mode=sidecar', '--serve-address=127.0.0.1', '--serve-port=0', '--quiet-period=0s', ...flags];
  const started = await startNode(args, { ready: (line) => line['event'] === 'listening', readyTimeoutMs: 20_000 });
  const port = Number(started.ready['port']);
  return { ...started, port, url: (path) => `http://127.0.0.1:${port}${path}` };
}

export class EnvoyPod {
  private constructor(
    readonly name: string,
    readonly envoy: EnvoyEmulator,
    readonly sidecar: SidecarProcess | undefined,
  ) {}

  static async start(options: PodOptions): Promise<EnvoyPod> {
    // The injector starts Envoy with --drain-strategy immediate; one worker, as the fleet's pods.
    const envoy = await EnvoyEmulator.start({ healthCheckPath: HEALTH_CHECK_PATH, drainStrategy: 'immediate', workers: 1 });
    if (options.sidecarFlags === undefined) return new EnvoyPod(options.name, envoy, undefined);
    let sidecar: SidecarProcess | undefined;
    try {
      sidecar = await spawnSidecarFrom(options.sidecarEntry, [`--admin-port=${envoy.ports.admin}`, ...options.sidecarFlags(envoy.ports)]);
      await sidecar.waitForLog((line) => line['event'] === 'envoy_admin_reachable', 20_000);
    } catch (error) {
      await sidecar?.kill();
      await envoy.close();
      throw error;
    }
    return new EnvoyPod(options.name, envoy, sidecar);
  }

  /** The kubelet deleting the pod: preStop GET /shutdown (bounded by `hookTimeoutMs`), then SIGTERM to Envoy. */
  async delete(hookTimeoutMs: number): Promise<Deletion> {
    const deletedAt = Date.now();
    if (this.sidecar === undefined) {
      await this.envoy.close();
      return { deletedAt, healthChecksFailedAt: undefined, releasedAt: deletedAt, shutdownStatus: undefined, outcome: undefined, drain: undefined, finishedLog: undefined };
    }
    const answer = await get(this.sidecar.port, SIDECAR_PATHS.shutdown, hookTimeoutMs, { accept: 'application/json' });
    const releasedAt = Date.now();
    // What the drain saw, read before Envoy's SIGTERM (the sidecar keeps it after, too).
    const drainAnswer = await get(this.sidecar.port, SIDECAR_PATHS.drain, 2_000);
    await this.envoy.close();
    const healthChecksFailedAt = this.envoy.adminRequests.find((request) => request.method === 'POST' && request.path === '/healthcheck/fail')?.at;
    const finishedLog = await this.sidecar.waitForLog((line) => line['event'] === 'drain_finished', 1_000).catch(() => undefined);
    return {
      deletedAt,
      healthChecksFailedAt,
      releasedAt,
      shutdownStatus: answer?.status,
      outcome: parseJson(answer?.body) as Deletion['outcome'],
      drain: parseJson(drainAnswer?.body) as Deletion['drain'],
      finishedLog,
    };
  }

  /** Everything closed: Envoy (if still running) and the sidecar's process. */
  async stop(): Promise<void> {
    await this.envoy.close();
    await this.sidecar?.kill();
  }
}

/** A GET on loopback; status and body, or undefined if it failed or took longer than `timeoutMs`. */
function get(port: number, path: string, timeoutMs: number, headers: Record<string, string> = {}): Promise<{ status: number; body: string } | undefined> {
  return new Promise((resolve) => {
    const request = http.get({ host: '127.0.0.1', port, path, headers, agent: false, timeout: timeoutMs }, (response) => {
      let body = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => (body = body.length > 1_000_000 ? body : body + chunk));
      response.on('end', () => resolve({ status: response.statusCode ?? 0, body }));
      response.on('error', () => resolve(undefined));
    });
    request.on('timeout', () => request.destroy(new Error('timeout')));
    request.on('error', () => resolve(undefined));
  });
}

