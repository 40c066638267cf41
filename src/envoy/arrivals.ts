/**
 * New client traffic, as Envoy's counters show it: what the drain watches to learn when the load balancer has
 * stopped sending to this pod. Pure functions only: stats.ts gathers the counters, the drain compares two reads.
 *
 * What is a client arrival, per watched listener (every counted listener but those serving the kubelet's probes):
 *
 * - **On a listener with an HTTP connection manager, a request that is not a health check.** Envoy counts every
 *   response per listener and connection manager in `listener.<L>.http.<prefix>.downstream_rq_completed`
 *   (docs/root/configuration/http/http_conn_man/stats.rst, "Per listener statistics"), and a request its HTTP
 *   health-check filter marked as a health check never reaches that counter: ActiveStream::chargeStats
 *   (source/common/http/conn_manager_impl.cc) returns before charging `downstream_rq_completed` and its
 *   `_<N>xx` classes when `streamInfo().healthCheck()` is set, in every release that has the per-listener stats.
 *   So a load balancer's HTTP checks answered by the filter (503 once /healthcheck/fail was taken) are not in
 *   the count at all. The filter's own `http.<prefix>.health_check.request_total`
 *   (docs/root/configuration/http/http_filters/health_check_filter.rst, recent releases) is read for the report
 *   only. A check that the filter does not answer (routed to an upstream) is a request like any: it counts.
 *   A new connection alone is no arrival here: a load balancer's TCP health check is a connection that carries
 *   no request (`listener.<L>.downstream_cx_total` grows, no request counter does). A client's connection carries
 *   a request, counted when its response completes; until then it is an open connection, which holds the drain.
 * - **On a listener without one (a TCP proxy), a new connection** (`listener.<L>.downstream_cx_total`,
 *   docs/root/configuration/listeners/stats.rst): Envoy's tcp_proxy counts per stat prefix, not per listener, and
 *   nothing tells a load balancer's TCP check from a client that connects. Such checks hold the drain.
 *
 * - **The kubelet's probes** on a listener's port (--probe-ports, with each probe's period) are a connection, and a
 *   request unless the health-check filter answers them, every period: on such a listener, up to that many new
 *   connections and requests are the probes' (a token bucket in load-balancer.ts), and only what comes beyond is a
 *   client. So a probe on a traffic port neither hides that listener's clients nor holds the drain; a client that
 *   comes while the bucket holds a probe's token is taken for the probe (at most the bucket's burst of them).
 *
 * - **Declared pollers** (--pollers, with each one's period): a load balancer's check of a routed path, an uptime
 *   monitor, a scrape through Envoy. A client to Envoy's stats, and nothing a load balancer's letting go stops: up to
 *   one request per period on an HTTP listener (on a connection of its own or not), or one new connection on a TCP
 *   proxy, is the poller's (a second token bucket in load-balancer.ts), taken out after the probes'. Undeclared, a
 *   poller holds the drain to its deadline, which the drain then names (drain-outcome.ts heldByTraffic).
 *
 * What it cannot see, and says so (BlindSpot): a listener whose stats lack both counters (a stats_matcher), and an
 * HTTP listener whose stats lack downstream_cx_total (requests are seen, new clients and the gaps between them are
 * not). A load balancer that still routes to the pod but has nothing to send (a quiet client) looks like one that
 * let go. Counters that went down (`POST /reset_counters`, a listener replaced) are taken as an arrival: waiting one
 * more quiet period is the safe mistake.
 */

/** Why a counted listener's clients cannot be seen arriving (see the header). */
export type BlindReason =
  /** Neither `downstream_cx_total` nor a per-listener `downstream_rq_completed`: nothing arriving is seen. */
  | 'arrival-counters-missing'
  /** Requests are seen, new connections are not: the gaps between new clients, which size the silence, are unknown. */
  | 'new-connections-missing';

export interface BlindSpot {
  readonly listener: string;
  readonly reason: BlindReason;
}

/** Blind spots of one reason, as reports show them: how many listeners, the first few named (an Envoy may have thousands). */
export interface BlindSpotSummary {
  readonly reason: BlindReason;
  readonly count: number;
  /** At most BLIND_LISTENERS_NAMED, sorted. */
  readonly listeners: readonly string[];
}

export const BLIND_LISTENERS_NAMED = 5;

