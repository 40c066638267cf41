/**
 * A kubelet simulator. It runs a pod as the webhook produced it: the Envoy container is the Envoy emulator
 * (a child process started with the admin port and the Envoy flags of the pod spec), the shutdown-manager
 * is the built sidecar started with exactly the `args` and `env` in the spec, each emptyDir volume is a
 * fresh directory mounted where the spec says (the args' mount path is rewritten to it). Any other regular
 * container is an application (test/e2e/app-server.ts) listening on its first declared port, to which
 * Envoy may route its requests (`envoyUpstream`), as a sidecar Envoy does.
 *
 * What the kubelet does, and this simulator with it (pkg/kubelet/kuberuntime/kuberuntime_container.go
 * killContainer and executePreStopHook; pkg/kubelet/kuberuntime/kuberuntime_manager.go computePodActions;
 * the Kubernetes docs "Container Lifecycle Hooks" and "Pod Lifecycle"):
 * - Pod deletion: every container's preStop httpGet runs concurrently against the port in the spec (with
 *   its headers); a container gets SIGTERM once its own hook has returned (or failed); whatever still runs
 *   at terminationGracePeriodSeconds (counted from before the hooks) gets SIGKILL. Native sidecars (init
 *   containers with restartPolicy Always) are stopped only after every main container has exited (1.29+).
 * - A single container killed by the kubelet while the pod stays (a failed liveness or startup probe):
 *   killContainer runs that container's preStop hook, then SIGTERM, SIGKILL at the grace period, then the
 *   container is started again with the same spec. The other containers are untouched.
 * - A container that exits on its own (a crash, an OOM kill, Envoy after /quitquitquit): no hook runs (the
 *   process is gone); restartPolicy Always starts it again. The kubelet's back-off starts at 10 s; here it
 *   is `restartDelayMs` (short, for test time).
 * - Nothing is restarted once the pod is terminating.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import type { V1Container, V1Pod } from '@kubernetes/client-node';
import type { LogLine } from '../support/process.js';
import { ensureMountPoints, mountNamespaceLauncher, mountNamespaceProblem, type Bind, type RunAs } from '../support/mount-namespace.js';
import { spawnSidecarWith, type SidecarProcess } from '../support/sidecar-process.js';
import { waitUntil } from '../support/wait.js';
import { SIDECAR_CONTAINER_NAME } from '../../src/config/endpoints.js';

const EMULATOR_CLI = fileURLToPath(new URL('../../src/emulator/cli.ts', import.meta.url));
const APP_SERVER = fileURLToPath(new URL('./app-server.ts', import.meta.url));

export interface EnvoyPorts {
  /** 0 when the admin API is on a Unix socket (see adminSocket). */
  readonly admin: number;
  /** Envoy's admin socket, on the host's filesystem (in the pod's volume directory). */
  readonly adminSocket?: string;
  /** Contour's read-only admin listener, when Envoy serves admin on a socket. */
  readonly readonlyAdmin?: number;
  readonly http: number;
  readonly tcp: number;
}

export interface TimelineEvent {
  /** Milliseconds since termination began (in a TerminationReport) or since the pod started (podEvents). */
  readonly atMs: number;
  readonly container: string;
  readonly event: 'preStop-sent' | 'preStop-returned' | 'preStop-failed' | 'SIGTERM' | 'exited' | 'SIGKILL' | 'started' | 'crashed';
  readonly detail?: string;
}

export interface HookResult {
  readonly container: string;
  readonly status?: number;
  readonly body?: string;
  readonly error?: string;
  /** Milliseconds since termination (or the restart) began. */
  readonly returnedAtMs: number;
}

export interface TerminationReport {
  readonly gracePeriodMs: number;
  readonly timeline: readonly TimelineEvent[];
  readonly hooks: readonly HookResult[];
  /** When the last container exited, in milliseconds since termination began. */
  readonly podGoneAtMs: number;
  readonly killed: readonly string[];
  /** Wall-clock time (performance.now) at which termination began, to relate other observations. */
  readonly startedAt: number;
}

