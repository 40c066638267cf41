/**
 * How a drain's end is told: the outcome's shape, the sentence the drain logs and answers /shutdown with, the
 * load balancer's part of the drain_finished line, and the end reasons' states. Pure functions of the drain's
 * facts (no clock, no I/O), apart from the state machine (drain.ts) so that the wording can be read and tested
 * on its own: tests and operators match these sentences, so a change of words here is a change of interface.
 */
import type { BlindSpotSummary } from '../envoy/arrivals.js';
import type { AdminFailureKind } from '../envoy/admin-errors.js';
import { GAP_FACTOR, MIN_PRIOR_CLIENTS, SILENCE_RISK, type LoadBalancerReport } from './load-balancer.js';
import { adminPortHint } from './admin-hint.js';
import { formatDuration } from '../config/duration.js';
import { labelOf } from './drain-steps.js';

/** A hot restart the drain followed (see Drain.followHotRestart): the epoch it was pinned to, and the child's. */
export interface HotRestartSeen {
  readonly fromEpoch: number;
  readonly toEpoch: number;
}

export type DrainState = 'idle' | 'draining' | 'drained' | 'timed-out' | 'interrupted';

export type DrainEndReason =
  /** Open connections at or below min-open-connections, check-delay after the health checks failed. */
  | 'connections-closed'
  /**
   * With long-lived-grace: the connections Envoy can drain at or below min-open-connections, check-delay and
   * the grace after the health checks failed; long-lived ones (upgraded or TCP proxy) were left, to be cut.
   */
  | 'long-lived-left'
  /** Envoy's admin port, which answered before, refused connections several times in a row: Envoy is gone, and its connections with it. */
  | 'envoy-exited'
  /** Another Envoy process answers on the admin port: the one being drained has exited, and its connections with it. */
  | 'envoy-replaced'
  /** drain-timeout elapsed first. */
  | 'deadline'
  /** Envoy's admin API never gave a valid answer in this process's life (a wrong admin address?). */
  | 'admin-unreachable'
  /** The sidecar was told to stop (SIGTERM) before the drain ended. */
  | 'interrupted';

/** The last admin failure of a drain, by kind (see AdminFailureKind). */
export interface AdminFailureReport {
  readonly kind: AdminFailureKind;
  readonly message: string;
  /** Failures of each kind during this drain. */
  readonly counts: Readonly<Record<AdminFailureKind, number>>;
}

export interface DrainOutcome {
  readonly state: Exclude<DrainState, 'idle' | 'draining'>;
  readonly reason: DrainEndReason;
  /** Whether Envoy took POST /healthcheck/fail: if not, load balancers were never told to go. */
  readonly healthChecksFailed: boolean;
  /** Last count read from Envoy; null when none could be read. */
  readonly openConnections: number | null;
  readonly durationMs: number;
  /** The count the drain waited for: at or below it, Envoy was drained. */
  readonly minOpenConnections: number;
  /**
   * Of openConnections, those Envoy cannot drain (upgraded such as WebSocket, or TCP proxy; see
   * ConnectionCount.longLived); null when no count could be read. With reason long-lived-left: those left to be cut.
   */
  readonly longLivedConnections: number | null;
  /** The long-lived-grace the drain ran with; null when off. */
  readonly longLivedGraceMs: number | null;
  /** `host:port` of Envoy's admin API. */
  readonly envoyAdmin: string;
  /** The last admin failure, as logged; null when every call succeeded. */
  readonly lastError: string | null;
  /** The last admin failure and its kind; null when every call succeeded. */
  readonly adminFailure: AdminFailureReport | null;
  /**
   * The last HTTP answer of the admin port that was not what Envoy answers (a 500, an HTML page): such a
   * port is reachable, so "never reachable" would send the operator looking at the network.
   */
  readonly lastInvalidAnswer: string | null;
  /** Listeners named by --listeners that Envoy did not have at the last read; the count could not end the drain. */
  readonly missingListeners: readonly string[];
  /** The listeners Envoy had at the last read (named when some asked for are missing). */
  readonly availableListeners: readonly string[];
  /** Initiation calls that timed out: Envoy may have taken them without saying so. */
  readonly unconfirmedSteps: readonly string[];
  /** The load balancer's lag as seen in Envoy's stats, and whether it had let go (see load-balancer.ts). */
  readonly loadBalancer: LoadBalancerReport;
  /** Hot restarts during the drain, each followed to the new epoch (empty when none). */
  readonly hotRestarts: readonly HotRestartSeen[];
}

