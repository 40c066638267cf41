/**
 * Sidecar mode: `node dist/entry.cjs mode=sidecar [flags]` (the image: `mode=sidecar [flags]`). Reads the
 * config, starts the HTTP server, then the Envoy side (engine.ts: the admin client, the drain, the start-up
 * probe; when, see engine-loader.ts), and owns the process-level concerns (signals, exit).
 *
 * Keep imports light here: this process runs in every Envoy pod, so its memory and start-up time matter. It is
 * three CommonJS bundles (tools/bundle.mjs: the start, the engine, the metrics), required without Node's ES module
 * loader (src/entry.cts); why, and what each holds: docs/performance.md ("The server first"), held by
 * test/sidecar/bundle.test.ts. `npm run bench` holds its start and memory to a bare node:http server's.
 */
import { drainTimingErrors } from '../config/drain.js';
import { ConfigErrors } from '../config/errors.js';
import { describeSettings, parseOrShowHelp } from '../config/settings.js';
import { adminTarget } from '../envoy/admin-address.js';
import { createJsonLog } from './json-log.js';
import type { SidecarLog } from './log.js';
import { parseSidecarConfig, SHUTDOWN_TOKEN_ENV, SIDECAR_SETTINGS, type SidecarConfig } from '../config/sidecar.js';
import { systemClock, type Clock } from '../clock.js';
import type { SidecarEngine } from './engine.js';
import { ENGINE_DELAY_MS, engineLoader } from './engine-loader.js';
import { openJournal } from './journal.js';
import { startDrainServer } from './server.js';

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
export async function startSidecarFromArgs(args: readonly string[], env: NodeJS.ProcessEnv, hooks: SidecarHooks = {}): Promise<void> {
  const config = parseOrShowHelp(() => parseSidecarConfig(args, env), sidecarUsage);
  if (config === undefined) return;
  checkConsistency(config);
  // Handlers go in before the server listens: a SIGTERM right after the "listening" line must not meet
  // Node's default handler (exit by signal, held requests dropped).
  let sidecar: RunningSidecar | undefined;
  stopOnSignals(() => sidecar);
  sidecar = await startSidecar(config, undefined, undefined, hooks);
}

/** Settings that are each valid but cannot work together: the webhook's checks, on the sidecar's own flags. */
function checkConsistency(config: SidecarConfig): void {
  const errors = drainTimingErrors(config, (name) => `flag --${name}`, 'lower --check-delay or raise --drain-timeout');
  // Reported as a usage error (exit 2), by reportFailure in command.ts.
  if (errors.length > 0) throw new ConfigErrors(errors);
}

/** What the process adds to a sidecar it runs (command.ts); the tests start theirs without. */
export interface SidecarHooks {
  /** Runs once, right before the engine is loaded. */
  readonly beforeEngine?: () => void;
  /** The engine could not be loaded or started (it is logged already). */
  readonly onEngineFailure?: (error: unknown) => void;
}

export interface RunningSidecar {
  readonly port: number;
  readonly log: SidecarLog;
  /** The Envoy side (engine.ts: the admin client, the drain supervisor), loaded now if it was not yet. */
  engine(): Promise<SidecarEngine>;
  /** For stopping: the engine if anything asked for it (loaded, or being loaded); nothing loads it afterwards. */
  settle(): Promise<SidecarEngine | undefined>;
  /** Interrupts a running drain, answers the /shutdown requests held, and closes everything. */
  stop(): Promise<void>;
}

/**
 * The server first, then the rest (engine-loader.ts): what the kubelet's first /healthz needs is loaded, parsed
 * and run before anything else. The journal's directory is checked before listening all the same, so that a
 * volume that cannot hold it still stops the sidecar at start (journal.ts).
 */
export async function startSidecar(
  config: SidecarConfig,
  log: SidecarLog = createJsonLog(config['log-level'], 'shutdown-manager'),
  clock: Clock = systemClock,
  hooks: SidecarHooks = {},
): Promise<RunningSidecar> {
  const journal = openJournal(config['state-dir']);
  const loader = engineLoader(
    () => {
      hooks.beforeEngine?.();
      return import('./engine.js').then(({ startEngine }) => startEngine(config, { journal, log, clock, serverCounters: () => server.counters }));
    },
    (error) => {
      log.error({ event: 'engine_failed', error: String(error) }, `the drain could not be started: ${String(error)}`);
      hooks.onEngineFailure?.(error);
    },
  );
  const shutdownToken = config['shutdown-token'] === '' ? undefined : config['shutdown-token'];
  const server = await startDrainServer({
    drain: loader.drain,
    waitWindowMs: config['wait-window'],
    host: config['serve-address'],
    port: config['serve-port'],
    log,
    shutdownToken,
    metrics: loader.metrics,
    hold: loader.hold,
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
      envoy_admin: adminTarget(config['admin-address'], config['admin-port']),
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
  loader.loadIn(ENGINE_DELAY_MS);
  const settle = async (): Promise<SidecarEngine | undefined> => loader.settle()?.catch(() => undefined);
  let stopping: Promise<void> | undefined;
  const stop = (): Promise<void> =>
    (stopping ??= (async () => {
      const engine = await settle();
      engine?.interrupt();
      await server.close();
      await engine?.close();
    })());
  return { port: server.port, log, engine: loader.load, settle, stop };
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
    if (stopping) {
      void sidecar.settle().then((engine) => {
        const state = engine?.supervisor.state ?? 'idle';
        sidecar.log.info({ event: 'signal', signal, drain_state: state, repeated: true }, `received ${signal} again; already stopping`);
      });
      return;
    }
    stopping = true;
    // A drain asked for while the engine was still loading has started once it is loaded: it is held as well.
    void sidecar
      .settle()
      .then((engine) => {
        const state = engine?.supervisor.state ?? 'idle';
        const busy = engine?.supervisor.busy();
        sidecar.log.info(
          { event: 'signal', signal, drain_state: state, held: busy !== undefined },
          busy === undefined ? `received ${signal}, stopping` : `received ${signal} during a drain: stopping once the drain has ended`,
        );
        return busy;
      })
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