export interface RestartReport {
  readonly container: string;
  /** The container's own preStop hook, run first on a kill by the kubelet; absent for a crash. */
  readonly hook?: HookResult;
  readonly timeline: readonly TimelineEvent[];
}

export interface SimulatedPodOptions {
  /**
   * Emulator flags for what the Envoy container's config (not its command line) decides, such as
   * `--http-drain-type=modify_only` for Envoy Gateway's listeners.
   */
  readonly envoyConfig?: readonly string[];
  /** Delay before a container that exited on its own is started again (the kubelet's back-off). */
  readonly restartDelayMs?: number;
  /**
   * The application container Envoy's HTTP listener routes every request to (its first declared port),
   * as the inbound route of a sidecar Envoy does; by default Envoy answers requests itself.
   */
  readonly envoyUpstream?: string;
  /**
   * Mount volumes as the kubelet does: the sidecar runs in its own mount namespace with each of its
   * volumeMounts bound at its mountPath (mount-namespace.ts), and keeps its args exactly as the spec gives
   * them. By default the mount paths in its args are rewritten to the volumes' directories instead (no root
   * needed).
   */
  readonly mountNamespaces?: boolean;
  /**
   * Where Envoy's bootstrap config (not its command line) puts the admin API when it is a Unix socket, as the
   * Envoy container sees it: Contour's `contour bootstrap` writes `/admin/admin.sock`. The emulator serves
   * admin there only (its path in the volume the Envoy container mounts at that directory), and also Contour's
   * read-only `envoy-admin` listener.
   */
  readonly envoyAdminSocket?: string;
  /**
   * Runs a pod that has no shutdown-manager container (a negative control: the same pod unprotected); Envoy's
   * admin API then listens on a port of its own choosing. Without it, a pod without the sidecar is an error,
   * so that a test cannot run an uninjected pod by mistake.
   */
  readonly withoutSidecar?: boolean;
}

interface Running {
  readonly process: ChildProcess;
  readonly exited: Promise<unknown>;
}

type Role = 'envoy' | 'sidecar' | 'app';

class Container {
  current: Running | undefined;
  /** Set while the simulator itself stops the process: its exit is then no crash. */
  stopping = false;

  constructor(
    readonly spec: V1Container,
    readonly role: Role,
    readonly native: boolean,
  ) {}

  get name(): string {
    return this.spec.name;
  }

  get running(): boolean {
    const process = this.current?.process;
    return process !== undefined && process.exitCode === null && process.signalCode === null;
  }
}

export class SimulatedPod {
  private terminating = false;
  private readonly podStartedAt = performance.now();
  private readonly events: TimelineEvent[] = [];
  private readonly sidecars: SidecarProcess[] = [];
  private readonly envoyStarts: EnvoyPorts[] = [];
  private readonly restartTimers = new Set<NodeJS.Timeout>();
  private envoyPorts: EnvoyPorts | undefined;
  private readonly appOutput = new Map<string, string[]>();

  private constructor(
    readonly pod: V1Pod,
    private readonly containers: readonly Container[],
    private readonly volumeDirs: ReadonlyMap<string, string>,
    private readonly options: SimulatedPodOptions,
    /** Removes the mount points created on the host for mount namespaces (see ensureMountPoints). */
    private readonly removeMountPoints: () => void = () => undefined,
  ) {}

  /** Ports of the Envoy container; a restarted Envoy keeps them. */
  get envoy(): EnvoyPorts {
    if (this.envoyPorts === undefined) throw new Error('Envoy has not started');
    return this.envoyPorts;
  }

  /** JSON log lines of every shutdown-manager process this pod ran, in order. */
  get sidecarLogs(): readonly LogLine[] {
    return this.sidecars.flatMap((sidecar) => sidecar.logs);
  }