/** The blind spots by reason, bounded whatever the number of listeners. */
export function summarizeBlindSpots(spots: readonly BlindSpot[]): BlindSpotSummary[] {
  const byReason = new Map<BlindReason, { count: number; listeners: string[] }>();
  for (const { listener, reason } of spots) {
    const entry = byReason.get(reason) ?? { count: 0, listeners: [] };
    entry.count += 1;
    if (entry.listeners.length < BLIND_LISTENERS_NAMED) entry.listeners.push(listener);
    byReason.set(reason, entry);
  }
  return [...byReason].sort(([a], [b]) => (a < b ? -1 : 1)).map(([reason, { count, listeners }]) => ({ reason, count, listeners }));
}

/** The reason a listener with these counters is blind to clients; undefined when it sees them. */
export function blindReasonOf(hasConnections: boolean, hasResponses: boolean): BlindReason | undefined {
  if (!hasConnections) return hasResponses ? 'new-connections-missing' : 'arrival-counters-missing';
  return undefined;
}

/** The kubelet's probes on one listener: their arrivals per ms (the sum of 1/period), and how many may come at once. */
export interface ProbeRate {
  readonly perMs: number;
  readonly burst: number;
}

/** The counters of one read that arrivals are computed from, by key; see ArrivalKey. */
export interface ArrivalTally {
  /** `listener.<L>.downstream_cx_total` of each watched listener. */
  readonly connections: Readonly<Record<string, number>>;
  /** `listener.<L>.http.<prefix>.downstream_rq_completed` of each watched listener, keyed `<L> <prefix>`. */
  readonly responses: Readonly<Record<string, number>>;
  /** `http.<prefix>.health_check.request_total` of the prefixes on watched listeners, for the report; absent where not reported. */
  readonly healthChecks: Readonly<Record<string, number>>;
  /** Watched listeners without an HTTP connection manager's per-listener stats: their new connections are clients. */
  readonly connectionListeners: readonly string[];
  /** The listeners watched (every counted one), sorted. */
  readonly watched: readonly string[];
  /** The kubelet's probes on watched listeners, by listener (absent: none probes it). */
  readonly probeRates: Readonly<Record<string, ProbeRate>>;
  /** Declared pollers on watched listeners, by listener (absent: none declared). */
  readonly pollerRates?: Readonly<Record<string, ProbeRate>>;
  /** Watched listeners whose clients cannot be seen arriving, and why; sorted by listener. */
  readonly blindSpots: readonly BlindSpot[];
}

/**
 * Whether the tally can show any arrival: Envoy reports a counter for at least one watched listener. A
 * stats_matcher that trims them, or a stand-in that lacks them, leaves the load balancer unobservable.
 */
export function isObservable(tally: ArrivalTally): boolean {
  return Object.keys(tally.connections).length > 0 || Object.keys(tally.responses).length > 0;
}

export const EMPTY_TALLY: ArrivalTally = { connections: {}, responses: {}, healthChecks: {}, connectionListeners: [], watched: [], probeRates: {}, blindSpots: [] };

/** What arrived between two reads of one process. */
export interface Arrivals {
  /** Client requests (responses on HTTP listeners, which never include the health-check filter's answers). */
  readonly requests: number;
  /** New connections on watched listeners, HTTP or not (health-check connects included: for the report only). */
  readonly connections: number;
  /** New connections on listeners without an HTTP connection manager: clients, as far as Envoy's stats tell. */
  readonly proxiedConnections: number;
  /** Load-balancer health checks answered by Envoy's health-check filter. */
  readonly healthChecks: number;
  /** A counter went down: reset, or a listener replaced. Counted as an arrival. */
  readonly reset: boolean;
  /**
   * New connections that carried client requests, as far as counters tell: per HTTP listener the smaller of its new
   * connections and its requests (a connection without a request is a health check; a request without a new
   * connection came on one opened before), plus the proxied connections. A load balancer sends new clients as new
   * connections; a request on an old keep-alive connection (an idle client's next one) was routed before. The
   * rate of these is what the silence scales with (src/sidecar/load-balancer.ts).
   */
  readonly newClients: number;
  /** Per probed listener, the new connections taken for the kubelet's probes (out of the allowance given). */
  readonly probesTaken: Readonly<Record<string, number>>;
  /** Per polled listener, the requests (TCP proxy: connections) taken for the declared pollers. */
  readonly pollsTaken: Readonly<Record<string, number>>;
}

