/**
 * The load balancer letting go, observed: after Envoy fails its health checks, load balancers keep sending new
 * connections and requests for a lag nobody configures. This watch follows new client traffic on the drained
 * listeners from one stats read to the next (arrivals.ts says what counts), so that the drain ends by its count only
 * once no client traffic has arrived for the quiet period (`quietFromMs`, scaled to the evidence by `neededQuietMs`)
 * and no client that came after the failure is still connected (`newConnectionsOpen`), and reports the lag it saw
 * (`report`). It only ever adds to check-delay's rule.
 *
 * The words: docs/glossary.md#the-observed-rule, docs/glossary.md#quiet-period, docs/glossary.md#lag; the rule, its
 * evidence and its limits: docs/design.md#the-load-balancer-letting-go-observed.
 */
import { arrivalsBetween, hasClientTraffic, isObservable, summarizeBlindSpots, type ArrivalTally, type BlindSpotSummary, type ProbeRate } from '../envoy/arrivals.js';

/** The silence waited for is at least this many times the longest gap between new clients since the failure. */
export const GAP_FACTOR = 3;

/**
 * The traffic seen before the drain (issue 33, item 3): new clients, over how long. A pod's new clients before its
 * deletion say how sparse they are, which the gaps seen after the failure cannot: a sparse pod may see none, or
 * one, before the silence it is let go on. Kept by the supervisor's reads of the process running (priorTraffic).
 */
export interface PriorTraffic {
  readonly newClients: number;
  readonly spanMs: number;
}

/**
 * The silence waited for is long enough that, for new clients at the rate seen before the drain (as a Poisson
 * process: e^(-rate x silence)), a silence that long while the balancer still sends has at most this chance.
 */
export const SILENCE_RISK = 0.01;

/** Fewer new clients than this before the drain are too few to size a silence from: the outcome says so. */
export const MIN_PRIOR_CLIENTS = 5;

/** How far back the traffic before a drain is counted; and at most this many reads of it are kept. */
export const PRIOR_WINDOW_MS = 10 * 60_000;
const PRIOR_READS_KEPT = 512;

/** What the drain says of the load balancer: in /shutdown's answer, in /drain, in its log line, as metrics. */
export interface LoadBalancerReport {
  /** The quiet period the drain waited for after the last client arrival; null when off (check-delay alone). */
  readonly quietPeriodMs: number | null;
  /**
   * The silence needed now: the quiet period, or GAP_FACTOR times the longest gap between new clients since the
   * health checks failed (docs/glossary.md#quiet-period); null when off.
   */
  readonly neededQuietMs: number | null;
  /** The longest gap between new clients since the health-check failure (the failure counting as the first); null before one. */
  readonly longestGapMs: number | null;
  /** The listeners watched: every counted one (the kubelet's probes on one are taken out of its arrivals). */
  readonly watchedListeners: readonly string[];
  /**
   * False when Envoy reports none of the counters arrivals are told from for the watched listeners (a
   * stats_matcher trimmed them): the quiet period then holds nothing, and check-delay alone ends the drain.
   */
  readonly observable: boolean;
  /**
   * What the drain could see of the load balancer letting go: 'whole' (every watched listener shows its clients
   * arriving), 'partial' (not all, or not all of it: the quiet period holds on what is seen, and the lag is not
   * reported), 'none' (no arrival counter at all: check-delay alone protects the drain). blindSpots says why.
   */
  readonly sight: 'whole' | 'partial' | 'none';
  /** Watched listeners whose clients cannot be seen arriving, by reason (see arrivals.ts); empty when none. */
  readonly blindSpots: readonly BlindSpotSummary[];
  /**
   * The lag: ms from Envoy's health-check failure to the answer of the read that first showed the last client
   * arrival (an upper bound; see lagAtLeastMs). 0 when none came after the health checks failed; null
   * before they failed, before a read after it, or when the sight is not whole: a lag seen on some listeners is no
   * measure of the load balancer's, and a blind one is never reported as 0.
   */
  readonly lagMs: number | null;
  /** The lower bound of the lag: the last arrival came after this (the previous read was sent then); null as lagMs. */
  readonly lagAtLeastMs: number | null;
  /** The same, for client requests alone and for new connections alone (load balancers' TCP checks included). */
  readonly lastRequestMs: number | null;
  readonly lastConnectionMs: number | null;
  /** Counted from the first read after the health checks failed (it may hold some that arrived just before). */
  readonly sinceHealthChecksFailed: { readonly requests: number; readonly connections: number; readonly healthChecks: number; readonly polls: number };
  /** Whether no client traffic arrived for the quiet period, up to the last read: the load balancer let go, as far as Envoy's stats tell. */
  readonly quiet: boolean;
  /**
   * At the last read, connections accepted after the health checks failed and still open (their requests in flight),
   * at least ("A new client still connected" in docs/design.md#the-load-balancer-letting-go-observed): they hold the
   * drain whatever min-open-connections says. 0 before the failure.
   */
  readonly newConnectionsOpen: number;
  /**
   * New clients seen in the PRIOR_WINDOW_MS before the drain, and over how long; null when not known (no read of
   * this process before it). Below MIN_PRIOR_CLIENTS, or unknown, the traffic is too sparse to tell a balancer that
   * let go from a gap (`sparse`): the silence stays at its floor, check-delay is the protection, and a drain that saw
   * no new client after the failure reports no lag (not 0: none came before either).
   */
  readonly priorTraffic: PriorTraffic | null;
  readonly sparse: boolean;
}

