/** The pieces the injector adds to a pod: the shutdown-manager container and the preStop hooks. */
import { randomBytes } from 'node:crypto';
import type { V1Container, V1LifecycleHandler } from '@kubernetes/client-node';
import { drainSettingsOf, type PodDrainPlan } from '../config/drain.js';
import { SIDECAR_CONTAINER_NAME, SIDECAR_PATHS } from '../config/endpoints.js';
import { toFlags } from '../config/settings.js';
import { SHUTDOWN_TOKEN_ENV, SIDECAR_SETTINGS } from '../config/sidecar.js';
import type { InjectionConfig } from '../config/webhook.js';

/** The image's non-root user (the conventional "nonroot" 65532, as the Dockerfile sets); the container must not need root. */
export const SIDECAR_USER_ID = 65532;

const TOKEN_BYTES = 24;
/** Random bytes are drawn in batches: one call to the system's generator per 128 pods, not per pod. */
let tokenPool = Buffer.alloc(0);

/** A per-pod secret (192 random bits): only the kubelet's hooks, which carry it, may start a drain. */
export function newShutdownToken(): string {
  if (tokenPool.length < TOKEN_BYTES) tokenPool = randomBytes(TOKEN_BYTES * 128);
  const token = tokenPool.subarray(0, TOKEN_BYTES).toString('base64url');
  tokenPool = tokenPool.subarray(TOKEN_BYTES);
  return token;
}

/** The hook both containers call: it blocks until the sidecar has drained Envoy. */
export function shutdownHook(plan: PodDrainPlan, token: string | undefined): V1LifecycleHandler {
  const httpGet = { path: SIDECAR_PATHS.shutdown, port: plan.servePort, scheme: 'HTTP' };
  if (token === undefined) return { httpGet };
  return { httpGet: { ...httpGet, httpHeaders: [{ name: 'Authorization', value: `Bearer ${token}` }] } };
}

/** The flags the sidecar is started with: every resolved drain parameter, so the pod spec tells the whole story. */
export function sidecarArgs(plan: PodDrainPlan): string[] {
  const { 'termination-grace-period': _boundByDrainTimeout, listeners, ...settings } = drainSettingsOf(plan);
  return [
    'mode=sidecar',
    ...toFlags(SIDECAR_SETTINGS, {
      ...settings,
      // Only when restricted: the sidecar's default already counts every listener.
      ...(listeners.length > 0 ? { listeners } : {}),
      'drain-timeout': plan.drainTimeoutMs,
    }),
  ];
}

/**
 * The shutdown-manager container. As a native sidecar (init container with restartPolicy Always) it is
 * stopped only after Envoy has exited, so it needs no preStop hook of its own: Envoy's hook does the waiting.
 */
export function buildSidecarContainer(
  plan: PodDrainPlan,
  config: InjectionConfig,
  options: { readonly native: boolean; readonly token: string | undefined },
): V1Container {
  const container: V1Container = {
    name: SIDECAR_CONTAINER_NAME,
    image: config.sidecarImage,
    imagePullPolicy: config.sidecarImagePullPolicy,
    args: sidecarArgs(plan),
    // By environment, not flag: it stays out of the process list.
    ...(options.token === undefined ? {} : { env: [{ name: SHUTDOWN_TOKEN_ENV, value: options.token }] }),
    ports: [{ name: 'shutdown-mgr', containerPort: plan.servePort, protocol: 'TCP' }],
    livenessProbe: {
      httpGet: { path: SIDECAR_PATHS.healthz, port: plan.servePort, scheme: 'HTTP' },
      initialDelaySeconds: 3,
      periodSeconds: 10,
      timeoutSeconds: 1,
      failureThreshold: 3,
    },
    lifecycle: { preStop: shutdownHook(plan, options.token) },
    resources: {
      // Requests near what it uses (about 57 MiB resident, idle or draining 1,000 connections: npm run bench),
      // so the scheduler counts it; the limit leaves room for a burst of connections to count.
      requests: { cpu: '10m', memory: '64Mi' },
      limits: { cpu: '200m', memory: '128Mi' },
    },
    securityContext: {
      runAsNonRoot: true,
      runAsUser: SIDECAR_USER_ID,
      runAsGroup: SIDECAR_USER_ID,
      readOnlyRootFilesystem: true,
      allowPrivilegeEscalation: false,
      privileged: false,
      capabilities: { drop: ['ALL'] },
      seccompProfile: { type: 'RuntimeDefault' },
    },
    // Should the sidecar ever crash, its last log lines show in `kubectl describe pod`.
    terminationMessagePolicy: 'FallbackToLogsOnError',
  };
  if (!options.native) return container;
  const { lifecycle: _ownHookNotNeeded, ...rest } = container;
  return { ...rest, restartPolicy: 'Always' };
}