/** Whether `arrivals` holds any client traffic: what restarts the quiet period. */
export function hasClientTraffic(arrivals: Arrivals): boolean {
  return arrivals.requests > 0 || arrivals.proxiedConnections > 0 || arrivals.reset;
}

interface Growth {
  readonly sum: number;
  readonly reset: boolean;
}

/** Growth of every key of `later` over `earlier`; a key new in `later` grew by its whole value. */
function growthOf(earlier: Readonly<Record<string, number>>, later: Readonly<Record<string, number>>, keys?: readonly string[]): Growth {
  let sum = 0;
  let reset = false;
  for (const key of keys ?? Object.keys(later)) {
    const now = later[key];
    if (now === undefined) continue;
    const before = earlier[key] ?? 0;
    if (now < before) reset = true;
    else sum += now - before;
  }
  for (const key of Object.keys(earlier)) if (!(key in later) && (keys === undefined || keys.includes(key))) reset = true;
  return { sum, reset };
}

/**
 * What arrived between `earlier` and `later`, two reads of the same process. `probeAllowance`: per probed listener,
 * how many of its new connections (each with at most one request) may be the kubelet's probes in this interval
 * (load-balancer.ts keeps the bucket they come from); they are taken out before anything is called a client.
 */
export function arrivalsBetween(
  earlier: ArrivalTally,
  later: ArrivalTally,
  probeAllowance: Readonly<Record<string, number>> = {},
  pollerAllowance: Readonly<Record<string, number>> = {},
): Arrivals {
  const connections = growthOf(earlier.connections, later.connections);
  const checks = growthOf(earlier.healthChecks, later.healthChecks);
  const responses = growthOf(earlier.responses, later.responses);
  const probesTaken: Record<string, number> = {};
  const pollsTaken: Record<string, number> = {};
  /** The poller's share of `arrived` on `listener` (noted in pollsTaken): what is left is the clients'. */
  const lessPolls = (listener: string, arrived: number): number => {
    const polls = Math.min(Math.max(0, Math.floor(pollerAllowance[listener] ?? 0)), arrived);
    if (polls > 0) pollsTaken[listener] = polls;
    return arrived - polls;
  };
  let requests = 0;
  let proxied = 0;
  let newClients = 0;
  for (const listener of later.watched) {
    const keys = Object.keys(later.responses).filter((key) => key.startsWith(`${listener} `));
    const listenerRequests = growthOf(earlier.responses, later.responses, keys).sum;
    // A load balancer's HTTP health check comes on a connection of its own: where the filter counts them, they are
    // taken out of the new connections (a prefix on several listeners is taken out of each: fewer new clients).
    const prefixes = keys.map((key) => key.slice(listener.length + 1)).filter((prefix) => prefix in later.healthChecks);
    const connected = Math.max(0, growthOf(earlier.connections, later.connections, [listener]).sum - growthOf(earlier.healthChecks, later.healthChecks, prefixes).sum);
    const probes = Math.min(Math.max(0, Math.floor(probeAllowance[listener] ?? 0)), connected);
    if (probes > 0) probesTaken[listener] = probes;
    const clientConnections = connected - probes;
    if (later.connectionListeners.includes(listener)) {
      const clients = lessPolls(listener, clientConnections);
      proxied += clients;
      newClients += clients;
      continue;
    }
    const clientRequests = lessPolls(listener, Math.max(0, listenerRequests - probes));
    requests += clientRequests;
    newClients += Math.min(clientConnections, clientRequests);
  }
  return {
    requests,
    newClients,
    connections: connections.sum,
    proxiedConnections: proxied,
    healthChecks: checks.sum,
    // A check counter that went down changes nothing the rule waits for.
    reset: connections.reset || responses.reset,
    probesTaken,
    pollsTaken,
  };
}

/** The port a listener stat name ends with (`0.0.0.0_8002`, `[__1]_8002`); undefined for a named listener. */
export function portOfListener(listener: string): number | undefined {
  const match = /_(\d{1,5})$/.exec(listener);
  if (match?.[1] === undefined) return undefined;
  const port = Number(match[1]);
  return port >= 1 && port <= 65535 ? port : undefined;
}
