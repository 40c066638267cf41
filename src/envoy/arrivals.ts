/**
 * New client traffic, as Envoy's counters show it: what the drain watches to learn when the load balancer has stopped
 * sending to this pod. Pure functions only: stats.ts gathers the counters, the drain compares two reads.
 *
 * An arrival, per watched listener, is a request that is not a health check on an HTTP listener, or a new connection
 * on a TCP proxy; the kubelet's probes and declared pollers are taken out at their periods (token buckets in
 * load-balancer.ts); a counter that went down counts as one. A listener whose stats cannot show arrivals is a blind
 * spot, and says so. The words: docs/glossary.md#client-arrival, docs/glossary.md#poller, docs/glossary.md#blind-spot;
 * which counters, and why: docs/design.md#the-load-balancer-letting-go-observed.
 */

/** Why a counted listener's clients cannot be seen arriving (docs/glossary.md#blind-spot). */
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
