/**
 * The settings a drain reads, under their flag names (docs/reference/configuration.md), and what a setting that is
 * off reads as.
 */
import type { SidecarConfig } from '../config/sidecar.js';

/**
 * The sidecar's settings the drain loop reads, under their flag names. admin-refusals: consecutive refused
 * admin connections after which Envoy is taken as exited (at least 1); only once the admin API has answered
 * before, or a wrong admin port would pass for an exited Envoy.
 */
export type DrainLoopSettings = Pick<
  SidecarConfig,
  'drain-delay' | 'check-delay' | 'check-interval' | 'min-open-connections' | 'drain-timeout' | 'admin-refusals'
> &
  /** Absent or null: off, the flag's default (callers that predate it need not name it). */
  Partial<Pick<SidecarConfig, 'long-lived-grace'>> &
  /** Absent or 0: off, check-delay alone lets the count end the drain. */
  Partial<Pick<SidecarConfig, 'quiet-period'>>;

/** The drain's quiet period, null when off. */
export function quietPeriodOf(settings: DrainLoopSettings): number | null {
  const quiet = settings['quiet-period'] ?? 0;
  return quiet > 0 ? quiet : null;
}

/** The drain's long-lived-grace, null when off (long-lived connections then hold the drain like any other). */
export function longLivedGraceOf(settings: DrainLoopSettings): number | null {
  return settings['long-lived-grace'] ?? null;
}