  /** The shutdown-manager processes started so far (a restart adds one). */
  get sidecarProcesses(): readonly SidecarProcess[] {
    return this.sidecars;
  }

  /** How many Envoy processes this pod ran. */
  get envoyStartCount(): number {
    return this.envoyStarts.length;
  }

  /** Everything that happened to the pod's containers, since it started. */
  get podEvents(): readonly TimelineEvent[] {
    return this.events;
  }

  /** What the application processes of this container wrote on stderr (each says how many requests its SIGTERM cut). */
  appStderr(name: string): readonly string[] {
    return this.appOutput.get(name) ?? [];
  }

  /** Starts every container of `pod` and resolves once the Envoy emulator and the sidecar are listening. */
  static async start(pod: V1Pod, options: SimulatedPodOptions = {}): Promise<SimulatedPod> {
    const native = (pod.spec?.initContainers ?? []).filter((c) => c.restartPolicy === 'Always');
    const specs = [...native, ...(pod.spec?.containers ?? [])];
    const sidecarSpec = specs.find((c) => c.name === SIDECAR_CONTAINER_NAME);
    if (sidecarSpec === undefined && options.withoutSidecar !== true) throw new Error('the pod has no shutdown-manager container: was it injected?');
    if (options.mountNamespaces === true) {
      const problem = mountNamespaceProblem();
      if (problem !== undefined) throw new Error(problem);
    }
    const envoyName = (JSON.parse(pod.metadata?.annotations?.['shutdown-manager.io/status'] ?? '{}') as { envoyContainer?: string }).envoyContainer;
    const envoySpec = specs.find((c) => c.name === envoyName);
    if (envoySpec === undefined) throw new Error(`the pod has no Envoy container named ${String(envoyName)}`);

    const volumeDirs = new Map<string, string>();
    for (const volume of pod.spec?.volumes ?? []) {
      if (volume.emptyDir === undefined) continue;
      const dir = mkdtempSync(join(tmpdir(), `pod-${volume.name}-`));
      // An emptyDir is world-writable (0777), so that containers of any user can use it: the kubelet's
      // pkg/volume/emptydir setupDir.
      chmodSync(dir, 0o777);
      volumeDirs.set(volume.name, dir);
    }
    const apps = (pod.spec?.containers ?? []).filter((c) => c !== envoySpec && c !== sidecarSpec);
    const containers = [
      new Container(envoySpec, 'envoy', native.includes(envoySpec)),
      ...(sidecarSpec === undefined ? [] : [new Container(sidecarSpec, 'sidecar', native.includes(sidecarSpec))]),
      ...apps.map((spec) => new Container(spec, 'app', false)),
    ];
    const mountPoints = options.mountNamespaces === true && sidecarSpec !== undefined ? (sidecarSpec.volumeMounts ?? []).filter((mount) => volumeDirs.has(mount.name)).map((mount) => mount.mountPath) : [];
    const simulated = new SimulatedPod(pod, containers, volumeDirs, options, ensureMountPoints(mountPoints));
    try {
      // Envoy first: its ports become fixed, so that a restarted Envoy comes back on them.
      for (const container of containers) await simulated.run(container);
    } catch (error) {
      simulated.kill();
      throw error;
    }
    return simulated;
  }

  /**
   * The kubelet killing one container while the pod stays (a failed liveness probe): its preStop hook,
   * SIGTERM, SIGKILL at the grace period, and a new start with the same spec.
   */
  async restartContainer(name: string): Promise<RestartReport> {
    const container = this.container(name);
    const startedAt = performance.now();
    const timeline: TimelineEvent[] = [];
    const record = this.recorder(timeline, startedAt);
    const hook = await this.stop(container, record, startedAt);
    await this.run(container);
    record(container.name, 'started', 'restarted by the kubelet after a failed liveness probe');
    return { container: name, ...(hook === undefined ? {} : { hook }), timeline };
  }