/** The load balancer's part of the drain_finished line: the lag operators learn their load balancer's from. */
export function loadBalancerFields(report: LoadBalancerReport): Record<string, unknown> {
  return {
    load_balancer_lag_ms: report.lagMs,
    load_balancer_lag_at_least_ms: report.lagAtLeastMs,
    last_request_ms: report.lastRequestMs,
    last_connection_ms: report.lastConnectionMs,
    load_balancer_quiet: report.quiet,
    quiet_period_ms: report.quietPeriodMs,
    load_balancer_sight: report.sight,
    ...(report.blindSpots.length === 0 ? {} : { load_balancer_blind_spots: report.blindSpots }),
    needed_quiet_ms: report.neededQuietMs,
    ...(report.priorTraffic === null ? {} : { new_clients_before: report.priorTraffic.newClients, before_span_ms: report.priorTraffic.spanMs, sparse: report.sparse }),
    longest_gap_ms: report.longestGapMs,
    ...(report.newConnectionsOpen === 0 ? {} : { new_connections_open: report.newConnectionsOpen }),
    arrivals_since_health_checks_failed: report.sinceHealthChecksFailed,
  };
}

/** One sentence for logs and for the /shutdown answer, with what was seen of the load balancer. */
export function describeOutcome(outcome: DrainOutcome): string {
  const traffic = heldByTraffic(outcome) ? untiringTrafficClause(outcome.loadBalancer) : loadBalancerClause(outcome.loadBalancer);
  const clauses = [describeEnd(outcome), hotRestartClause(outcome.hotRestarts), traffic];
  return clauses.filter((clause) => clause !== '').join('; ');
}

/** Of a drain held by traffic that never went quiet: when it last came, which is no load balancer's lag. */
function untiringTrafficClause(report: LoadBalancerReport): string {
  if (report.lagMs === null) return '';
  return `new client traffic last reached Envoy ${seconds(report.lagAtLeastMs ?? 0)}-${seconds(report.lagMs)}s after its health checks failed (no load balancer's lag: it never stopped)`;
}

/** The hot restarts the drain followed; empty when none. */
function hotRestartClause(hotRestarts: readonly HotRestartSeen[]): string {
  if (hotRestarts.length === 0) return '';
  const epochs = hotRestarts.map(({ fromEpoch, toEpoch }) => `${fromEpoch} to ${toEpoch}`).join(', then ');
  return `Envoy hot-restarted during the drain (restart epoch ${epochs}): the drain followed the new epoch, and its count included the parent's connections`;
}

/** The blind spots in a sentence: each reason with the listeners it blinds (the first few named). */
export function describeBlindSpots(spots: readonly BlindSpotSummary[]): string {
  return spots
    .map(({ reason, count, listeners }) => {
      const named = count <= listeners.length ? listeners.join(', ') : `${listeners.join(', ')} and ${count - listeners.length} more`;
      return reason === 'new-connections-missing'
        ? `on ${named}, requests are seen but not new connections (no downstream_cx_total: a stats_matcher?), so the gaps between new clients cannot be learned`
        : `on ${named}, no client arrival is seen (neither downstream_cx_total nor downstream_rq_completed: a stats_matcher?)`;
    })
    .join('; ');
}

/** What the drain saw of the load balancer letting go; empty before the health checks failed. */
export function loadBalancerClause(report: LoadBalancerReport): string {
  if (report.quietPeriodMs !== null && report.sight !== 'whole' && report.watchedListeners.length > 0) {
    const what = report.sight === 'none' ? 'no listener shows its clients arriving' : describeBlindSpots(report.blindSpots);
    return `the load balancer's lag was not observed (${what}): check-delay protected what the quiet period could not see`;
  }
  if (report.quietPeriodMs !== null && report.sparse && report.lagMs === null && report.observable && report.sight === 'whole') {
    const prior = report.priorTraffic;
    const seen = prior === null ? 'none was seen: the sidecar had not read Envoy before' : `${prior.newClients} in the last ${formatDuration(prior.spanMs)}, fewer than ${MIN_PRIOR_CLIENTS}`;
    return `new clients before the drain were too few to tell a load balancer that let go from a gap (${seen}), and none came after the health checks failed: check-delay protected this drain, and no lag was observed`;
  }
  if (report.lagMs === null || !report.observable) return '';
  const lag =
    report.lagMs === 0
      ? 'no new client traffic reached Envoy after its health checks failed'
      : `the load balancer's last new client traffic reached Envoy ${seconds(report.lagAtLeastMs ?? 0)}-${seconds(report.lagMs)}s after its health checks failed`;
  if (report.quietPeriodMs === null || report.neededQuietMs === null) return lag;
  const needed = formatDuration(report.neededQuietMs);
  // Lengthened: say why, so that a long drain behind a slow balancer with few clients explains itself.
  const why = report.neededQuietMs > report.quietPeriodMs ? silenceReason(report) : '';
  return report.quiet ? `${lag} (then quiet for ${needed}${why})` : `${lag}, and it had not been quiet for ${needed} yet${why}`;
}

