/** Which container of a pod is Envoy: the one the user named, else the one called "envoy", else the only Envoy image. */
import type { V1Container } from '@kubernetes/client-node';
import { ANNOTATIONS } from '../config/annotation-names.js';
import { SIDECAR_CONTAINER_NAME } from '../config/endpoints.js';
import { ConfigError } from '../config/errors.js';
import { DEFAULT_PROBE_PERIOD_MS, type ProbeSchedule } from '../config/values.js';

export type EnvoyContainerLookup =
  | { readonly found: true; readonly index: number }
  /** Not an error in the pod: it is admitted unchanged, and `reason` becomes an AdmissionReview warning. */
  | { readonly found: false; readonly reason: string };

const DEFAULT_NAME = 'envoy';

/** Throws ConfigError when the annotation names a container the pod does not have: that is a bad value. */
export function findEnvoyContainer(
  containers: readonly V1Container[],
  annotations: Readonly<Record<string, string>> | undefined,
): EnvoyContainerLookup {
  const named = annotations?.[ANNOTATIONS.envoyContainer];
  if (named !== undefined) {
    const index = containers.findIndex((container) => container.name === named);
    if (index === -1) {
      throw new ConfigError(
        `annotation ${ANNOTATIONS.envoyContainer}`,
        named,
        `the name of one of the pod's containers: ${listNames(containers)}`,
        'envoy-container',
      );
    }
    return { found: true, index };
  }

  const byName = containers.findIndex((container) => container.name === DEFAULT_NAME);
  if (byName !== -1) return { found: true, index: byName };

  const byImage = containers.flatMap((container, index) =>
    container.name !== SIDECAR_CONTAINER_NAME && (container.image ?? '').toLowerCase().includes('envoy') ? [index] : [],
  );
  if (byImage.length === 1) return { found: true, index: byImage[0] as number };
  const hint = `set annotation ${ANNOTATIONS.envoyContainer}`;
  return byImage.length === 0
    ? { found: false, reason: `no Envoy container found; ${hint}` }
    : { found: false, reason: `${byImage.length} containers run an envoy image; ${hint}` };
}

function listNames(containers: readonly V1Container[]): string {
  return containers.map((container) => JSON.stringify(container.name)).join(', ') || '(none)';
}

/**
 * The kubelet's probes of Envoy that run while the pod terminates (liveness and readiness: httpGet, tcpSocket or
 * grpc; a startup probe stops once the container has started), each with its port (a named one resolved through the
 * container's ports) and period (periodSeconds, default 10), sorted: on a traffic listener, the sidecar takes up to
 * one connection per period for the probe, not for a client (--probe-ports). A name the container does not declare
 * probes nothing the kubelet can reach, and is left out.
 */
export function envoyProbes(envoy: V1Container): ProbeSchedule[] {
  const probes: ProbeSchedule[] = [];
  for (const probe of [envoy.livenessProbe, envoy.readinessProbe]) {
    if (probe === undefined) continue;
    for (const port of [probe.httpGet?.port, probe.tcpSocket?.port, probe.grpc?.port]) {
      const number = typeof port === 'number' ? port : envoy.ports?.find((declared) => declared.name === port)?.containerPort;
      if (number === undefined || !Number.isInteger(number) || number < 1 || number > 65535) continue;
      const seconds = probe.periodSeconds;
      const periodMs = typeof seconds === 'number' && Number.isInteger(seconds) && seconds >= 1 ? seconds * 1000 : DEFAULT_PROBE_PERIOD_MS;
      probes.push({ port: number, periodMs });
    }
  }
  return probes.sort((a, b) => a.port - b.port || a.periodMs - b.periodMs);
}
