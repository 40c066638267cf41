/**
 * A kubelet termination simulator. It runs a pod as the webhook produced it: the Envoy container is the
 * Envoy emulator (a child process with the admin port the pod spec gives), the shutdown-manager is the
 * built sidecar started with exactly the `args` in the spec. Termination follows the kubelet: every
 * container's preStop httpGet runs concurrently against the port in the spec, a container gets SIGTERM
 * once its own hook has returned, and whatever is still running at terminationGracePeriodSeconds
 * (counted from before the hooks) gets SIGKILL. Native sidecars (init containers with restartPolicy
 * Always) are stopped only after every main container has exited, as the kubelet does since 1.29.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { request } from 'node:http';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import type { V1Container, V1Pod } from '@kubernetes/client-node';
import { spawnSidecarWith, type LogLine, type SidecarProcess } from '../support/sidecar-process.js';
import { SIDECAR_CONTAINER_NAME } from '../../src/config/endpoints.js';

const EMULATOR_CLI = fileURLToPath(new URL('../support/envoy-emulator-cli.ts', import.meta.url));

export interface EnvoyPorts {
  readonly admin: number;
  readonly http: number;
  readonly tcp: number;
}

export interface TimelineEvent {
  /** Milliseconds since termination began. */
  readonly atMs: number;
  readonly container: string;
  readonly event: 'preStop-sent' | 'preStop-returned' | 'preStop-failed' | 'SIGTERM' | 'exited' | 'SIGKILL';
  readonly detail?: string;
}

export interface HookResult {
  readonly container: string;
  readonly status?: number;
  readonly body?: string;
  readonly error?: string;
  /** Milliseconds since termination began. */
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

interface RunningContainer {
  readonly spec: V1Container;
  readonly process: ChildProcess;
  readonly exited: Promise<unknown>;
  /** A native sidecar: stopped after the main containers. */
  readonly native: boolean;
}

export class SimulatedPod {
  private constructor(
    readonly pod: V1Pod,
    readonly envoy: EnvoyPorts,
    private readonly containers: readonly RunningContainer[],
    private readonly sidecar: SidecarProcess,
  ) {}

  /** JSON log lines of the shutdown-manager container. */
  get sidecarLogs(): readonly LogLine[] {
    return this.sidecar.logs;
  }

  /** Starts every container of `pod` and resolves once the Envoy emulator and the sidecar are listening. */
  static async start(pod: V1Pod): Promise<SimulatedPod> {
    const specs = [...(pod.spec?.initContainers ?? []).filter((c) => c.restartPolicy === 'Always'), ...(pod.spec?.containers ?? [])];
    const sidecarSpec = specs.find((c) => c.name === SIDECAR_CONTAINER_NAME);
    if (sidecarSpec === undefined) throw new Error('the pod has no shutdown-manager container: was it injected?');
    const envoyName = (JSON.parse(pod.metadata?.annotations?.['shutdown-manager.io/status'] ?? '{}') as { envoyContainer?: string }).envoyContainer;
    const envoySpec = specs.find((c) => c.name === envoyName);
    if (envoySpec === undefined) throw new Error(`the pod has no Envoy container named ${String(envoyName)}`);

    const adminPort = Number(flagValue(sidecarSpec.args ?? [], '--admin-port'));
    const envoy = spawn(process.execPath, ['--import', 'tsx', EMULATOR_CLI, `--admin-port=${adminPort}`], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    try {
      const ports = JSON.parse(await firstLine(envoy)) as EnvoyPorts;
      // The kubelet gives the container its spec's args and env; only the address differs, since the test
      // may not bind all interfaces: it comes from the environment, which the args do not override.
      const sidecar = await spawnSidecarWith(sidecarSpec.args ?? [], { ...containerEnv(sidecarSpec), SHUTDOWN_MANAGER_SERVE_ADDRESS: '127.0.0.1' });
      const running: RunningContainer[] = [
        { spec: envoySpec, process: envoy, exited: once(envoy, 'exit'), native: false },
        { spec: sidecarSpec, process: sidecar.child, exited: sidecar.exited, native: sidecarSpec.restartPolicy === 'Always' },
      ];
      return new SimulatedPod(pod, ports, running, sidecar);
    } catch (error) {
      envoy.kill('SIGKILL');
      throw error;
    }
  }

  /** Deletes the pod as the kubelet does; resolves once every container has exited. */
  async terminate(): Promise<TerminationReport> {
    const startedAt = performance.now();
    const gracePeriodMs = (this.pod.spec?.terminationGracePeriodSeconds ?? 30) * 1000;
    const since = (): number => Math.round(performance.now() - startedAt);
    const timeline: TimelineEvent[] = [];
    const hooks: HookResult[] = [];
    const killed: string[] = [];
    const record = (container: string, event: TimelineEvent['event'], detail?: string): void => {
      timeline.push({ atMs: since(), container, event, ...(detail === undefined ? {} : { detail }) });
    };

    const killTimer = setTimeout(() => {
      for (const container of this.containers) {
        if (container.process.exitCode !== null || container.process.signalCode !== null) continue;
        killed.push(container.spec.name);
        record(container.spec.name, 'SIGKILL', 'terminationGracePeriodSeconds ran out');
        container.process.kill('SIGKILL');
      }
    }, gracePeriodMs);

    const stop = async (container: RunningContainer): Promise<void> => {
      const name = container.spec.name;
      const hook = container.spec.lifecycle?.preStop?.httpGet;
      if (hook !== undefined) {
        record(name, 'preStop-sent', `GET ${hook.path ?? '/'} on port ${String(hook.port)}`);
        const result = await httpGet(Number(hook.port), hook.path ?? '/', hook.httpHeaders ?? [], gracePeriodMs - since());
        hooks.push({ container: name, ...result, returnedAtMs: since() });
        if (result.error === undefined) record(name, 'preStop-returned', `${result.status} ${result.body?.trim() ?? ''}`);
        else record(name, 'preStop-failed', result.error);
      }
      if (container.process.exitCode === null && container.process.signalCode === null) {
        record(name, 'SIGTERM');
        container.process.kill('SIGTERM');
      }
      await container.exited;
      record(name, 'exited', `code ${String(container.process.exitCode)}, signal ${String(container.process.signalCode)}`);
    };
    await Promise.all(this.containers.filter((c) => !c.native).map(stop));
    await Promise.all(this.containers.filter((c) => c.native).map(stop));
    clearTimeout(killTimer);
    const podGoneAtMs = since();
    return { gracePeriodMs, timeline, hooks, podGoneAtMs, killed, startedAt };
  }

  /** For test clean-up: nothing may outlive the test. */
  kill(): void {
    for (const container of this.containers) container.process.kill('SIGKILL');
  }
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
        signal: AbortSignal.timeout(Math.max(1, timeoutMs)),
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