export class LoadBalancerWatch {
  private last: ArrivalTally | undefined;
  private lastSentAtMs: number | undefined;
  /** Answer of the read that last saw client traffic, or of the first read. */
  private quietSinceMs: number | undefined;
  /** Answer of the read that last saw a client request (or a reset), or of the first read. */
  private requestsQuietSinceMs: number | undefined;
  private lastArrival: { readonly atMs: number; readonly afterMs: number } | undefined;
  private lastRequestAtMs: number | undefined;
  private lastConnectionAtMs: number | undefined;
  private readonly since = { requests: 0, connections: 0, healthChecks: 0, polls: 0 };
  /** When a read last saw a new client after the failure (the failure itself before one), and the longest gap between. */
  private lastNewClientAtMs: number | undefined;
  private longestGap: number | undefined;
  /** Per probed listener, the kubelet's probes that may still come unseen; per polled one, the declared pollers' (see arrivals.ts). */
  private readonly probeTokens = new TokenBuckets();
  private readonly pollerTokens = new TokenBuckets();
  private blindSummary: readonly BlindSpotSummary[] = [];
  /** Reads before the failure that saw new clients: when, and how many (bounded: PRIOR_WINDOW_MS, PRIOR_READS_KEPT). */
  private newClientsBefore: { readonly atMs: number; readonly count: number }[] = [];
  private firstAnsweredAtMs: number | undefined;
  private prior: PriorTraffic | null = null;
  /** Per HTTP listener, the fewest connections open at a read since the last one before the failure (see newConnectionsOpen). */
  private fewestOpen = new Map<string, number>();
  private openedSinceFailure = 0;
  /** The TCP-proxy listeners of the last tally, as a set (thousands of listeners: no array search per listener). */
  private proxied: { of: readonly string[]; set: ReadonlySet<string> } = { of: [], set: new Set() };

  /**
   * `gapFactor`: see GAP_FACTOR; null keeps the silence at the quiet period whatever the gaps (what the rule was
   * before it scaled, kept for the tests' negative control).
   */
  constructor(
    private readonly quietPeriodMs: number | null,
    private readonly gapFactor: number | null = GAP_FACTOR,
  ) {}

  /**
   * One read of the pinned process: sent at `sentAtMs`, answered at `answeredAtMs`. `failedAtMs`: when Envoy took
   * /healthcheck/fail, if it has.
   */
  observe(tally: ArrivalTally, sentAtMs: number, answeredAtMs: number, failedAtMs: number | undefined, open: Readonly<Record<string, number>> = {}): void {
    this.noteOpen(tally, open, failedAtMs !== undefined && answeredAtMs > failedAtMs);
    const previous = this.last;
    const previousSentAtMs = this.lastSentAtMs ?? sentAtMs;
    const allowance = this.probeTokens.refill(tally.probeRates, answeredAtMs);
    const pollerAllowance = this.pollerTokens.refill(tally.pollerRates ?? {}, answeredAtMs);
    // Once per read, not per report: a listener-heavy Envoy may have thousands, and /drain is asked for often.
    if (tally.blindSpots !== this.last?.blindSpots) this.blindSummary = summarizeBlindSpots(tally.blindSpots);
    this.last = tally;
    this.lastSentAtMs = sentAtMs;
    if (previous === undefined) {
      this.quietSinceMs = answeredAtMs;
      this.requestsQuietSinceMs = answeredAtMs;
      this.firstAnsweredAtMs = answeredAtMs;
      return;
    }
    const arrivals = arrivalsBetween(previous, tally, allowance, pollerAllowance);
    this.probeTokens.spend(arrivals.probesTaken);
    this.pollerTokens.spend(arrivals.pollsTaken);
    const afterFailure = failedAtMs !== undefined && answeredAtMs > failedAtMs;
    if (!afterFailure && arrivals.newClients > 0) this.noteNewClientBefore(answeredAtMs, arrivals.newClients);
    if (afterFailure) {
      // New clients only: an idle client's next request on its old connection was routed before the failure, and a
      // reset restarts the silence but is no client; neither is a gap's end.
      if (arrivals.newClients > 0) this.noteNewClient(answeredAtMs, failedAtMs);
      this.since.requests += arrivals.requests + arrivals.proxiedConnections;
      this.since.connections += arrivals.connections;
      this.since.healthChecks += arrivals.healthChecks;
      this.since.polls += Object.values(arrivals.pollsTaken).reduce((sum, taken) => sum + taken, 0);
      if (arrivals.requests > 0) this.lastRequestAtMs = answeredAtMs;
      if (arrivals.connections > 0) this.lastConnectionAtMs = answeredAtMs;
    }
    if (arrivals.requests > 0 || arrivals.reset) this.requestsQuietSinceMs = answeredAtMs;
    if (!hasClientTraffic(arrivals)) return;
    this.quietSinceMs = answeredAtMs;
    if (afterFailure) this.lastArrival = { atMs: answeredAtMs, afterMs: previousSentAtMs };
  }

