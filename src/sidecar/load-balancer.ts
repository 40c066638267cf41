/**
 * The load balancer letting go, observed: after Envoy fails its health checks, load balancers keep sending new
 * connections and requests for a lag nobody configures (health-check interval x unhealthy threshold, plus their
 * control plane's and kube-proxy's propagation). This watch follows new client traffic on the drained listeners
 * from one stats read to the next (src/envoy/arrivals.ts says what counts), so that the drain
 *
 * - ends by its count only once no client traffic has arrived for the quiet period (`quietFromMs`), and
 * - reports the lag it saw: from /healthcheck/fail to the last new client arrival (`report`).
 *
 * The quiet period scales with the evidence (`neededQuietMs`). A silence means the load balancer let go only if it
 * is long against the pod's own arrivals while the balancer was still sending: a pod that got a new client every
 * 3 s after its health checks failed can go 10 s without one while still in rotation (docs/proof.md found such gaps
 * of 20-34 s behind an NLB-like balancer, and lost the requests that came after them). So once new clients arrived
 * after the failure, the silence waited for is at least the one that, at their rate since the failure (new clients,
 * Arrivals.newClients, over the time from the failure to the last arrival, taken as a Poisson process), would come
 * by chance once in SILENCE_ODDS: ln(SILENCE_ODDS) / rate. A busy pod (kube-proxy, a fast balancer) is left at
 * --quiet-period; a pod with few clients behind a slow balancer waits for a silence long enough to mean something;
 * a pod that got no new client after the failure is not held (the quiet client, the rule's stated limit).
 *
 * Time is the reads' own: an arrival seen by a read happened after the previous read was sent and before this
 * one's answer came; "quiet since" is the answer of the last read that saw one, or of the first read (nothing is
 * known before it). A read of another process, or one whose process is in doubt, is never compared: the drain
 * ends on such a read or ignores it, and the next read of the pinned process is compared with the last of it.
 */
import { arrivalsBetween, hasClientTraffic, isObservable, type ArrivalTally } from '../envoy/arrivals.js';

/** A silence waited for happens by chance, to a balancer still sending at the rate seen, once in this many drains. */
export const SILENCE_ODDS = 1_000;

/** What the drain says of the load balancer: in /shutdown's answer, in /drain, in its log line, as metrics. */
export interface LoadBalancerReport {
  /** The quiet period the drain waited for after the last client arrival; null when off (check-delay alone). */
  readonly quietPeriodMs: number | null;
  /**
   * The silence needed now: the quiet period, or longer at the rate of client arrivals seen since the health checks
   * failed (see the header); null when off.
   */
  readonly neededQuietMs: number | null;
  /** New clients a second, from the health-check failure to the last arrival; null before an arrival after it. */
  readonly arrivalRatePerSecond: number | null;
  /** The listeners watched: counted, and serving no probe of the kubelet (`--probe-ports`). */
  readonly watchedListeners: readonly string[];
  /**
   * False when Envoy reports none of the counters arrivals are told from for the watched listeners (a
   * stats_matcher trimmed them): the quiet period then holds nothing, and check-delay alone ends the drain.
   */
  readonly observable: boolean;
  /**
   * The lag: ms from Envoy's health-check failure to the answer of the read that first showed the last client
   * arrival (an upper bound; see lagAtLeastMs). 0 when none came after the health checks failed; null
   * before they failed, or before a read after it.
   */
  readonly lagMs: number | null;
  /** The lower bound of the lag: the last arrival came after this (the previous read was sent then); null as lagMs. */
  readonly lagAtLeastMs: number | null;
  /** The same, for client requests alone and for new connections alone (load balancers' TCP checks included). */
  readonly lastRequestMs: number | null;
  readonly lastConnectionMs: number | null;
  /** Counted from the first read after the health checks failed (it may hold some that arrived just before). */
  readonly sinceHealthChecksFailed: { readonly requests: number; readonly connections: number; readonly healthChecks: number };
  /** Whether no client traffic arrived for the quiet period, up to the last read: the load balancer let go, as far as Envoy's stats tell. */
  readonly quiet: boolean;
}

export class LoadBalancerWatch {
  private last: ArrivalTally | undefined;
  private lastSentAtMs: number | undefined;
  /** Answer of the read that last saw client traffic, or of the first read. */
  private quietSinceMs: number | undefined;
  private lastArrival: { readonly atMs: number; readonly afterMs: number } | undefined;
  private lastRequestAtMs: number | undefined;
  private lastConnectionAtMs: number | undefined;
  private lastReadSentAtMs: number | undefined;
  private readonly since = { requests: 0, connections: 0, healthChecks: 0 };
  /** New clients (see Arrivals.newClients) seen by reads answered after the failure. */
  private clientArrivalsSinceFailure = 0;
  private failedAtMs: number | undefined;

