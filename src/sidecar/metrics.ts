/**
 * Prometheus metrics of sidecar mode. They are read from the drain's snapshot at scrape time, so the drain
 * logic knows nothing of metrics. No default process metrics: this container is sized in tens of MiB.
 * Loaded on the first scrape (see main.ts).
 */
import { LAG_BUCKETS_SECONDS } from './lag-buckets.js';
import type * as PromClient from 'prom-client';
import { ADMIN_FAILURE_KINDS } from '../envoy/admin-errors.js';
import type { AdminCallCounts } from './admin-calls.js';
import { heldByTraffic, type DrainState } from './drain-outcome.js';
import type { DrainServerCounters } from './server.js';
import { NEEDED_STATS } from './needed-stats.js';
import type { DrainSupervisor, RecoveryAction } from './supervisor.js';

/**
 * The three classes this needs, from their own files: prom-client's index also loads its cluster aggregator,
 * push gateway (zlib, https), default-metric collectors and OpenTelemetry's API, which took 10 MiB of
 * resident memory on Node 20 and 16 MiB on Node 24 from every scraped sidecar; these three take under 1 MiB
 * and 3 MiB. They are the very classes the index exports (index.js re-exports lib/*), so the exposition is
 * the same; test/sidecar/sidecar-process.test.ts scrapes it.
 */
// Static imports of those files (typed in prom-client-parts.d.ts), so that esbuild bundles them into
// dist/sidecar-metrics.cjs and the image needs no node_modules; that bundle is required at the first scrape.
import Registry from 'prom-client/lib/registry.js';
import Gauge from 'prom-client/lib/gauge.js';
import Counter from 'prom-client/lib/counter.js';
import Histogram from 'prom-client/lib/histogram.js';
type Registry = PromClient.Registry;

const STATES: readonly DrainState[] = ['idle', 'draining', 'drained', 'timed-out', 'interrupted'];

const RECOVERY_ACTIONS: readonly Exclude<RecoveryAction, 'none'>[] = ['pass-health-checks', 'restart-envoy'];

/**
 * Series of shutdown_manager_open_connections at most: an Envoy may have thousands of listeners, and each series is
 * some 70 bytes of every scrape (and a series in Prometheus). Past this many listeners, the listeners with the
 * most open connections have a series each, and the rest one series summed, listener="other"; /drain names them all.
 */
export const MAX_LISTENER_SERIES = 100;
/** The label of the series that sums the listeners past MAX_LISTENER_SERIES (a listener of that name counts in it too). */
export const OTHER_LISTENERS = 'other';

type ListenerCounts = Readonly<Record<string, number>>;

/**
 * The series of shutdown_manager_open_connections for one poll's counts: all of them up to MAX_LISTENER_SERIES
 * listeners, else the largest (ties by name) and OTHER_LISTENERS, so that their sum is still the total.
 */
function listenerSeries(counts: ListenerCounts | null): readonly (readonly [string, number])[] {
  if (counts === null) return [];
  const entries = Object.entries(counts);
  if (entries.length <= MAX_LISTENER_SERIES) return entries;
  entries.sort(([nameA, a], [nameB, b]) => b - a || (nameA < nameB ? -1 : nameA > nameB ? 1 : 0));
  const kept = new Map(entries.slice(0, MAX_LISTENER_SERIES));
  let others = kept.get(OTHER_LISTENERS) ?? 0;
  for (const [, count] of entries.slice(MAX_LISTENER_SERIES)) others += count;
  kept.set(OTHER_LISTENERS, others);
  return [...kept];
}

/** What /metrics serves (main.ts): Prometheus's text format, as Registry.metrics() writes it. */
export interface SidecarExposition {
  readonly contentType: string;
  metrics(): Promise<string>;
  /** The metrics' definitions (tools/docs.ts). */
  getMetricsAsArray(): ReturnType<Registry['getMetricsAsArray']>;
}

/**
 * `drain.snapshot()` once per scrape: prom-client calls every collect() in one synchronous pass at the start of
 * Registry.metrics(), so that the series of one scrape all come from one snapshot (a microtask forgets it).
 */
