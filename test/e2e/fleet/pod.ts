/**
 * One Envoy pod of the fleet, in-process: the Envoy emulator and (unless the negative control) the real
 * shutdown-manager sidecar, on loopback ports, with the kubelet's parts that matter to a rollout: start-up,
 * readiness probes, and deletion (pkg/kubelet/kuberuntime killContainer: preStop hook, SIGTERM when it
 * returns, SIGKILL when terminationGracePeriodSeconds, counted from the deletion, runs out).
 */
import http from 'node:http';
import { EnvoyEmulator } from '../../../src/emulator/envoy-emulator.js';
import type { PodDrainValues } from '../../../src/config/drain.js';
import { parseSidecarConfig } from '../../../src/config/sidecar.js';
import { SIDECAR_PATHS } from '../../../src/config/endpoints.js';
import { sidecarArgs } from '../../../src/inject/sidecar.js';
import type { SidecarLog } from '../../../src/sidecar/log.js';
import { startSidecar, type RunningSidecar } from '../../../src/sidecar/main.js';
import { pause, type TimeScale } from './time.js';

export interface PodSpec {
  readonly name: string;
  readonly node: string;
  /** The drain the injector resolved for the pod (cluster time); undefined: no sidecar, no preStop hook. */
  readonly drain: PodDrainValues | undefined;
  readonly gracePeriodMs: number;
  /** Container start-up until Envoy listens (image pulled, config loaded), cluster time. */
  readonly startupMs: number;
  /** The readiness probes' periodSeconds, cluster time. */
  readonly probePeriodMs: number;
  readonly scale: TimeScale;
  /**
   * The path Envoy's HTTP health-check filter answers on the traffic listener (a load balancer's HTTP health
   * check: 200, then 503 once /healthcheck/fail was taken), when the emulator has that filter; undefined: none.
   */
  readonly healthCheckPath?: string;
  /** A pod readiness gate (the AWS LB controller's): the pod is Ready only once this holds too. */
  readonly readinessGate?: (pod: FleetPod) => boolean;
}

export interface TerminationRecord {
  readonly pod: string;
  /** performance.now() when the kubelet sent Envoy's preStop GET /shutdown (the deletion, for no hook). */
  readonly shutdownAt: number;
  /** When the hook returned and Envoy got SIGTERM. */
  readonly releasedAt: number;
  readonly hookStatus: number | 'none' | 'failed';
  /** Whether SIGKILL came (the grace period ran out first). */
  readonly killed: boolean;
  /** The sidecar's GET /drain (JSON) once the hook returned: what the drain saw; undefined without a sidecar or an answer. */
  readonly drain: unknown;
}

/** Nothing from 20 sidecars on the console: the report says what happened. */
const quietLog: SidecarLog = { info: () => undefined, warn: () => undefined, error: () => undefined };

/** A short GET on loopback; the status, or undefined if it failed or took longer than `timeoutMs`. */
export async function getStatus(port: number, path: string, timeoutMs: number): Promise<number | undefined> {
  return (await getText(port, path, timeoutMs))?.status;
}