/** Why the silence waited for is longer than the quiet period: the gaps seen after the failure, or the rate before it. */
function silenceReason(report: LoadBalancerReport): string {
  const byGaps = report.longestGapMs === null ? 0 : GAP_FACTOR * report.longestGapMs;
  const prior = report.priorTraffic;
  if (prior !== null && !report.sparse && (report.neededQuietMs ?? 0) > byGaps) {
    return `: at the rate of new clients before the drain (${prior.newClients} in ${formatDuration(prior.spanMs)}), a silence that long while the balancer still sends has at most a ${SILENCE_RISK * 100} % chance`;
  }
  return report.longestGapMs === null ? '' : `: ${GAP_FACTOR} times the longest gap between new clients after the failure, ${seconds(report.longestGapMs)}s`;
}

function seconds(ms: number): string {
  return (ms / 1000).toFixed(1);
}

function describeEnd(outcome: DrainOutcome): string {
  const { minOpenConnections } = outcome;
  const seconds = (outcome.durationMs / 1000).toFixed(1);
  const open = outcome.openConnections === null ? 'an unknown number of' : String(outcome.openConnections);
  switch (outcome.reason) {
    case 'connections-closed':
      return `drained: ${open} open connections (at most ${minOpenConnections} allowed) after ${seconds}s`;
    case 'long-lived-left':
      return `drained: ${longLivedLeft(outcome)}`;
    case 'envoy-exited':
      return `drained: Envoy's admin API refuses connections, Envoy has exited (after ${seconds}s)`;
    case 'envoy-replaced':
      return `drained: another Envoy process answers on the admin port, so the one being drained has exited with its connections (after ${seconds}s); the next /shutdown drains the new one`;
    case 'deadline':
      return `drain deadline reached after ${seconds}s${deadlineCause(outcome, open)}; letting the pod terminate`;
    case 'admin-unreachable':
      if (outcome.unconfirmedSteps.length > 0) {
        return `drain ended after ${seconds}s: ${unreachableCause(outcome)}; it may have been told to drain (${outcome.unconfirmedSteps.join(', ')}: no answer came), and its connections were not counted; letting the pod terminate`;
      }
      return `drain ended after ${seconds}s: ${unreachableCause(outcome)}, so Envoy was not drained and its connections were not counted; letting the pod terminate`;
    case 'interrupted':
      return `drain interrupted after ${seconds}s: the shutdown manager is stopping, ${open} connections were open`;
  }
}

function deadlineCause(outcome: DrainOutcome, open: string): string {
  if (outcome.missingListeners.length > 0) {
    return `: the listeners ${outcome.missingListeners.join(', ')} named by --listeners do not exist (Envoy has: ${outcome.availableListeners.join(', ') || 'none'}), so the drain could not count their connections`;
  }
  if (!outcome.healthChecksFailed && outcome.unconfirmedSteps.includes(labelOf('fail-health-checks'))) {
    return `: Envoy never confirmed POST /healthcheck/fail (the call timed out: it may have taken it, with no answer)${failureClause(outcome)}; ${open} connections open`;
  }
  if (!outcome.healthChecksFailed) {
    return `: Envoy never took POST /healthcheck/fail${failureClause(outcome)}, so load balancers were not told to stop sending (${open} connections open)`;
  }
  if (outcome.openConnections === null) return `: no count of open connections could be read${failureClause(outcome)}`;
  if (outcome.availableListeners.length === 0) {
    return ": Envoy's stats report no listener's downstream_cx_active gauge (a stats_matcher?), so no count of its connections could be read";
  }
  const { newConnectionsOpen } = outcome.loadBalancer;
  if (outcome.openConnections !== null && outcome.openConnections <= outcome.minOpenConnections && newConnectionsOpen > 0) {
    return ` with ${open} connections open (at most ${outcome.minOpenConnections} wanted), ${newConnectionsOpen} of them accepted after the health checks failed, their requests still in flight`;
  }
  if (heldByTraffic(outcome)) {
    const { sinceHealthChecksFailed: since } = outcome.loadBalancer;
    return (
      ` with ${open} connections open (at most ${outcome.minOpenConnections} wanted), held only by new client traffic that never went quiet ` +
      `(${since.requests} requests and ${since.connections} connections since the health checks failed). A poller does that (a load balancer's check of a routed path, ` +
      "an uptime monitor, a scrape through Envoy), and failing Envoy's health checks cannot take the pod out of it: point load-balancer checks at the health-check filter's path, " +
      "or, for a poller that is not the load balancer (an uptime monitor, a scrape), declare it (pod annotation shutdown-manager.io/pollers: PORT/PERIOD)"
    );
  }
  if (waitedForSilence(outcome)) {
    const needed = formatDuration(outcome.loadBalancer.neededQuietMs ?? outcome.loadBalancer.quietPeriodMs ?? 0);
    return (
      ` with ${open} connections open (at most ${outcome.minOpenConnections} wanted), waiting for a silence of ${needed} that the deadline came before: ` +
      'no new client reached Envoy after its health checks failed, so the quiet period was longer than the drain had (shorten it, or lengthen the grace period)'
    );
  }
  return ` with ${open} connections still open (at most ${outcome.minOpenConnections} wanted)${longLivedClause(outcome)}`;
}