  /**
   * From when a read may end the drain as far as the load balancer goes: the quiet period after the last client
   * arrival seen (or after the first read). Undefined when the watch is off; Infinity before any read.
   */
  quietFromMs(): number | undefined {
    return this.silenceEndsFromMs(this.quietSinceMs);
  }

  /**
   * The same silence over client requests alone: new TCP-proxy connections left out. What long-lived-grace waits for
   * once it is over (drain.ts longLivedMayBeLeftFromMs): a connection Envoy cannot drain is cut then anyway, and a
   * load balancer's TCP checks on a TCP proxy, which look just like one, would hold the drain to its deadline.
   */
  requestsQuietFromMs(): number | undefined {
    return this.silenceEndsFromMs(this.requestsQuietSinceMs);
  }

  /** The needed silence after `sinceMs` (Infinity before any read); undefined when the rule is off or blind. */
  private silenceEndsFromMs(sinceMs: number | undefined): number | undefined {
    const needed = this.neededQuietMs();
    if (needed === null) return undefined;
    // Blind: waiting would learn nothing (see LoadBalancerReport.observable).
    if (this.last !== undefined && !this.observable) return undefined;
    return sinceMs === undefined ? Infinity : sinceMs + needed;
  }

  /** Whether the last read carried counters to tell arrivals from (LoadBalancerReport.observable). */
  get observable(): boolean {
    return this.last !== undefined && isObservable(this.last);
  }

  /**
   * The silence that means the balancer let go (docs/glossary.md#quiet-period); null when the rule is off. With the traffic seen
   * before the drain, at least the silence that clients at that rate leave with SILENCE_RISK at most.
   */
  neededQuietMs(): number | null {
    if (this.quietPeriodMs === null) return null;
    const byGaps = this.longestGap === undefined || this.gapFactor === null ? 0 : this.gapFactor * this.longestGap;
    const byRate = this.prior === null || this.prior.newClients < MIN_PRIOR_CLIENTS ? 0 : (Math.log(1 / SILENCE_RISK) * this.prior.spanMs) / this.prior.newClients;
    return Math.max(this.quietPeriodMs, byGaps, Math.round(byRate));
  }

  /**
   * New clients seen in the PRIOR_WINDOW_MS up to `nowMs` by reads before any failure, and over how long; null before
   * two reads. The supervisor's watch of the running process keeps it between drains.
   */
  priorTraffic(nowMs: number): PriorTraffic | null {
    if (this.firstAnsweredAtMs === undefined || this.last === undefined) return null;
    const fromMs = nowMs - PRIOR_WINDOW_MS;
    const newClients = this.newClientsBefore.filter(({ atMs }) => atMs >= fromMs).reduce((sum, { count }) => sum + count, 0);
    return { newClients, spanMs: Math.max(0, Math.min(PRIOR_WINDOW_MS, nowMs - this.firstAnsweredAtMs)) };
  }

  /** The traffic before this drain (priorTraffic of the supervisor's watch), which sizes the silence. */
  setPriorTraffic(prior: PriorTraffic | null): void {
    this.prior = prior;
  }

  private noteNewClientBefore(atMs: number, count: number): void {
    const fromMs = atMs - PRIOR_WINDOW_MS;
    const kept = this.newClientsBefore.filter((entry) => entry.atMs >= fromMs);
    kept.push({ atMs, count });
    this.newClientsBefore = kept.slice(-PRIOR_READS_KEPT);
  }

