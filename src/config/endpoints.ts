/** HTTP paths shared by the servers, the injected pod spec and the manifests: one definition each. */
export const WEBHOOK_PATHS = {
  mutate: '/mutate',
  healthz: '/healthz',
  readyz: '/readyz',
  metrics: '/metrics',
} as const;

export const SIDECAR_PATHS = {
  healthz: '/healthz',
  /** Envoy's preStop hook: starts the drain (or joins the one running) and answers when it ends. */
  shutdown: '/shutdown',
  /** The sidecar's own preStop hook (and app containers'): joins a drain, never starts one. */
  wait: '/wait',
  drain: '/drain',
  metrics: '/metrics',
  /**
   * The sidecar's readiness probe: 503 until Envoy's admin API has answered once, then 200 for the life of
   * the process (latched), so that a wrong admin address stops a rollout when the pod starts, not when it dies.
   */
  ready: '/ready',
} as const;

/** Name of the injected container, also used to recognise a pod that already has it. */
export const SIDECAR_CONTAINER_NAME = 'shutdown-manager';