  /**
   * `silenceOdds`: see SILENCE_ODDS; null keeps the silence at the quiet period whatever the arrivals (what the
   * rule was before it scaled, kept for the tests' negative control).
   */
  constructor(
    private readonly quietPeriodMs: number | null,
    private readonly silenceOdds: number | null = SILENCE_ODDS,
  ) {}

  /**
   * One read of the pinned process: sent at `sentAtMs`, answered at `answeredAtMs`. `failedAtMs`: when Envoy took
   * /healthcheck/fail, if it has.
   */
  observe(tally: ArrivalTally, sentAtMs: number, answeredAtMs: number, failedAtMs: number | undefined): void {
    const previous = this.last;
    const previousSentAtMs = this.lastSentAtMs ?? sentAtMs;
    this.last = tally;
    this.lastSentAtMs = sentAtMs;
    this.lastReadSentAtMs = sentAtMs;
    if (previous === undefined) {
      this.quietSinceMs = answeredAtMs;
      return;
    }
    const arrivals = arrivalsBetween(previous, tally);
    const afterFailure = failedAtMs !== undefined && answeredAtMs > failedAtMs;
    this.failedAtMs = failedAtMs;
    if (afterFailure) {
      // New clients only: an idle client's next request on its old connection was routed before the failure, and a
      // reset restarts the silence but is no client; neither raises the rate.
      this.clientArrivalsSinceFailure += arrivals.newClients;
      this.since.requests += arrivals.requests + arrivals.proxiedConnections;
      this.since.connections += arrivals.connections;
      this.since.healthChecks += arrivals.healthChecks;
      if (arrivals.requests > 0) this.lastRequestAtMs = answeredAtMs;
      if (arrivals.connections > 0) this.lastConnectionAtMs = answeredAtMs;
    }
    if (!hasClientTraffic(arrivals)) return;
    this.quietSinceMs = answeredAtMs;
    if (afterFailure) this.lastArrival = { atMs: answeredAtMs, afterMs: previousSentAtMs };
  }

  /**
   * From when a read may end the drain as far as the load balancer goes: the quiet period after the last client
   * arrival seen (or after the first read). Undefined when the watch is off; Infinity before any read.
   */
  quietFromMs(): number | undefined {
    const needed = this.neededQuietMs();
    if (needed === null) return undefined;
    // Blind: waiting would learn nothing (see LoadBalancerReport.observable).
    if (this.last !== undefined && !isObservable(this.last)) return undefined;
    return this.quietSinceMs === undefined ? Infinity : this.quietSinceMs + needed;
  }

  /** The silence that means the balancer let go (see the header); null when the rule is off. */
  neededQuietMs(): number | null {
    if (this.quietPeriodMs === null) return null;
    const rate = this.arrivalRatePerSecond();
    if (rate === null || rate === 0 || this.silenceOdds === null) return this.quietPeriodMs;
    return Math.max(this.quietPeriodMs, Math.ceil((Math.log(this.silenceOdds) / rate) * 1000));
  }

  /**
   * Client arrivals a second while the balancer was surely still sending: from the failure to the read that saw the
   * last of them, at least that read's interval (a burst within one read is no rate of its own).
   */
  private arrivalRatePerSecond(): number | null {
    const last = this.lastArrival;
    if (last === undefined || this.failedAtMs === undefined) return null;
    const spanMs = Math.max(last.atMs - this.failedAtMs, last.atMs - last.afterMs, 1);
    return this.clientArrivalsSinceFailure / (spanMs / 1000);
  }

  report(failedAtMs: number | undefined, watched: readonly string[]): LoadBalancerReport {
    const known = failedAtMs !== undefined && this.lastReadSentAtMs !== undefined && this.lastReadSentAtMs >= failedAtMs;
    const since = (atMs: number | undefined): number | null => (!known ? null : atMs === undefined ? 0 : Math.max(0, atMs - failedAtMs));
    const quietFrom = this.quietFromMs();
    return {
      quietPeriodMs: this.quietPeriodMs,
      neededQuietMs: this.neededQuietMs(),
      arrivalRatePerSecond: this.arrivalRatePerSecond(),
      watchedListeners: watched,
      observable: this.last !== undefined && isObservable(this.last),
      lagMs: since(this.lastArrival?.atMs),
      lagAtLeastMs: since(this.lastArrival?.afterMs),
      lastRequestMs: since(this.lastRequestAtMs),
      lastConnectionMs: since(this.lastConnectionAtMs),
      sinceHealthChecksFailed: { ...this.since },
      quiet: quietFrom !== undefined && this.lastReadSentAtMs !== undefined && this.lastReadSentAtMs >= quietFrom,
    };
  }
}