  /** A container that dies on its own (OOM kill, crash): no hook; the kubelet starts it again after its back-off. */
  async crashContainer(name: string): Promise<void> {
    const container = this.container(name);
    const running = container.current;
    if (running === undefined) throw new Error(`${name} is not running`);
    running.process.kill('SIGKILL');
    await running.exited;
    await waitUntil(() => container.running && container.current !== running, 10_000, `${name} started again`);
  }

  /** Resolves once the Envoy container has been started `count` times in all (a restart on its own counts). */
  async envoyStarted(count: number, timeoutMs = 20_000): Promise<void> {
    const envoy = this.byRole('envoy');
    // The events say why when it does not come (a crash, a port taken by another process).
    const events = (): string => this.events.filter((event) => event.container === envoy.name).map((event) => `${event.atMs} ${event.event} ${event.detail ?? ''}`).join('; ');
    await waitUntil(() => this.envoyStarts.length >= count && envoy.running, timeoutMs, `Envoy start number ${count}`).catch((error: unknown) => {
      throw new Error(`${error instanceof Error ? error.message : String(error)}; Envoy's events: ${events()}`);
    });
  }

  /** Deletes the pod as the kubelet does; resolves once every container has exited. */
  async terminate(): Promise<TerminationReport> {
    this.terminating = true;
    for (const timer of this.restartTimers) clearTimeout(timer);
    const startedAt = performance.now();
    const gracePeriodMs = (this.pod.spec?.terminationGracePeriodSeconds ?? 30) * 1000;
    const since = (): number => Math.round(performance.now() - startedAt);
    const timeline: TimelineEvent[] = [];
    const hooks: HookResult[] = [];
    const killed: string[] = [];
    const record = this.recorder(timeline, startedAt);

    const killTimer = setTimeout(() => {
      for (const container of this.containers) {
        if (!container.running) continue;
        killed.push(container.name);
        record(container.name, 'SIGKILL', 'terminationGracePeriodSeconds ran out');
        container.current?.process.kill('SIGKILL');
      }
    }, gracePeriodMs);

    const stop = async (container: Container): Promise<void> => {
      const hook = await this.stop(container, record, startedAt, gracePeriodMs);
      if (hook !== undefined) hooks.push(hook);
    };
    await Promise.all(this.containers.filter((c) => !c.native).map(stop));
    await Promise.all(this.containers.filter((c) => c.native).map(stop));
    clearTimeout(killTimer);
    const podGoneAtMs = since();
    this.removeVolumes();
    return { gracePeriodMs, timeline, hooks, podGoneAtMs, killed, startedAt };
  }

  /** For test clean-up: nothing may outlive the test. */
  kill(): void {
    this.terminating = true;
    for (const timer of this.restartTimers) clearTimeout(timer);
    for (const container of this.containers) container.current?.process.kill('SIGKILL');
    this.removeVolumes();
  }

  /** A container's hook (if any), SIGTERM once it returned, and its exit; SIGKILL if it outlives `graceMs`. */
  private async stop(
    container: Container,
    record: (container: string, event: TimelineEvent['event'], detail?: string) => void,
    startedAt: number,
    graceMs = (this.pod.spec?.terminationGracePeriodSeconds ?? 30) * 1000,
  ): Promise<HookResult | undefined> {
    const running = container.current;
    if (running === undefined) return undefined;
    container.stopping = true;
    const killTimer = setTimeout(() => {
      record(container.name, 'SIGKILL', 'the grace period ran out');
      running.process.kill('SIGKILL');
    }, graceMs);
    let result: HookResult | undefined;
    const hook = container.spec.lifecycle?.preStop?.httpGet;
    if (hook !== undefined && container.running) {
      record(container.name, 'preStop-sent', `GET ${hook.path ?? '/'} on port ${String(hook.port)}`);
      const answer = await httpGet(Number(hook.port), hook.path ?? '/', hook.httpHeaders ?? [], graceMs - (performance.now() - startedAt));
      result = { container: container.name, ...answer, returnedAtMs: Math.round(performance.now() - startedAt) };
      if (answer.error === undefined) record(container.name, 'preStop-returned', `${answer.status} ${answer.body?.trim() ?? ''}`);
      else record(container.name, 'preStop-failed', answer.error);
    }
    if (container.running) {
      record(container.name, 'SIGTERM');
      running.process.kill('SIGTERM');
    }
    await running.exited;
    clearTimeout(killTimer);
    container.stopping = false;
    record(container.name, 'exited', `code ${String(running.process.exitCode)}, signal ${String(running.process.signalCode)}`);
    return result;
  }

