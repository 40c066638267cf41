/**
 * The stats the drain reads, checked at the first read after start rather than at deletion: what Envoy's stats lack
 * (a stats_matcher trims them), and what each lack costs a drain, in the words /ready, /drain, the log and
 * `shutdown_manager_envoy_stats_missing` say it.
 */
import { isObservable, summarizeBlindSpots } from '../envoy/arrivals.js';
import type { ConnectionCount } from '../envoy/stats.js';
import { describeBlindSpots } from './drain-outcome.js';

/** A stat the drain reads, by the name /metrics labels it with (shutdown_manager_envoy_stats_missing{stat}). */
export type NeededStat = 'listener.<listener>.downstream_cx_active' | 'listener.admin.downstream_cx_total' | 'listener.<listener>.downstream_cx_total';

export const NEEDED_STATS: readonly NeededStat[] = ['listener.<listener>.downstream_cx_active', 'listener.admin.downstream_cx_total', 'listener.<listener>.downstream_cx_total'];

/** The stats the drain needs, as the first stats read after start found them: checked at pod start, not at deletion. */
export interface StatsCheck {
  readonly missing: readonly NeededStat[];
  /** One sentence: what is missing and why the drain cannot be trusted without it; empty when nothing is. */
  readonly detail: string;
}

/** What a stats answer lacks of what the drain needs, and what each lack costs the drain. */
export function checkNeededStats(count: ConnectionCount): StatsCheck {
  const missing: NeededStat[] = [];
  const why: string[] = [];
  if (count.availableListeners.length === 0) {
    missing.push('listener.<listener>.downstream_cx_active');
    why.push("no listener's downstream_cx_active gauge: the drain counts 0 connections whatever is open, so it can only end at its deadline or when Envoy exits");
  }
  if (count.adminConnectionsTotal === null) {
    missing.push('listener.admin.downstream_cx_total');
    why.push('no listener.admin.downstream_cx_total: only the connection the sidecar holds open to Envoy tells the drained process from a replacement, and a count it cannot tie to that process never ends the drain');
  }
  if (count.arrivals.watched.length > 0 && !isObservable(count.arrivals)) {
    missing.push('listener.<listener>.downstream_cx_total');
    why.push("no listener downstream_cx_total nor per-listener downstream_rq_completed: the load balancer letting go cannot be observed, so --quiet-period holds nothing and check-delay alone protects a drain");
  } else if (count.arrivals.blindSpots.length > 0) {
    // Issue 33, case 2: a stats_matcher that trims some of them blinds the rule where it does, and says so here.
    missing.push('listener.<listener>.downstream_cx_total');
    why.push(`${describeBlindSpots(summarizeBlindSpots(count.arrivals.blindSpots))}: the quiet period holds on what is seen, check-delay protects the rest, and the load balancer's lag is not reported`);
  }
  const detail = missing.length === 0 ? '' : `Envoy's stats lack what the drain needs (a stats_matcher?): ${why.join('; ')}`;
  return { missing, detail };
}
