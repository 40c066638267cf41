/**
 * One rollout step, end to end: the running webhook injects an Envoy pod, the simulated kubelet starts
 * it, traffic flows through it, and the pod is deleted while the traffic goes on. Shared by the e2e
 * tests and `npm run demo`.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { V1Container, V1Pod, V1Probe } from '@kubernetes/client-node';
import { SIDECAR_CONTAINER_NAME } from '../../src/config/endpoints.js';
import jsonPatch from 'fast-json-patch';
import { closeAll, openTcpConnection, type HeldConnection } from '../support/connections.js';
import { EnvoyEmulator } from '../../src/emulator/envoy-emulator.js';
import { freePorts } from '../support/ports.js';
import type { LogLine } from '../support/process.js';
import { loadReview, postReview, startTestWebhook } from '../support/webhook.js';
import { SimulatedPod, type SimulatedPodOptions, type TerminationReport } from './kubelet.js';
import { KeepAliveLoad, type LoadOptions, type LoadReport } from './load.js';

/** Webhook-wide defaults for a rollout that takes seconds, not minutes; pods may override them. */
// --quiet-period=0s: no load balancer here, so the clients Envoy moves off come back to it, and the observed rule
// (on by default, tested in test/sidecar/load-balancer-process.test.ts and the fleet) would hold each drain 10 s.
export const FAST_DRAIN_DEFAULTS = ['--check-delay=300ms', '--check-interval=100ms', '--termination-grace-period=10', '--quiet-period=0s'];

export interface RolloutOptions {
  /** Annotations on the Envoy pod template. */
  readonly annotations?: Readonly<Record<string, string>>;
  readonly webhookArgs?: readonly string[];
  /** Keep-alive client connections sending requests throughout. */
  readonly connections?: number;
  /** Connections to the TCP proxy listener that the client never closes. */
  readonly stubbornConnections?: number;
  /** Close one of the stubborn connections this long after termination began (a slow client finishing). */
  readonly closeOneStubbornAfterMs?: number;
}

export interface RolloutResult {
  readonly pod: V1Pod;
  readonly termination: TerminationReport;
  readonly load: LoadReport;
  readonly sidecarLogs: readonly LogLine[];
  /** Whether each never-closing connection had been closed by Envoy's exit when the pod was gone. */
  readonly stubbornClosed: readonly boolean[];
}

/**
 * Sends the fixture Deployment pod (changed by `prepare`, if given, as a user would write it) to the real
 * webhook over HTTPS and applies the patch it answers.
 */
export async function admitEnvoyPod(
  webhookArgs: readonly string[],
  annotations: Readonly<Record<string, string>>,
  prepare?: (pod: V1Pod) => V1Pod | Promise<V1Pod>,
): Promise<V1Pod> {
  const webhook = await startTestWebhook(webhookArgs);
  try {
    const review = await loadReview('deployment-envoy-pod.json');
    review.request.object.metadata.annotations = { ...annotations };
    if (prepare !== undefined) review.request.object = await prepare(review.request.object as V1Pod);
    const answer = await postReview(webhook, review);
    const response = answer.json().response;
    if (response.allowed !== true || response.patch === undefined) {
      throw new Error(`the webhook did not inject the pod: ${answer.text}`);
    }
    const operations = JSON.parse(Buffer.from(response.patch, 'base64').toString('utf8'));
    return jsonPatch.applyPatch(structuredClone(review.request.object), operations, true, false).newDocument as V1Pod;
  } finally {
    await webhook.close();
  }
}

/** An injected pod, running under the simulated kubelet, with a second replica for clients to move to. */
export interface RunningPod {
  readonly pod: V1Pod;
  readonly simulated: SimulatedPod;
  readonly secondReplica: EnvoyEmulator;
  /** Keep-alive clients on the pod's Envoy (moving to the second replica on `Connection: close`). */
  startLoad(connections: number, options?: LoadOptions): KeepAliveLoad;
  /** Stops every load, process and listener. */
  close(): Promise<void>;
}