  private async run(container: Container): Promise<void> {
    const running =
      container.role === 'envoy'
        ? await this.startEnvoy(container.spec)
        : container.role === 'sidecar'
          ? await this.startSidecar(container.spec)
          : await this.startApp(container.spec);
    container.current = running;
    this.events.push({ atMs: this.sincePodStart(), container: container.name, event: 'started' });
    void running.exited.then(() => this.onExit(container, running));
  }

  /** restartPolicy Always: a container that ended on its own is started again, unless the pod is terminating. */
  private onExit(container: Container, running: Running): void {
    if (container.stopping || this.terminating || container.current !== running) return;
    const { exitCode, signalCode } = running.process;
    this.events.push({ atMs: this.sincePodStart(), container: container.name, event: 'crashed', detail: `code ${String(exitCode)}, signal ${String(signalCode)}` });
    const timer = setTimeout(() => {
      this.restartTimers.delete(timer);
      if (this.terminating) return;
      void this.run(container).catch((error: unknown) => {
        this.events.push({ atMs: this.sincePodStart(), container: container.name, event: 'crashed', detail: `could not start again: ${String(error)}` });
      });
    }, this.options.restartDelayMs ?? 50);
    this.restartTimers.add(timer);
  }

  private async startEnvoy(spec: V1Container): Promise<Running> {
    const ports = this.envoyPorts === undefined ? [] : [`--http-port=${this.envoyPorts.http}`, `--tcp-port=${this.envoyPorts.tcp}`];
    const upstream = this.options.envoyUpstream === undefined ? [] : [`--upstream-port=${appPort(this.container(this.options.envoyUpstream).spec)}`];
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', EMULATOR_CLI, ...this.envoyAdminFlags(spec), ...ports, ...upstream, ...(this.options.envoyConfig ?? []), ...envoyCommandLine(spec)],
      // With faithful mounts, faithful users too: the socket Envoy creates is then owned by Envoy's user.
      { stdio: ['ignore', 'pipe', 'pipe'], ...(this.options.mountNamespaces === true ? runAs(this.pod, spec) : {}) },
    );
    const exited = once(child, 'exit');
    let stderr = '';
    child.stderr?.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    try {
      const line = await firstLine(child).catch(async (error: unknown) => {
        await exited;
        throw new Error(`the Envoy emulator did not start: ${stderr.trim() || String(error)}`);
      });
      const started = JSON.parse(line) as { admin: number | null; adminSocket?: string; readonlyAdmin?: number; http: number; tcp: number };
      this.envoyPorts = {
        admin: started.admin ?? 0,
        ...(started.adminSocket === undefined ? {} : { adminSocket: started.adminSocket }),
        ...(started.readonlyAdmin === undefined ? {} : { readonlyAdmin: started.readonlyAdmin }),
        http: started.http,
        tcp: started.tcp,
      };
      this.envoyStarts.push(this.envoyPorts);
    } catch (error) {
      child.kill('SIGKILL');
      throw error;
    }
    return { process: child, exited };
  }

  /**
   * The admin API where the pod's Envoy has it: a port the sidecar's args name (the same one again after a
   * restart), or the Unix socket of `envoyAdminSocket`, in the volume the Envoy container mounts there.
   */
  private envoyAdminFlags(spec: V1Container): string[] {
    const socket = this.options.envoyAdminSocket;
    if (socket === undefined) {
      return [`--admin-port=${this.envoyPorts?.admin ?? this.sidecarAdminPort()}`];
    }
    const hostPath = this.hostPathOf(spec, socket);
    if (hostPath === undefined) throw new Error(`the Envoy container ${spec.name} mounts no emptyDir volume at the directory of ${socket}`);
    return [`--admin-socket=${hostPath}`, `--readonly-admin-port=${this.envoyPorts?.readonlyAdmin ?? 0}`];
  }

  /** Where `path`, as `spec`'s container sees it, is in the host's filesystem: under the volume mounted over it. */
  private hostPathOf(spec: V1Container, path: string): string | undefined {
    const mount = (spec.volumeMounts ?? []).find((candidate) => path.startsWith(`${candidate.mountPath.replace(/\/$/, '')}/`));
    const dir = mount === undefined ? undefined : this.volumeDirs.get(mount.name);
    return mount === undefined || dir === undefined ? undefined : join(dir, mount.subPath ?? '', path.slice(mount.mountPath.replace(/\/$/, '').length));
  }

  private async startSidecar(spec: V1Container): Promise<Running> {
    // The kubelet gives the container its spec's args and env, with its volumes mounted; only the serve
    // address differs (tests may not bind every interface): it comes from the environment, which the
    // args do not set.
    const env = { ...containerEnv(spec), SHUTDOWN_MANAGER_SERVE_ADDRESS: '127.0.0.1' };
    const sidecar =
      this.options.mountNamespaces === true
        ? await spawnSidecarWith(spec.args ?? [], env, { launcher: mountNamespaceLauncher(this.bindsOf(spec), runAs(this.pod, spec)) })
        : await spawnSidecarWith(this.mountVolumes(spec, spec.args ?? []), env);
    this.sidecars.push(sidecar);
    return { process: sidecar.child, exited: sidecar.exited };
  }

  /** An application container: an HTTP server on its first declared port (restarted on the same one). */
  private async startApp(spec: V1Container): Promise<Running> {
    const child = spawn(process.execPath, ['--import', 'tsx', APP_SERVER, `--port=${appPort(spec)}`], { stdio: ['ignore', 'pipe', 'pipe'] });
    const exited = once(child, 'exit');
    const output = this.appOutput.get(spec.name) ?? [];
    this.appOutput.set(spec.name, output);
    let stderr = '';
    child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
      stderr += chunk;
      output.push(...chunk.split('\n').filter((line) => line !== ''));
    });
    try {
      await firstLine(child).catch(async (error: unknown) => {
        await exited;
        throw new Error(`the app container ${spec.name} did not start: ${stderr.trim() || String(error)}`);
      });
    } catch (error) {
      child.kill('SIGKILL');
      throw error;
    }
    return { process: child, exited };
  }

  /** The container's emptyDir volumes, each bound at its mountPath (subPath respected). */
  private bindsOf(spec: V1Container): Bind[] {
    return (spec.volumeMounts ?? []).flatMap((mount) => {
      const dir = this.volumeDirs.get(mount.name);
      return dir === undefined ? [] : [{ source: join(dir, mount.subPath ?? ''), target: mount.mountPath }];
    });
  }

  /** An emptyDir mounted at a path: the process sees the pod's directory there (here, in its args). */
  private mountVolumes(spec: V1Container, args: readonly string[]): string[] {
    let mounted = [...args];
    for (const mount of spec.volumeMounts ?? []) {
      const dir = this.volumeDirs.get(mount.name);
      if (dir !== undefined) mounted = mounted.map((arg) => arg.replace(mount.mountPath, dir));
    }
    return mounted;
  }

  private removeVolumes(): void {
    for (const dir of this.volumeDirs.values()) rmSync(dir, { recursive: true, force: true });
    this.removeMountPoints();
  }

  private container(name: string): Container {
    const found = this.containers.find((c) => c.name === name);
    if (found === undefined) throw new Error(`no container ${name} in the pod`);
    return found;
  }

  /** The admin port the sidecar's args name; 0 (any free port) in a pod without the sidecar. */
  private sidecarAdminPort(): number {
    const sidecar = this.containers.find((c) => c.role === 'sidecar');
    return sidecar === undefined ? 0 : Number(flagValue(sidecar.spec.args ?? [], '--admin-port'));
  }

  private byRole(role: Role): Container {
    const found = this.containers.find((c) => c.role === role);
    if (found === undefined) throw new Error(`no ${role} container in the pod`);
    return found;
  }

  private recorder(timeline: TimelineEvent[], startedAt: number) {
    return (container: string, event: TimelineEvent['event'], detail?: string): void => {
      const entry = { atMs: Math.round(performance.now() - startedAt), container, event, ...(detail === undefined ? {} : { detail }) };
      timeline.push(entry);
      this.events.push({ ...entry, atMs: this.sincePodStart() });
    };
  }

  private sincePodStart(): number {
    return Math.round(performance.now() - this.podStartedAt);
  }

}