function snapshotPerScrape(drain: Pick<DrainSupervisor, 'snapshot'>): () => ReturnType<DrainSupervisor['snapshot']> {
  let current: ReturnType<DrainSupervisor['snapshot']> | undefined;
  return () => {
    if (current === undefined) {
      current = drain.snapshot();
      queueMicrotask(() => (current = undefined));
    }
    return current;
  };
}

/** The drain as the metrics read it: one snapshot per scrape (snapshotPerScrape), and the sidecar's readiness. */
interface ScrapedDrain {
  snapshot(): ReturnType<DrainSupervisor['snapshot']>;
  readiness(): ReturnType<DrainSupervisor['readiness']>;
}

const OPEN_CONNECTIONS = 'shutdown_manager_open_connections';

/**
 * The sidecar's metrics. Every series is read at the scrape, from one snapshot of the drain, except those of
 * shutdown_manager_open_connections, which change only at a poll: they are rendered once per poll (the drain
 * makes a new object of counts at each poll and never changes it). The order of registration is the order of
 * the exposition (and of docs/reference/metrics.md).
 */
export function sidecarMetrics(
  supervisor: Pick<DrainSupervisor, 'snapshot' | 'readiness'>,
  adminCalls: () => AdminCallCounts,
  server: () => DrainServerCounters,
): SidecarExposition {
  const drain: ScrapedDrain = { snapshot: snapshotPerScrape(supervisor), readiness: () => supervisor.readiness() };
  const registry = new Registry();
  registerDrainProgress(registry, drain);
  registerLoadBalancer(registry, drain);
  registerEnvoyAdmin(registry, drain, adminCalls);
  registerEnvoyLifecycle(registry, drain);
  registerServePort(registry, server);
  return exposition(registry, drain);
}

/** Where the drain stands: its state, the connections it waits for, its time spent and left. */
function registerDrainProgress(registry: Registry, drain: ScrapedDrain): void {
  new Gauge({
    name: 'shutdown_manager_drain_state',
    help: 'The drain state, one series per state with value 1 for the current one (drained, timed-out: how it ended).',
    labelNames: ['state'] as const,
    registers: [registry],
    collect() {
      const { state } = drain.snapshot();
      for (const name of STATES) this.set({ state: name }, name === state ? 1 : 0);
    },
  });
  new Gauge({
    name: OPEN_CONNECTIONS,
    help: `Envoy's active downstream connections at the last poll, by listener (absent before the first poll); past ${MAX_LISTENER_SERIES} listeners, the ${MAX_LISTENER_SERIES} with the most and the rest summed under listener="${OTHER_LISTENERS}".`,
    labelNames: ['listener'] as const,
    registers: [registry],
    collect() {
      this.reset();
      for (const [listener, count] of listenerSeries(drain.snapshot().openConnectionsByListener)) this.set({ listener }, count);
    },
  });
  // Separate from open_connections: these are the ones the drain cannot wait out, so an alert on rollouts
  // held to their deadline (or on connections cut with long-lived-grace) looks here.
  new Gauge({
    name: 'shutdown_manager_long_lived_connections',
    help: "Of Envoy's open downstream connections at the last poll, those it cannot drain: upgraded (WebSocket) or TCP proxy (0 before the first poll). After a drain that ended long-lived-left, those left to be cut.",
    registers: [registry],
    collect() {
      this.set(drain.snapshot().longLivedConnections ?? 0);
    },
  });
  new Gauge({
    name: 'shutdown_manager_drain_duration_seconds',
    help: 'How long the drain has lasted (so far, or in all once it ended); 0 before it starts.',
    registers: [registry],
    collect() {
      this.set((drain.snapshot().elapsedMs ?? 0) / 1000);
    },
  });
  // A finished drain is visible only for the moment before the kubelet stops this container, too short for a
  // scrape: alerts on drains cut at the deadline must look at a running drain's time left instead.
  new Gauge({
    name: 'shutdown_manager_drain_remaining_seconds',
    help: "Time left until the drain's deadline: +Inf before it starts; once it ended, what was left then (0: cut at the deadline).",
    registers: [registry],
    collect() {
      const { remainingMs } = drain.snapshot();
      this.set(remainingMs === null ? Infinity : remainingMs / 1000);
    },
  });
}