/** A short GET on loopback; status and body, or undefined if it failed or took longer than `timeoutMs`. */
export function getText(port: number, path: string, timeoutMs: number): Promise<{ status: number; body: string } | undefined> {
  return new Promise((resolve) => {
    const req = http.get({ host: '127.0.0.1', port, path, agent: false, timeout: timeoutMs }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk.length + body.length > 1_000_000 ? '' : chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      res.on('error', () => resolve(undefined));
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', () => resolve(undefined));
  });
}

/** The sidecar's config as the injector writes it (sidecarArgs), with the pod's ports and durations scaled. */
function sidecarConfig(drain: PodDrainValues, adminPort: number, scale: TimeScale): ReturnType<typeof parseSidecarConfig> {
  const scaled: PodDrainValues = {
    ...drain,
    'check-interval': Math.max(1, scale.real(drain['check-interval'])),
    'check-delay': scale.real(drain['check-delay']),
    'drain-delay': scale.real(drain['drain-delay']),
    'drain-timeout': scale.real(drain['drain-timeout']),
    'long-lived-grace': drain['long-lived-grace'] === null ? null : scale.real(drain['long-lived-grace']),
  };
  // The observed rule's quiet period (a duration, 0 = off), where the sidecar has it: scaled like the others.
  const withQuiet = scaled as PodDrainValues & { 'quiet-period'?: number };
  if (typeof withQuiet['quiet-period'] === 'number') withQuiet['quiet-period'] = scale.real(withQuiet['quiet-period']);
  // Without 'mode=sidecar' (a positional the flag parser refuses); later flags win: loopback, free port, no journal.
  const args = [...sidecarArgs(scaled).slice(1), '--serve-address=127.0.0.1', '--serve-port=0', `--admin-port=${adminPort}`, '--state-dir=', '--admin-timeout=1s'];
  return parseSidecarConfig(args, {});
}

export class FleetPod {
  envoy: EnvoyEmulator | undefined;
  sidecar: RunningSidecar | undefined;
  /** The kubelet's readiness: Envoy's /ready and the sidecar's /ready both answered 200, and its readiness gate holds (kept until deletion). */
  ready = false;
  /** The containers' readiness alone (ContainersReady), without the readiness gate. */
  containersReady = false;
  /**
   * The pod's Ready condition as the kubelet keeps probing it, during termination too (only liveness and
   * startup probes stop then): an EndpointSlice endpoint's `serving`. False once `failureThreshold` (3, the
   * kubelet's default) probes in a row failed, true again at one success.
   */
  serving = false;
  terminating = false;
  gone = false;
  /** performance.now() of the deletion (undefined while the pod is not being deleted). */
  deletedAt: number | undefined;
  /** performance.now() of the last new connection (or, through an L7 LB, request) a load balancer sent this pod. */
  lastSentAt: number | undefined;
  /** performance.now() of every new connection (or L7 request) a load balancer sent this pod after its deletion. */
  readonly sentAfterDeletion: number[] = [];
  private readonly stopping = new AbortController();
  /** Ends the readiness probes (the pod is gone). */
  private readonly unprobed = new AbortController();
  private booting: Promise<void> = Promise.resolve();
  private probing: Promise<void> = Promise.resolve();

  constructor(readonly spec: PodSpec) {}

  get name(): string {
    return this.spec.name;
  }

  /** Whether Envoy's process runs (from start-up until SIGTERM or SIGKILL). */
  get envoyRunning(): boolean {
    return this.envoy !== undefined && this.envoy.exitedWith === undefined;
  }

  /** The port of one of Envoy's listeners ('http', 'tcp', or any the emulator adds), if it runs. */
  portOf(listener: string): number | undefined {
    if (!this.envoyRunning || this.envoy === undefined) return undefined;
    const ports: Readonly<Record<string, number>> = this.envoy.ports;
    return ports[listener];
  }

  /** Starts the containers after the start-up time, then probes readiness every probe period. Bounded by `deadline`. */
  boot(deadline: number): void {
    this.booting = this.startContainers(deadline).catch(() => undefined);
  }

  private async startContainers(deadline: number): Promise<void> {
    const { scale } = this.spec;
    await pause(scale.real(this.spec.startupMs), this.stopping.signal);
    if (this.stopping.signal.aborted) return;
    // The injector gives Envoy --drain-strategy immediate and a drain time within the grace period.
    const healthCheck = this.spec.healthCheckPath === undefined ? {} : { healthCheckPath: this.spec.healthCheckPath };
    this.envoy = await EnvoyEmulator.start({
      ...healthCheck,
      drainStrategy: 'immediate',
      drainTimeMs: scale.real(this.spec.gracePeriodMs),
      // The HTTP connection manager's drain_timeout (5 s by default), in the fleet's time too.
      httpDrainTimeoutMs: scale.real(5_000),
      workers: 1,
    });
    if (this.spec.drain !== undefined) this.sidecar = await startSidecar(sidecarConfig(this.spec.drain, this.envoy.ports.admin, scale), quietLog);
    while (!this.ready && !this.stopping.signal.aborted && performance.now() < deadline) {
      await pause(scale.real(this.spec.probePeriodMs), this.stopping.signal);
      this.containersReady = await this.probeReady();
      this.ready = this.containersReady && (this.spec.readinessGate?.(this) ?? true);
    }
    this.serving = this.ready;
    if (this.ready) this.probing = this.keepProbing(deadline);
  }

  /** The kubelet's readiness probes after the pod became ready, until it is gone: they go on while it terminates. */
  private async keepProbing(deadline: number): Promise<void> {
    const failureThreshold = 3;
    let failures = 0;
    while (!this.unprobed.signal.aborted && performance.now() < deadline) {
      await pause(this.spec.scale.real(this.spec.probePeriodMs), this.unprobed.signal);
      if (this.unprobed.signal.aborted) return;
      if (await this.probeReady()) {
        failures = 0;
        this.serving = true;
      } else if (++failures >= failureThreshold) {
        this.serving = false;
      }
    }
  }

  private async probeReady(): Promise<boolean> {
    if (this.envoy === undefined || !this.envoyRunning) return false;
    const timeoutMs = 1_000;
    const envoyReady = (await getStatus(this.envoy.ports.admin, '/ready', timeoutMs)) === 200;
    if (this.sidecar === undefined) return envoyReady;
    return envoyReady && (await getStatus(this.sidecar.port, SIDECAR_PATHS.ready, timeoutMs)) === 200;
  }

  /**
   * Pod deletion as the kubelet runs it: Envoy's preStop GET /shutdown (blocking until the sidecar has
   * drained), then SIGTERM to Envoy (which cuts whatever is still open), SIGKILL at the grace period. The
   * negative control has no hook: SIGTERM at once.
   */
  async terminate(): Promise<TerminationRecord> {
    this.terminating = true;
    this.deletedAt = performance.now();
    this.stopping.abort();
    // A pod deleted while starting: its containers finish starting (bounded), then stop as any others.
    await this.booting;
    const shutdownAt = performance.now();
    const graceRealMs = this.spec.scale.real(this.spec.gracePeriodMs);
    let killed = false;
    const sigkill = setTimeout(() => {
      killed = true;
      void this.envoy?.close();
    }, graceRealMs);
    const hookStatus = await this.runPreStop(graceRealMs);
    const releasedAt = performance.now();
    // What the drain saw (its load-balancer lag among it), read once the hook returned; Envoy still runs.
    const drainAnswer = this.sidecar === undefined ? undefined : await getText(this.sidecar.port, SIDECAR_PATHS.drain, 1_000);
    await this.envoy?.close();
    clearTimeout(sigkill);
    await this.sidecar?.stop();
    this.gone = true;
    this.unprobed.abort();
    this.serving = false;
    await this.probing;
    return { pod: this.name, shutdownAt, releasedAt, hookStatus, killed, drain: parseJson(drainAnswer?.body) };
  }

  private async runPreStop(timeoutMs: number): Promise<TerminationRecord['hookStatus']> {
    if (this.sidecar === undefined) return 'none';
    return (await getStatus(this.sidecar.port, SIDECAR_PATHS.shutdown, timeoutMs)) ?? 'failed';
  }

  /** Stops everything at once (end of the simulation, or a failure). */
  async kill(): Promise<void> {
    this.stopping.abort();
    this.unprobed.abort();
    await this.booting;
    await this.probing;
    await this.envoy?.close();
    await this.sidecar?.stop();
    this.gone = true;
  }
}

/** A body parsed as JSON; undefined for no body or one that is not JSON (an answer cut by the pod's end). */
export function parseJson(text: string | undefined): unknown {
  if (text === undefined) return undefined;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}