/**
 * The flags Envoy is started with, from the container's command and args: what follows the `envoy`
 * executable, or args alone when they are flags (the envoyproxy/envoy image's entrypoint runs envoy then).
 */
export function envoyCommandLine(spec: V1Container): string[] {
  const words = [...(spec.command ?? []), ...(spec.args ?? [])];
  const envoyAt = words.findIndex((word) => basename(word) === 'envoy');
  if (envoyAt !== -1) return words.slice(envoyAt + 1);
  return spec.command === undefined && spec.args?.[0]?.startsWith('-') === true ? [...spec.args] : [];
}

/** The port an application container serves on: its first declared containerPort. */
function appPort(spec: V1Container): number {
  const port = spec.ports?.[0]?.containerPort;
  if (port === undefined) throw new Error(`container ${spec.name} declares no port: the simulator runs it as an HTTP server on its first containerPort`);
  return port;
}

/** The user a container runs as: its own securityContext's, else the pod's (the kubelet's precedence). */
function runAs(pod: V1Pod, container: V1Container): RunAs {
  const uid = container.securityContext?.runAsUser ?? pod.spec?.securityContext?.runAsUser;
  const gid = container.securityContext?.runAsGroup ?? pod.spec?.securityContext?.runAsGroup;
  return { ...(uid === undefined ? {} : { uid }), ...(gid === undefined ? {} : { gid }) };
}