/** The load balancer letting go, as the drain observed it (docs/design.md#the-load-balancer-letting-go-observed). */
function registerLoadBalancer(registry: Registry, drain: ScrapedDrain): void {
  // The load balancer's deregistration time, measured by every drain: the number check-delay used to guess.
  new Gauge({
    name: 'shutdown_manager_load_balancer_lag_seconds',
    help: "During a drain, seconds from Envoy's health-check failure to the last new client request or connection seen on the drained listeners so far (an upper bound, to the read that saw it); absent before the health checks failed. rule: observed (the drain waits for the load balancer to go quiet) or check-delay (--quiet-period=0s: it does not).",
    // The label also keeps the series absent until there is a lag: a label-less gauge always shows a value.
    labelNames: ['rule'] as const,
    registers: [registry],
    collect() {
      this.reset();
      const { lagMs, quietPeriodMs, observable, sight } = drain.snapshot().loadBalancer;
      if (lagMs !== null && observable && sight === 'whole') this.set({ rule: quietPeriodMs === null ? 'check-delay' : 'observed' }, lagMs / 1000);
    },
  });
  new Gauge({
    name: 'shutdown_manager_drain_held_by_traffic',
    help: "1 once a drain reached its deadline with its connections at or below the minimum, held only by new client traffic that never went quiet (a poller: a load balancer's check of a routed path, an uptime monitor, a scrape through Envoy; a longer grace period cannot help); 0 otherwise.",
    registers: [registry],
    collect() {
      this.set(heldByTraffic(drain.snapshot()) ? 1 : 0);
    },
  });
  // Where the lag above is absent because the drain could not see it: never a 0 that passes for a fast balancer.
  new Gauge({
    name: 'shutdown_manager_load_balancer_unobserved_listeners',
    help: "During and after a drain, the drained listeners whose new clients the drain could not see arriving, by reason (arrival-counters-missing: neither downstream_cx_total nor downstream_rq_completed; new-connections-missing: requests seen, new connections not); absent when it saw every one. While any is, the load balancer's lag is not reported.",
    labelNames: ['reason'] as const,
    registers: [registry],
    collect() {
      this.reset();
      const { blindSpots, quietPeriodMs } = drain.snapshot().loadBalancer;
      if (quietPeriodMs === null) return;
      for (const { reason, count } of blindSpots) this.set({ reason }, count);
    },
  });
  new Histogram({
    name: 'shutdown_manager_drain_load_balancer_lag_seconds',
    help: "One observation per drain, once its lag is settled (the drain ended, or no client traffic for the quiet period): seconds from Envoy's health-check failure to the last new client traffic on the drained listeners.",
    buckets: [...LAG_BUCKETS_SECONDS],
    registers: [registry],
    collect() {
      this.reset();
      // Zeros before the first observation: a series that first shows up at 1 is invisible to increase().
      this.zero({});
      for (const lagMs of drain.snapshot().settledLoadBalancerLagsMs) this.observe(lagMs / 1000);
    },
  });
}

/** Envoy's admin API as the sidecar reaches it: the polls, whether it answers, what its stats lack. */
function registerEnvoyAdmin(registry: Registry, drain: ScrapedDrain, adminCalls: () => AdminCallCounts): void {
  new Counter({
    name: 'shutdown_manager_drain_polls_total',
    help: 'Polls of Envoy for open connections during the drain.',
    registers: [registry],
    collect() {
      this.reset();
      this.inc(drain.snapshot().pollsTotal);
    },
  });
  new Gauge({
    name: 'shutdown_manager_envoy_admin_up',
    help: "1 when the sidecar's last call to Envoy's admin API got a valid answer, 0 when it failed (or none has ended yet).",
    registers: [registry],
    collect() {
      this.set(adminCalls().up === true ? 1 : 0);
    },
  });
  new Gauge({
    name: 'shutdown_manager_envoy_stats_missing',
    help: "1 for each stat the drain needs that Envoy's stats lacked at the first read after start (a stats_matcher?): listener gauges (no count), the admin counter (no process identity but the held connection), listener arrival counters (the load balancer unobservable); 0 when present; absent before that read.",
    labelNames: ['stat'] as const,
    registers: [registry],
    collect() {
      this.reset();
      const check = drain.snapshot().envoyStats;
      if (check === null) return;
      for (const stat of NEEDED_STATS) this.set({ stat }, check.missing.includes(stat) ? 1 : 0);
    },
  });
  new Gauge({
    name: 'shutdown_manager_envoy_admin_answered',
    help: "1 once Envoy's admin API has answered (the sidecar's readiness, latched for the life of the process).",
    registers: [registry],
    collect() {
      this.set(drain.readiness().ready ? 1 : 0);
    },
  });
  new Counter({
    name: 'shutdown_manager_envoy_admin_failures_total',
    help: 'Failed calls to Envoy\'s admin API by kind: refused (nothing listens), timeout (no complete answer in time), invalid-answer (not as Envoy answers), transport.',
    labelNames: ['kind'] as const,
    registers: [registry],
    collect() {
      this.reset();
      const { failures } = adminCalls();
      for (const kind of ADMIN_FAILURE_KINDS) this.inc({ kind }, failures[kind]);
    },
  });
}