  /**
   * Connections accepted after the failure and open at the last read, at least: the open connections of each HTTP
   * listener beyond the fewest seen since the last read before the failure (docs/design.md#the-load-balancer-letting-go-observed).
   */
  get newConnectionsOpen(): number {
    return this.openedSinceFailure;
  }

  private noteOpen(tally: ArrivalTally, open: Readonly<Record<string, number>>, afterFailure: boolean): void {
    if (tally.connectionListeners !== this.proxied.of) this.proxied = { of: tally.connectionListeners, set: new Set(tally.connectionListeners) };
    let opened = 0;
    for (const listener of tally.watched) {
      const now = open[listener];
      if (now === undefined || this.proxied.set.has(listener)) continue;
      // Before the failure every read is the baseline: the connections open then are the stragglers.
      const fewest = afterFailure ? Math.min(this.fewestOpen.get(listener) ?? now, now) : now;
      this.fewestOpen.set(listener, fewest);
      opened += now - fewest;
    }
    this.openedSinceFailure = afterFailure ? opened : 0;
  }

  /** What the last read showed of the watched listeners (LoadBalancerReport.sight). */
  get sight(): LoadBalancerReport['sight'] {
    const last = this.last;
    if (last === undefined || !isObservable(last) || last.watched.length === 0) return 'none';
    return last.blindSpots.length === 0 ? 'whole' : 'partial';
  }

  private noteNewClient(atMs: number, failedAtMs: number): void {
    const gap = atMs - (this.lastNewClientAtMs ?? failedAtMs);
    this.longestGap = Math.max(this.longestGap ?? 0, gap);
    this.lastNewClientAtMs = atMs;
  }

  report(failedAtMs: number | undefined, watched: readonly string[]): LoadBalancerReport {
    const sight = this.sight;
    const sparse = this.prior === null || this.prior.newClients < MIN_PRIOR_CLIENTS;
    // With traffic too sparse to tell, "none came" is no lag of 0: nothing came before either.
    const known = failedAtMs !== undefined && this.lastSentAtMs !== undefined && this.lastSentAtMs >= failedAtMs && sight === 'whole' && !(sparse && this.lastArrival === undefined);
    const since = (atMs: number | undefined): number | null => (!known ? null : atMs === undefined ? 0 : Math.max(0, atMs - failedAtMs));
    const quietFrom = this.quietFromMs();
    return {
      quietPeriodMs: this.quietPeriodMs,
      neededQuietMs: this.neededQuietMs(),
      longestGapMs: this.longestGap ?? null,
      watchedListeners: watched,
      observable: this.observable,
      sight,
      blindSpots: this.blindSummary,
      lagMs: since(this.lastArrival?.atMs),
      lagAtLeastMs: since(this.lastArrival?.afterMs),
      lastRequestMs: since(this.lastRequestAtMs),
      lastConnectionMs: since(this.lastConnectionAtMs),
      sinceHealthChecksFailed: { ...this.since },
      priorTraffic: this.prior,
      sparse,
      newConnectionsOpen: this.openedSinceFailure,
      quiet: quietFrom !== undefined && this.lastSentAtMs !== undefined && this.lastSentAtMs >= quietFrom,
    };
  }
}

/**
 * Per listener, the arrivals that may still come unseen from something that comes at a known rate (the kubelet's
 * probes, declared pollers): a bucket that fills at that rate up to its burst (full at the first read: they came
 * before it too), spent by the arrivals taken for them. Time is the reads' answers'.
 */
class TokenBuckets {
  private readonly tokens = new Map<string, number>();
  private lastAnsweredAtMs: number | undefined;

  /** Fills every bucket for the time since the last read; what each may take at this read. */
  refill(rates: Readonly<Record<string, ProbeRate>>, answeredAtMs: number): Record<string, number> {
    const elapsedMs = this.lastAnsweredAtMs === undefined ? Infinity : Math.max(0, answeredAtMs - this.lastAnsweredAtMs);
    this.lastAnsweredAtMs = answeredAtMs;
    const allowance: Record<string, number> = {};
    for (const [listener, rate] of Object.entries(rates)) {
      const tokens = Math.min(rate.burst, (this.tokens.get(listener) ?? 0) + elapsedMs * rate.perMs);
      this.tokens.set(listener, tokens);
      allowance[listener] = tokens;
    }
    return allowance;
  }

  spend(taken: Readonly<Record<string, number>>): void {
    for (const [listener, count] of Object.entries(taken)) this.tokens.set(listener, (this.tokens.get(listener) ?? 0) - count);
  }
}
