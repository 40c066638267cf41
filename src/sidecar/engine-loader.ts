/**
 * When the sidecar loads its Envoy side (engine.ts: the admin client, the drain, the start-up probe): not before
 * the server listens, so that the kubelet's first /healthz does not wait for it (issue 34: it was two thirds of
 * the time from start to that answer), and at the latest `ENGINE_DELAY_MS` after. A request that needs it before
 * (every path but /healthz) is held until it is loaded, and starts loading it.
 *
 * The delay costs nothing: it is the start-up probe's own first retry delay (admin-probe.ts), and Envoy starts
 * after this container (a native sidecar) or beside it, so that a call to its admin API at once would be refused
 * anyway; readiness waits for that answer, and the kubelet's first readiness probe comes a second after start.
 */
import type { IncomingMessage } from 'node:http';
import { SIDECAR_PATHS } from '../config/endpoints.js';
import type { SidecarEngine } from './engine.js';
import { requestPath, type DrainEndpoints } from './server/routes.js';

/** From listening to loading the engine when nothing asked for it before. */
export const ENGINE_DELAY_MS = 100;

export interface EngineLoader {
  /** The routes' drain: the engine's supervisor, reached only once the engine is loaded (see `hold`). */
  readonly drain: DrainEndpoints;
  /** /metrics, from the engine. */
  metrics(): Promise<{ readonly contentType: string; readonly body: string }>;
  /** Undefined when `request` can be answered now; otherwise settles once the engine is loaded, and loads it. */
  hold(request: IncomingMessage): Promise<SidecarEngine> | undefined;
  /** Loads the engine in `ms`, unless something needs it sooner. */
  loadIn(ms: number): void;
  /** Loads the engine now, once; resolves to it. */
  load(): Promise<SidecarEngine>;
  /**
   * For stopping: the engine if something asked for it (loaded, or being loaded), else undefined; from then on
   * nothing loads it any more (a pending `loadIn` is cancelled, and what would load it is refused).
   */
  settle(): Promise<SidecarEngine> | undefined;
}

/** `start` loads and starts the engine; `onFailure` is told once if that fails (what asked for it is answered 500). */
export function engineLoader(start: () => Promise<SidecarEngine>, onFailure: (error: unknown) => void): EngineLoader {
  let requested: Promise<SidecarEngine> | undefined;
  let engine: SidecarEngine | undefined;
  let timer: NodeJS.Timeout | undefined;
  let settled = false;
  const load = (): Promise<SidecarEngine> => {
    clearTimeout(timer);
    // Stopping, and never loaded: nothing is started any more (it would outlive the stop).
    if (requested === undefined && settled) return Promise.reject(new Error('the sidecar is stopping'));
    requested ??= start().then(
      (started) => (engine = started),
      (error: unknown) => {
        onFailure(error);
        throw error;
      },
    );
    return requested;
  };
  const loaded = (): SidecarEngine => {
    // The server holds every request but /healthz until the engine is loaded (hold): reaching this without it is a bug.
    if (engine === undefined) throw new Error('the drain was reached before it was loaded');
    return engine;
  };
  const drain: DrainEndpoints = {
    shutdown: () => loaded().supervisor.shutdown(),
    wait: (windowMs) => loaded().supervisor.wait(windowMs),
    snapshot: () => loaded().supervisor.snapshot(),
    readiness: () => loaded().supervisor.readiness(),
  };
  return {
    drain,
    metrics: () => load().then((started) => started.metrics()),
    hold: (request) => (engine !== undefined || requestPath(request) === SIDECAR_PATHS.healthz ? undefined : load()),
    loadIn: (ms) => {
      // A failure is onFailure's to report.
      if (requested === undefined) timer = setTimeout(() => load().catch(() => undefined), ms);
    },
    load,
    settle: () => {
      settled = true;
      clearTimeout(timer);
      return requested;
    },
  };
}