/**
 * A drain that reached its deadline with its connections at or below the minimum, Envoy told to drain, and the
 * observed rule still waiting for a silence.
 */
function waitedForSilence(outcome: Pick<DrainOutcome, 'healthChecksFailed' | 'openConnections' | 'minOpenConnections' | 'loadBalancer'> & { readonly reason: DrainEndReason | null }): boolean {
  const { reason, healthChecksFailed, openConnections, minOpenConnections, loadBalancer } = outcome;
  return reason === 'deadline' && healthChecksFailed && openConnections !== null && openConnections <= minOpenConnections && loadBalancer.newConnectionsOpen === 0 && loadBalancer.quietPeriodMs !== null && loadBalancer.observable && !loadBalancer.quiet;
}

/**
 * Waiting for a silence that new client traffic kept breaking: only that traffic held the drain. Behind a load
 * balancer that lets go, traffic stops; what never does is a poller (issue 33, case 4), and a longer grace period
 * cannot help. Not when no client came after the health checks failed: then the silence was simply longer than the
 * time left (see deadlineCause), and nothing was seen to hold the drain.
 */
export function heldByTraffic(outcome: Pick<DrainOutcome, 'healthChecksFailed' | 'openConnections' | 'minOpenConnections' | 'loadBalancer'> & { readonly reason: DrainEndReason | null }): boolean {
  const { requests, connections } = outcome.loadBalancer.sinceHealthChecksFailed;
  return waitedForSilence(outcome) && requests + connections > 0;
}

/** The long-lived-left sentence: what was drained, what was left, and why that was allowed. */
function longLivedLeft(outcome: DrainOutcome): string {
  const longLived = outcome.longLivedConnections ?? 0;
  const drainable = (outcome.openConnections ?? 0) - longLived;
  const grace = formatDuration(outcome.longLivedGraceMs ?? 0);
  return (
    `${drainable} drainable connections open (at most ${outcome.minOpenConnections} allowed) after ${(outcome.durationMs / 1000).toFixed(1)}s; ` +
    `${longLived} long-lived connections (upgraded such as WebSocket, or TCP proxy: Envoy cannot drain them) left to be cut, the long-lived grace of ${grace} being over`
  );
}

/** At a deadline: how many of the open connections Envoy could not have drained, and the setting for them. */
function longLivedClause(outcome: DrainOutcome): string {
  const longLived = outcome.longLivedConnections ?? 0;
  if (longLived === 0) return '';
  const hint = outcome.longLivedGraceMs === null ? '; the long-lived-grace setting lets them go sooner' : '';
  return `, ${longLived} of them long-lived (upgraded or TCP proxy, which Envoy cannot drain)${hint}`;
}

function failureClause(outcome: DrainOutcome): string {
  const failure = outcome.adminFailure;
  return failure === null ? '' : ` (last admin failure: ${failure.kind}: ${failure.message})`;
}

/** Refused, slow and not-Envoy are three different fixes: say which this was. */
function unreachableCause(outcome: DrainOutcome): string {
  const address = outcome.envoyAdmin;
  if (outcome.lastInvalidAnswer !== null) {
    return `Envoy's admin API at ${address} answered, but never as Envoy does (last: ${outcome.lastInvalidAnswer})`;
  }
  switch (outcome.adminFailure?.kind) {
    case 'timeout':
      return `Envoy's admin API at ${address} took connections but never answered in time (an overloaded Envoy, or not Envoy)`;
    case 'transport':
      return `Envoy's admin API at ${address} could not be reached (${outcome.adminFailure.message})`;
    case 'refused':
      return `Envoy's admin API was never reachable at ${address}: nothing listens there (${adminPortHint(address)})`;
    default:
      return `Envoy's admin API never answered at ${address}`;
  }
}

export function stateAfter(reason: DrainEndReason): DrainOutcome['state'] {
  switch (reason) {
    case 'connections-closed':
    case 'long-lived-left':
    case 'envoy-exited':
    case 'envoy-replaced':
      return 'drained';
    case 'deadline':
    case 'admin-unreachable':
      return 'timed-out';
    case 'interrupted':
      return 'interrupted';
  }
}