function containerEnv(container: V1Container): Record<string, string> {
  return Object.fromEntries((container.env ?? []).map((variable) => [variable.name, variable.value ?? '']));
}

function flagValue(args: readonly string[], flag: string): string {
  const arg = args.find((a) => a.startsWith(`${flag}=`));
  if (arg === undefined) throw new Error(`the sidecar's args have no ${flag}: ${args.join(' ')}`);
  return arg.slice(flag.length + 1);
}

async function firstLine(child: ChildProcess): Promise<string> {
  const lines = createInterface({ input: child.stdout! });
  for await (const line of lines) return line;
  throw new Error('the process exited before printing its ports');
}

/** The kubelet's httpGet hook: the pod IP (here loopback), the spec's port, path and headers. */
function httpGet(
  port: number,
  path: string,
  headers: readonly { name: string; value: string }[],
  timeoutMs: number,
): Promise<{ status?: number; body?: string; error?: string }> {
  return new Promise((resolve) => {
    const req = request(
      {
        host: '127.0.0.1',
        port,
        path,
        headers: Object.fromEntries(headers.map((h) => [h.name, h.value])),
        agent: false,
        signal: AbortSignal.timeout(Math.max(1, Math.round(timeoutMs))),
      },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (body += chunk));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
        res.on('error', (error) => resolve({ error: error.message }));
      },
    );
    req.on('error', (error) => resolve({ error: error.message }));
    req.end();
  });
}
