/**
 * Sidecar mode: `node dist/entry.cjs mode=sidecar [flags]` (the image: `mode=sidecar [flags]`). Wires the
 * config, the Envoy admin client, the drain and the HTTP server together, and owns the process-level
 * concerns (signals, exit).
 *
 * Keep imports light here: this process runs in every Envoy pod, so its memory and start-up time
 * matter (no fastify, no undici: see src/envoy/admin-client.ts; no pino: see json-log.ts; prom-client
 * only once /metrics is first asked for). `npm run bench` holds it to a bare node:http server.
 *
 * `npm run build` bundles the sidecar (src/sidecar/command.ts and everything it imports) into one CommonJS
 * file, dist/sidecar.cjs (esbuild), which the image's entry point requires without Node's ES module loader
 * (src/entry.cts): twenty-odd ESM modules took a third of the sidecar's start-up to resolve and link, and
 * enough calls to Node's URL helpers to get them optimized by TurboFan, whose code alone is 3-4 MiB of
 * resident memory. test/sidecar/bundle.test.ts checks what the bundle requires.
 */
import { drainTimingErrors } from '../config/drain.js';
import { ConfigErrors } from '../config/errors.js';
import { describeSettings, parseOrShowHelp } from '../config/settings.js';
import { createJsonLog } from './json-log.js';
import type { SidecarLog } from './log.js';
import { parseSidecarConfig, SHUTDOWN_TOKEN_ENV, SIDECAR_SETTINGS, type SidecarConfig } from '../config/sidecar.js';
import { WitnessedAdminClient } from '../envoy/process/witnessed-admin.js';
import { drainListenersPath, hasSkipExit } from '../envoy/version.js';
import { countedAdmin } from './admin-calls.js';
import { startAdminProbe } from './admin-probe.js';
import { systemClock, type Clock } from '../clock.js';
import { openJournal } from './journal.js';
import type { SidecarExposition } from './metrics.js';
import { startDrainServer } from './server.js';
import { DrainSupervisor } from './supervisor.js';

/** The --help text; written only when asked for, not at every start. */
const sidecarUsage = (): string => `Usage: envoy-shutdown-manager mode=sidecar [flags]

Runs next to Envoy. GET /shutdown (Envoy's preStop hook) fails Envoy's health checks, drains its
listeners and blocks until its open downstream connections are at or below --min-open-connections, or
until --drain-timeout. GET /wait (this container's own preStop hook) joins a drain that runs or starts
within --wait-window and never starts one. GET /healthz is the liveness probe; GET /drain shows the
drain's state as JSON.

Flags (each can also be set by its environment variable):
${describeSettings(SIDECAR_SETTINGS)}
`;

/** Sidecar mode, as command.ts runs it. Resolves once the server listens; the process then runs until SIGTERM. */
export async function startSidecarFromArgs(args: readonly string[], env: NodeJS.ProcessEnv): Promise<void> {
  const config = parseOrShowHelp(() => parseSidecarConfig(args, env), sidecarUsage);
  if (config === undefined) return;
  checkConsistency(config);
  // Handlers go in before the server listens: a SIGTERM right after the "listening" line must not meet
  // Node's default handler (exit by signal, held requests dropped).
  let sidecar: RunningSidecar | undefined;
  stopOnSignals(() => sidecar);
  sidecar = await startSidecar(config);
}

/** Settings that are each valid but cannot work together: the webhook's checks, on the sidecar's own flags. */
function checkConsistency(config: SidecarConfig): void {
  const errors = drainTimingErrors(config, (name) => `flag --${name}`, 'lower --check-delay or raise --drain-timeout');
  // Reported as a usage error (exit 2), by reportFailure in command.ts.
  if (errors.length > 0) throw new ConfigErrors(errors);
}

export interface RunningSidecar {
  readonly port: number;
  readonly supervisor: DrainSupervisor;
  readonly log: SidecarLog;
  /** Interrupts a running drain, answers the /shutdown requests held, and closes everything. */
  stop(): Promise<void>;
}