/** What the sidecar did about Envoy processes beyond the drain: re-arming after a restart, recovering one left draining. */
function registerEnvoyLifecycle(registry: Registry, drain: ScrapedDrain): void {
  new Counter({
    name: 'shutdown_manager_drain_rearms_total',
    help: 'Times the drain was re-armed because Envoy was restarted after a drain had ended.',
    registers: [registry],
    collect() {
      this.reset();
      this.inc(drain.snapshot().rearms);
    },
  });
  new Counter({
    name: 'shutdown_manager_envoy_recoveries_total',
    help: 'Envoys found left draining at start-up and brought back: pass-health-checks (POST /healthcheck/ok) or restart-envoy (POST /quitquitquit).',
    labelNames: ['action'] as const,
    registers: [registry],
    collect() {
      this.reset();
      const { recovery } = drain.snapshot();
      for (const action of RECOVERY_ACTIONS) {
        const taken = recovery !== null && recovery.action === action && recovery.error === null && !recovery.disabled;
        this.inc({ action }, taken ? 1 : 0);
      }
    },
  });
}

/** Strangers on the serve port are counted, not logged one line each (src/sidecar/server/shutdown-token.ts, connection-guard.ts). */
function registerServePort(registry: Registry, server: () => DrainServerCounters): void {
  new Counter({
    name: 'shutdown_manager_unauthorized_requests_total',
    help: '/shutdown and /wait calls refused (401) for want of the pod\'s token.',
    registers: [registry],
    collect() {
      this.reset();
      this.inc(server().unauthorized);
    },
  });
  new Counter({
    name: 'shutdown_manager_connections_closed_total',
    help: 'Connections to the serve port closed by its bounds, by reason: shed, timedOut, refused, tooManyInFlight, slowReader, writeTimedOut.',
    labelNames: ['reason'] as const,
    registers: [registry],
    collect() {
      this.reset();
      for (const [reason, count] of Object.entries(server().connectionsClosed)) this.inc({ reason }, count);
    },
  });
}

/** Registry.metrics(), but for shutdown_manager_open_connections, rendered once per poll and kept. */
function exposition(registry: Registry, drain: ScrapedDrain): SidecarExposition {
  let listeners: { readonly counts: ListenerCounts | null; readonly text: Promise<string> } | undefined;
  const listenersText = (counts: ListenerCounts | null): Promise<string> => {
    if (listeners?.counts !== counts) {
      const text = registry.getSingleMetricAsString(OPEN_CONNECTIONS);
      listeners = { counts, text };
      text.catch(() => {
        if (listeners?.text === text) listeners = undefined; // the next scrape renders them again
      });
    }
    return listeners.text;
  };
  return {
    contentType: registry.contentType,
    async metrics() {
      // The same snapshot as every collect() that follows: they are all called in this synchronous pass.
      const counts = drain.snapshot().openConnectionsByListener;
      const texts = registry
        .getMetricsAsArray()
        .map((metric) => (metric.name === OPEN_CONNECTIONS ? listenersText(counts) : registry.getSingleMetricAsString(metric.name)));
      return `${(await Promise.all(texts)).join('\n\n')}\n`;
    },
    getMetricsAsArray: () => registry.getMetricsAsArray(),
  };
}
