/**
 * The sidecar's Envoy side: the admin client, the drain supervisor, the start-up probe of Envoy's admin API and
 * what follows its first answer (recovery, then the watch), and the metrics read from them. src/sidecar/main.ts
 * loads this module once the server listens, and only when something needs it or a moment later (see
 * engine-loader.ts): the kubelet's first /healthz is answered without the drain's code loaded, parsed or run.
 *
 * `npm run build` bundles it apart from the rest of the sidecar, as dist/sidecar-engine.cjs, which
 * dist/sidecar.cjs requires at that moment, and the metrics (prom-client) apart again, as dist/sidecar-metrics.cjs,
 * required at the first scrape (tools/bundle.mjs; test/sidecar/bundle.test.ts).
 */
import type { Clock } from '../clock.js';
import type { SidecarConfig } from '../config/sidecar.js';
import { WitnessedAdminClient } from '../envoy/process/witnessed-admin.js';
import { drainListenersPath, hasSkipExit } from '../envoy/version.js';
import { countedAdmin } from './admin-calls.js';
import { startAdminProbe } from './admin-probe.js';
import type { DrainJournal } from './journal.js';
import type { SidecarLog } from './log.js';
import type { SidecarExposition } from './metrics.js';
import type { DrainServerCounters } from './server.js';
import { DrainSupervisor } from './supervisor.js';

export interface SidecarEngine {
  readonly supervisor: DrainSupervisor;
  /** The Prometheus exposition of /metrics. */
  metrics(): Promise<{ readonly contentType: string; readonly body: string }>;
  /** Stops the probe and the drain (a running drain ends as interrupted, so that held answers can be given). */
  interrupt(): void;
  /** Once the server has closed: waits for the probe and the watch to end, and closes the admin client. */
  close(): Promise<void>;
}

/** What the engine is made of besides the settings: the server's parts it shares. */
export interface EngineParts {
  readonly journal: DrainJournal;
  readonly log: SidecarLog;
  readonly clock: Clock;
  /** The server's counters, for /metrics. */
  readonly serverCounters: () => DrainServerCounters;
}

/** Builds the admin client and the supervisor, and starts probing Envoy's admin API. */
export function startEngine(config: SidecarConfig, { journal, log, clock, serverCounters }: EngineParts): SidecarEngine {
  const client = new WitnessedAdminClient({
    address: config['admin-address'],
    port: config['admin-port'],
    timeoutMs: config['admin-timeout'],
    listeners: config.listeners,
    probes: config['probe-ports'],
    pollers: config.pollers,
    inboundOnly: config['drain-inbound-only'],
    clock,
  });
  const { envoy, counts: adminCalls } = countedAdmin(client);
  const supervisor = new DrainSupervisor(
    envoy,
    { drain: config, recoverEnvoy: config['recover-envoy'], watchIntervalMs: config['check-interval'], readTimeoutMs: config['admin-timeout'] },
    journal,
    log,
    clock,
  );
  // Most pods are never scraped, and the metrics are all read from the drain's snapshot at scrape time:
  // nothing is lost by loading prom-client (2-3 MiB) when the first scrape comes.
  let registry: Promise<SidecarExposition> | undefined;
  const metrics = async (): Promise<{ contentType: string; body: string }> => {
    registry ??= import('./metrics.js').then(
      ({ sidecarMetrics }) => sidecarMetrics(supervisor, adminCalls, serverCounters),
      (error: unknown) => {
        registry = undefined; // the next scrape tries again
        throw error;
      },
    );
    const loaded = await registry;
    return { contentType: loaded.contentType, body: await loaded.metrics() };
  };
  const probe = startAdminProbe(envoy, log, undefined, clock);
  // Once Envoy's admin API has answered: was this Envoy left draining by an earlier sidecar? Then watch it.
  const recovered = probe.finished.then(async () => {
    if (!envoy.hasAnswered) return;
    await supervisor.recover();
    logEnvoyVersion(client, config['drain-inbound-only'], log);
    await supervisor.watch();
  });
  return {
    supervisor,
    metrics,
    interrupt: () => {
      probe.stop();
      supervisor.stop();
    },
    close: async () => {
      await probe.finished;
      await recovered;
      client.close();
    },
  };
}

/**
 * Which Envoy this sidecar drains, and how it will ask: once, when /server_info first answered. Before 1.29
 * Envoy cannot keep its listeners open past its drain time (see src/envoy/version.ts): said as a warning.
 */
function logEnvoyVersion(client: WitnessedAdminClient, inboundOnly: boolean, log: SidecarLog): void {
  const version = client.version;
  const call = `POST ${drainListenersPath(version, inboundOnly)}`;
  const fields = { event: 'envoy_version', envoy_version: version?.text ?? null, drain_call: call };
  if (version === null) log.info(fields, `Envoy's release is unknown (its /server_info names none yet): the drain will send ${call}`);
  else if (hasSkipExit(version)) log.info(fields, `draining Envoy ${version.text}: the drain will send ${call}`);
  else {
    log.warn(
      fields,
      `Envoy ${version.text} predates drain_listeners?skip_exit (1.29): its listeners stop accepting at the end of its --drain-time-s, which must then last until the pod is gone`,
    );
  }
}