export interface PodOptions {
  readonly annotations?: Readonly<Record<string, string>>;
  readonly webhookArgs?: readonly string[];
  readonly kubelet?: SimulatedPodOptions;
  /** Changes the pod before the webhook sees it (an app container next to Envoy); called again on a retry. */
  readonly prepare?: (pod: V1Pod) => V1Pod | Promise<V1Pod>;
  /** Changes the injected pod before it runs (negative controls: the protection undone). */
  readonly edit?: (pod: V1Pod) => V1Pod;
}

/** Admits an Envoy pod through the real webhook and runs it; ports are chosen afresh if one was taken meanwhile. */
export async function startPod(options: PodOptions = {}): Promise<RunningPod> {
  for (let attempt = 1; ; attempt += 1) {
    try {
      return await startPodOnce(options);
    } catch (error) {
      // The pod spec names its ports, so they are chosen before anything listens: another process may
      // take one in between (EADDRINUSE); the kubelet would fail the container, a test picks again.
      if (attempt >= 3 || !/EADDRINUSE|port is taken/.test(String(error instanceof Error ? `${error.message} ${String(error.cause)}` : error))) throw error;
    }
  }
}

async function startPodOnce(options: PodOptions): Promise<RunningPod> {
  const [servePort, adminPort] = (await freePorts(2)) as [number, number];
  const webhookArgs = [...FAST_DRAIN_DEFAULTS, `--serve-port=${servePort}`, `--admin-port=${adminPort}`, ...(options.webhookArgs ?? [])];
  // The fixture's Envoy declares its admin port 9001, which the injector finds: moved to a free port, so that two
  // pods of tests running at once (npm test runs two files at a time) never share it.
  const prepare = async (fixture: V1Pod): Promise<V1Pod> => {
    const moved = withEnvoyAdminPort(fixture, adminPort);
    return options.prepare === undefined ? moved : options.prepare(moved);
  };
  const admitted = await admitEnvoyPod(webhookArgs, options.annotations ?? {}, prepare);
  const pod = options.edit === undefined ? admitted : options.edit(admitted);
  const secondReplica = await EnvoyEmulator.start();
  let simulated: SimulatedPod;
  try {
    simulated = await SimulatedPod.start(pod, options.kubelet);
  } catch (error) {
    await secondReplica.close();
    throw error;
  }
  const loads: KeepAliveLoad[] = [];
  return {
    pod,
    simulated,
    secondReplica,
    startLoad(connections, loadOptions) {
      const load = new KeepAliveLoad({ first: simulated.envoy.http, second: secondReplica.ports.http }, connections, loadOptions);
      loads.push(load);
      return load;
    },
    async close() {
      await Promise.all(loads.map((load) => load.stop()));
      simulated.kill();
      await secondReplica.close();
    },
  };
}

/** The pod with its Envoy container's `admin` port, and the probes on it, moved to `port`. */
function withEnvoyAdminPort(pod: V1Pod, port: number): V1Pod {
  const containers = (pod.spec?.containers ?? []).map((container) => {
    const admin = container.ports?.find((declared) => declared.name === 'admin');
    if (admin === undefined) return container;
    const moveProbe = (probe: V1Probe | undefined): V1Probe | undefined =>
      probe?.httpGet?.port === admin.containerPort ? { ...probe, httpGet: { ...probe.httpGet, port } } : probe;
    const readinessProbe = moveProbe(container.readinessProbe);
    const livenessProbe = moveProbe(container.livenessProbe);
    return {
      ...container,
      ports: container.ports?.map((declared) => (declared === admin ? { ...declared, containerPort: port } : declared)),
      ...(readinessProbe === undefined ? {} : { readinessProbe }),
      ...(livenessProbe === undefined ? {} : { livenessProbe }),
    };
  });
  return { ...pod, spec: { ...pod.spec, containers } };
}

