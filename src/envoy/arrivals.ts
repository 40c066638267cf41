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
 * What it cannot see: a load balancer that still routes to the pod but has nothing to send (a quiet client).
 * Counters that went down (`POST /reset_counters`, a listener replaced) are taken as an arrival: waiting one
 * more quiet period is the safe mistake.
 */

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
  /** The listeners watched (counted and not serving probes), sorted. */
  readonly watched: readonly string[];
}

/**
 * Whether the tally can show any arrival: Envoy reports a counter for at least one watched listener. A
 * stats_matcher that trims them, or a stand-in that lacks them, leaves the load balancer unobservable.
 */
export function isObservable(tally: ArrivalTally): boolean {
  return Object.keys(tally.connections).length > 0 || Object.keys(tally.responses).length > 0;
}

export const EMPTY_TALLY: ArrivalTally = { connections: {}, responses: {}, healthChecks: {}, connectionListeners: [], watched: [] };

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

/** What arrived between `earlier` and `later`, two reads of the same process. */
export function arrivalsBetween(earlier: ArrivalTally, later: ArrivalTally): Arrivals {
  const connections = growthOf(earlier.connections, later.connections);
  const proxied = growthOf(earlier.connections, later.connections, later.connectionListeners);
  const checks = growthOf(earlier.healthChecks, later.healthChecks);
  const responses = growthOf(earlier.responses, later.responses);
  let newClients = proxied.sum;
  for (const listener of later.watched) {
    if (later.connectionListeners.includes(listener)) continue;
    const keys = Object.keys(later.responses).filter((key) => key.startsWith(`${listener} `));
    // A load balancer's HTTP health check comes on a connection of its own: where the filter counts them, they are
    // taken out of the new connections (a prefix on several listeners is taken out of each: fewer new clients).
    const prefixes = keys.map((key) => key.slice(listener.length + 1)).filter((prefix) => prefix in later.healthChecks);
    const connected = growthOf(earlier.connections, later.connections, [listener]).sum - growthOf(earlier.healthChecks, later.healthChecks, prefixes).sum;
    newClients += Math.max(0, Math.min(connected, growthOf(earlier.responses, later.responses, keys).sum));
  }
  return {
    requests: responses.sum,
    newClients,
    connections: connections.sum,
    proxiedConnections: proxied.sum,
    healthChecks: checks.sum,
    // A check counter that went down changes nothing the rule waits for.
    reset: connections.reset || responses.reset,
  };
}

/** The port a listener stat name ends with (`0.0.0.0_8002`, `[__1]_8002`); undefined for a named listener. */
export function portOfListener(listener: string): number | undefined {
  const match = /_(\d{1,5})$/.exec(listener);
  if (match?.[1] === undefined) return undefined;
  const port = Number(match[1]);
  return port >= 1 && port <= 65535 ? port : undefined;
}
