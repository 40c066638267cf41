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
}

/** Nothing from 20 sidecars on the console: the report says what happened. */
const quietLog: SidecarLog = { info: () => undefined, warn: () => undefined, error: () => undefined };

/** A short GET on loopback; the status, or undefined if it failed or took longer than `timeoutMs`. */
export function getStatus(port: number, path: string, timeoutMs: number): Promise<number | undefined> {
  return new Promise((resolve) => {
    const req = http.get({ host: '127.0.0.1', port, path, agent: false, timeout: timeoutMs }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode));
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
  // Without 'mode=sidecar' (a positional the flag parser refuses); later flags win: loopback, free port, no journal.
  const args = [...sidecarArgs(scaled).slice(1), '--serve-address=127.0.0.1', '--serve-port=0', `--admin-port=${adminPort}`, '--state-dir=', '--admin-timeout=1s'];
  return parseSidecarConfig(args, {});
}

export class FleetPod {
  envoy: EnvoyEmulator | undefined;
  sidecar: RunningSidecar | undefined;
  /** The kubelet's readiness: Envoy's /ready and the sidecar's /ready both answered 200 (kept until deletion). */
  ready = false;
  terminating = false;
  gone = false;
  private readonly stopping = new AbortController();
  private booting: Promise<void> = Promise.resolve();

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
    this.envoy = await EnvoyEmulator.start({
      drainStrategy: 'immediate',
      drainTimeMs: scale.real(this.spec.gracePeriodMs),
      // The HTTP connection manager's drain_timeout (5 s by default), in the fleet's time too.
      httpDrainTimeoutMs: scale.real(5_000),
      workers: 1,
    });
    if (this.spec.drain !== undefined) this.sidecar = await startSidecar(sidecarConfig(this.spec.drain, this.envoy.ports.admin, scale), quietLog);
    while (!this.ready && !this.stopping.signal.aborted && performance.now() < deadline) {
      await pause(scale.real(this.spec.probePeriodMs), this.stopping.signal);
      this.ready = await this.probeReady();
    }
  }

  private async probeReady(): Promise<boolean> {
    if (this.envoy === undefined) return false;
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
    await this.envoy?.close();
    clearTimeout(sigkill);
    await this.sidecar?.stop();
    this.gone = true;
    return { pod: this.name, shutdownAt, releasedAt, hookStatus, killed };
  }

  private async runPreStop(timeoutMs: number): Promise<TerminationRecord['hookStatus']> {
    if (this.sidecar === undefined) return 'none';
    return (await getStatus(this.sidecar.port, SIDECAR_PATHS.shutdown, timeoutMs)) ?? 'failed';
  }

  /** Stops everything at once (end of the simulation, or a failure). */
  async kill(): Promise<void> {
    this.stopping.abort();
    await this.booting;
    await this.envoy?.close();
    await this.sidecar?.stop();
    this.gone = true;
  }
}
