/**
 * The drain's own log lines, in one place: its start, each poll, listeners named but missing, and what of the load
 * balancer it cannot see. Lines that would repeat at every poll are logged when what they say changes.
 */
import { summarizeBlindSpots } from '../envoy/arrivals.js';
import type { ConnectionCount } from '../envoy/stats.js';
import { describeBlindSpots } from './drain-outcome.js';
import type { ReadProcess } from './drain-process.js';
import { longLivedGraceOf, quietPeriodOf, type DrainLoopSettings } from './drain-settings.js';
import type { LoadBalancerReport } from './load-balancer.js';
import { OnChange } from './log-throttle.js';
import type { SidecarLog } from './log.js';

/** Of a poll: where the drain stands when it was answered. */
export interface PollState {
  readonly elapsedMs: number;
  readonly remainingMs: number;
  /** Which process the count came from. */
  readonly process: ReadProcess;
  /** The count cannot end the drain yet: check-delay (or the quiet period) is not over. */
  readonly checkDelayPending: boolean;
}

export class DrainLog {
  /** The missing listeners last logged; '' before any. */
  private readonly missingLine = new OnChange('');
  /** The sight and blind spots last warned about; '' before any. */
  private readonly blindLine = new OnChange('');

  constructor(
    private readonly log: SidecarLog,
    private readonly settings: DrainLoopSettings,
  ) {}

  /** `deadline`: when the drain will end at the latest, as people read it. */
  started(deadline: string | null): void {
    const { 'drain-delay': drainDelayMs, 'check-delay': checkDelayMs, 'check-interval': checkIntervalMs } = this.settings;
    this.log.info(
      {
        event: 'drain_started',
        deadline,
        drain_timeout_ms: this.settings['drain-timeout'],
        drain_delay_ms: drainDelayMs,
        check_delay_ms: checkDelayMs,
        check_interval_ms: checkIntervalMs,
        min_connections: this.settings['min-open-connections'],
        long_lived_grace_ms: longLivedGraceOf(this.settings),
        quiet_period_ms: quietPeriodOf(this.settings),
      },
      drainDelayMs > 0
        ? `drain started: Envoy keeps serving for the drain delay of ${drainDelayMs} ms, then its health checks fail and its listeners drain`
        : 'drain started: failing Envoy health checks and draining its listeners',
    );
  }

  poll(count: ConnectionCount, state: PollState): void {
    if (count.missingListeners.length > 0) this.missingListeners(count);
    this.log.info(
      {
        event: 'poll',
        open_connections: count.total,
        drainable_connections: count.drainable,
        long_lived_connections: count.longLived,
        min_connections: this.settings['min-open-connections'],
        elapsed_ms: state.elapsedMs,
        remaining_ms: state.remainingMs,
        by_listener: count.byListener,
        // The mark of the process that answered (src/envoy/process/identity.ts): which Envoy this count is of.
        admin_connections: count.adminConnectionsTotal,
        process: state.process,
        ...(count.missingListeners.length > 0 ? { missing_listeners: count.missingListeners } : {}),
        ...(state.checkDelayPending ? { check_delay_pending: true } : {}),
      },
      'polled open connections',
    );
  }

  /**
   * Once per drain and set of blind spots: what of the load balancer letting go the drain cannot see, and what
   * protects it instead. Its lag is then not reported (never as 0): load-balancer.ts LoadBalancerReport.sight.
   */
  blindness(count: ConnectionCount, sight: LoadBalancerReport['sight']): void {
    if (quietPeriodOf(this.settings) === null || count.arrivals.watched.length === 0) return;
    const spots = summarizeBlindSpots(count.arrivals.blindSpots);
    const key = `${sight} ${JSON.stringify(spots)}`;
    if (sight === 'whole' || !this.blindLine.changed(key)) return;
    if (sight === 'none') {
      this.log.warn(
        { event: 'load_balancer_unobservable', watched_listeners: count.arrivals.watched.length, blind_spots: spots },
        "Envoy's stats report no downstream_cx_total nor per-listener downstream_rq_completed for the drained listeners (a stats_matcher?): " +
          "the load balancer letting go cannot be observed, so the quiet period holds nothing, check-delay alone protects this drain, and its lag is not reported",
      );
      return;
    }
    this.log.warn(
      { event: 'load_balancer_partly_blind', blind_spots: spots },
      `the drain cannot see every client arriving: ${describeBlindSpots(spots)}; ` +
        'the quiet period holds on what it sees, check-delay protects the rest, and the load balancer\'s lag is not reported',
    );
  }


  /** Once per set of missing names: the count of such a drain can never end it, so say why, with the fix. */
  private missingListeners(count: ConnectionCount): void {
    const key = count.missingListeners.join(',');
    if (!this.missingLine.changed(key)) return;
    this.log.error(
      { event: 'listeners_missing', missing_listeners: count.missingListeners, available_listeners: count.availableListeners },
      `--listeners names ${count.missingListeners.join(', ')}, which Envoy does not have (it has: ${count.availableListeners.join(', ') || 'none'}): ` +
        'their connections cannot be counted, so only the deadline or Envoy exiting ends this drain; fix the shutdown-manager.io/listeners annotation',
    );
  }
}