export async function runRollout(options: RolloutOptions = {}): Promise<RolloutResult> {
  const running = await startPod({ annotations: options.annotations ?? {}, webhookArgs: options.webhookArgs ?? [] });
  const { pod, simulated } = running;
  const stubborn: HeldConnection[] = [];
  try {
    const load = running.startLoad(options.connections ?? 8);
    await load.warmedUp(100);
    for (let i = 0; i < (options.stubbornConnections ?? 0); i += 1) stubborn.push(await openTcpConnection(simulated.envoy.tcp));

    const slowClient =
      options.closeOneStubbornAfterMs === undefined
        ? undefined
        : setTimeout(() => void stubborn[0]?.close(), options.closeOneStubbornAfterMs);
    const termination = await simulated.terminate();
    clearTimeout(slowClient);
    // Envoy's exit closes them; give the client a moment to see the FIN, no more.
    await Promise.race([Promise.all(stubborn.map((connection) => connection.closed)), sleep(1_000)]);
    const stubbornClosed = stubborn.map((connection) => connection.socket.destroyed);
    return { pod, termination, load: await load.stop(), sidecarLogs: simulated.sidecarLogs, stubbornClosed };
  } finally {
    await closeAll(stubborn);
    await running.close();
  }
}

/** The pod with its shutdown-manager container changed by `edit`. */
function editSidecar(pod: V1Pod, edit: (container: V1Container) => V1Container): V1Pod {
  const containers = (pod.spec?.containers ?? []).map((container) => (container.name === SIDECAR_CONTAINER_NAME ? edit(container) : container));
  return { ...pod, spec: { ...pod.spec, containers } };
}

/**
 * The pod as it runs without this project: no shutdown-manager container, and no preStop hook calling it (Envoy's
 * and any wait-container's). The kubelet then sends Envoy SIGTERM at once, and Envoy closes every connection
 * (run it with the kubelet's `withoutSidecar`).
 */
export function withoutSidecar(pod: V1Pod): V1Pod {
  const sidecar = [...(pod.spec?.containers ?? []), ...(pod.spec?.initContainers ?? [])].find((c) => c.name === SIDECAR_CONTAINER_NAME);
  const servePort = /^--serve-port=(\d+)$/.exec(sidecar?.args?.find((arg) => arg.startsWith('--serve-port=')) ?? '')?.[1];
  const unhooked = (container: V1Container): V1Container => {
    const port = container.lifecycle?.preStop?.httpGet?.port;
    if (port === undefined || String(port) !== servePort) return container;
    const { preStop: _removed, ...lifecycle } = container.lifecycle ?? {};
    return { ...container, lifecycle };
  };
  const keep = (containers: readonly V1Container[] | undefined): V1Container[] => (containers ?? []).filter((c) => c.name !== SIDECAR_CONTAINER_NAME).map(unhooked);
  return { ...pod, spec: { ...pod.spec, containers: keep(pod.spec?.containers), initContainers: keep(pod.spec?.initContainers) } };
}

/** The sidecar hook as it was before this design: it started a drain (Contour #4851, Envoy Gateway #5832). */
export function withDrainingSidecarHook(pod: V1Pod): V1Pod {
  return editSidecar(pod, (container) => {
    const httpGet = container.lifecycle?.preStop?.httpGet;
    return httpGet === undefined ? container : { ...container, lifecycle: { preStop: { httpGet: { ...httpGet, path: '/shutdown' } } } };
  });
}

/**
 * The sidecar's own hook waits this long for a drain to start before letting its container stop: short,
 * so that a restart takes little test time. Set by environment, as an operator could: the injected args
 * leave it to its default (5 s).
 */
export function shortWaitWindow(pod: V1Pod): V1Pod {
  return editSidecar(pod, (container) => ({ ...container, env: [...(container.env ?? []), { name: 'SHUTDOWN_MANAGER_WAIT_WINDOW', value: '300ms' }] }));
}