export async function startSidecar(
  config: SidecarConfig,
  log: SidecarLog = createJsonLog(config['log-level'], 'shutdown-manager'),
  clock: Clock = systemClock,
): Promise<RunningSidecar> {
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
    openJournal(config['state-dir']),
    log,
    clock,
  );
  // Most pods are never scraped, and the metrics are all read from the drain's snapshot at scrape time:
  // nothing is lost by loading prom-client (2-3 MiB) when the first scrape comes.
  let registry: Promise<SidecarExposition> | undefined;
  const metrics = async (): Promise<{ contentType: string; body: string }> => {
    registry ??= import('./metrics.js').then(
      ({ sidecarMetrics }) => sidecarMetrics(supervisor, adminCalls, () => server.counters),
      (error: unknown) => {
        registry = undefined; // the next scrape tries again
        throw error;
      },
    );
    const loaded = await registry;
    return { contentType: loaded.contentType, body: await loaded.metrics() };
  };
  const shutdownToken = config['shutdown-token'] === '' ? undefined : config['shutdown-token'];
  const server = await startDrainServer({
    drain: supervisor,
    waitWindowMs: config['wait-window'],
    host: config['serve-address'],
    port: config['serve-port'],
    log,
    shutdownToken,
    metrics,
    clock,
  });
  if (shutdownToken === undefined) {
    // Info, not warn: without a token is the documented setup for clusters before 1.26 (--protect-shutdown=false).
    log.info({ event: 'shutdown_unprotected' }, `no ${SHUTDOWN_TOKEN_ENV}: anyone who can reach this port can drain Envoy`);
  }
  log.info(
    {
      event: 'listening',
      address: server.address,
      port: server.port,
      envoy_admin: client.target,
      check_interval_ms: config['check-interval'],
      check_delay_ms: config['check-delay'],
      min_connections: config['min-open-connections'],
      drain_timeout_ms: config['drain-timeout'],
      listeners: config.listeners,
      probe_ports: config['probe-ports'],
      quiet_period_ms: config['quiet-period'],
      drain_inbound_only: config['drain-inbound-only'],
      drain_delay_ms: config['drain-delay'],
      wait_window_ms: config['wait-window'],
      recover_envoy: config['recover-envoy'],
      state_dir: config['state-dir'],
    },
    `shutdown manager listening on ${server.address.includes(':') ? `[${server.address}]` : server.address}:${server.port}`,
  );
  const probe = startAdminProbe(envoy, log, undefined, clock);
  // Once Envoy's admin API has answered: was this Envoy left draining by an earlier sidecar? Then watch it.
  const recovered = probe.finished.then(async () => {
    if (!envoy.hasAnswered) return;
    await supervisor.recover();
    logEnvoyVersion(client, config['drain-inbound-only'], log);
    await supervisor.watch();
  });

  let stopping: Promise<void> | undefined;
  const stop = (): Promise<void> =>
    (stopping ??= (async () => {
      probe.stop();
      supervisor.stop();
      await server.close();
      await probe.finished;
      await recovered;
      client.close();
    })());
  return { port: server.port, supervisor, log, stop };
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

/** How long closing may take once nothing is held, before the process exits anyway. */
const EXIT_DEADLINE_MS = 3_000;

/**
 * SIGTERM while a drain runs is held until the drain ends (its own deadline keeps that within the grace
 * period): in a regular pod the kubelet may send it once this container's hook returned, and a drain cut
 * short would let Envoy go with connections open. Every further signal is absorbed: one stop, exit 0.
 */
function stopOnSignals(running: () => RunningSidecar | undefined): void {
  let stopping = false;
  const onSignal = (signal: NodeJS.Signals): void => {
    const sidecar = running();
    if (sidecar === undefined) process.exit(0); // still starting: nothing held, nothing to answer
    const state = sidecar.supervisor.state;
    if (stopping) {
      sidecar.log.info({ event: 'signal', signal, drain_state: state, repeated: true }, `received ${signal} again; already stopping`);
      return;
    }
    stopping = true;
    const busy = sidecar.supervisor.busy();
    sidecar.log.info(
      { event: 'signal', signal, drain_state: state, held: busy !== undefined },
      busy === undefined ? `received ${signal}, stopping` : `received ${signal} during a drain: stopping once the drain has ended`,
    );
    void Promise.resolve(busy)
      .catch(() => undefined)
      .then(() => {
        setTimeout(() => process.exit(0), EXIT_DEADLINE_MS).unref();
        return sidecar.stop();
      })
      .then(
        () => {
          sidecar.log.info({ event: 'stopped' }, 'shutdown manager stopped');
          process.exit(0);
        },
        (error: unknown) => {
          sidecar.log.error({ event: 'stop_failed', error: String(error) }, 'stopping failed');
          process.exit(1);
        },
      );
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
}
