/**
 * The drain, as a state machine that knows Envoy only through the three calls it needs and nothing of HTTP
 * routes: idle → draining → drained | timed-out | interrupted. Its promises, each kept in one place:
 *
 * - **It ends by its deadline, whatever Envoy does.** The outcome is a promise settled once, by `settle`, and
 *   the deadline timer settles it on its own (`armTimers`): no pending admin call is awaited by the callers,
 *   so an admin answer that never ends cannot hold a /shutdown, a /wait or a SIGTERM.
 * - **It drains the process it started on.** Every stats read carries the mark of the process that answered
 *   (src/envoy/identity.ts); the first read pins it (`observeProcess`), and an answer from another process
 *   ends the drain at once: the pinned one has exited, and another process's count must not end its drain.
 * - **A clock step cannot move it.** Every instant is on the monotonic Clock.now(); the wall clock is only
 *   read to show times to people (src/clock.ts).
 * - **It never says "drained" with drainable connections open**: only a whole count from the pinned process,
 *   check-delay after Envoy took /healthcheck/fail, ends it (`endOfDrainBy`); with long-lived-grace, the
 *   connections Envoy cannot drain (upgraded, TCP proxy: src/envoy/stats.ts) stop counting once the grace is
 *   over, and the outcome says how many were left to be cut (`long-lived-left`).
 * - **It lets go only once the load balancer has**: with a quiet period, no count ends it before no new client
 *   traffic has reached the drained listeners for that long (src/sidecar/load-balancer.ts): the observed rule
 *   only ever adds to check-delay's (`countMayEndFromMs`), and the lag it saw is in every outcome.
 * - **It reports what happened**: refused, timed out and answered-but-not-as-Envoy are told apart, and
 *   listeners named but not found are named, with the ones Envoy has.
 *
 * Started once (single flight): the kubelet delivers preStop hooks at least once and calls both containers'
 * hooks at the same time, so every caller awaits the same outcome.
 */
import { summarizeBlindSpots } from '../envoy/arrivals.js';
import { AdminRefusedError } from '../envoy/admin-errors.js';
import type { WitnessEvidence } from '../envoy/process/witness.js';
import { compareProcess, isHotRestartChild, letGoOfUs, markedRead, MarkTrust, ProcessTrail, type Expectation, type MarkedRead, type OwnConnections, type ProcessMark, type ProcessVerdict, type ReadEvidence } from '../envoy/process/identity.js';
import type { ConnectionCount } from '../envoy/stats.js';
import { LoadBalancerWatch, type LoadBalancerReport, type PriorTraffic } from './load-balancer.js';
import { isoAtOrNull, systemClock, type Clock } from '../clock.js';
import { Once, OnChange } from './log-throttle.js';
import type { SidecarLog } from './log.js';
import type { SidecarConfig } from '../config/sidecar.js';
import { labelOf, type DrainActionId, type DrainStepId } from './drain-steps.js';
import { AdminFailureLedger } from './drain-admin-failures.js';
import { describeBlindSpots, describeOutcome, heldByTraffic, loadBalancerFields, stateAfter, type AdminFailureReport, type DrainEndReason, type DrainOutcome, type DrainState, type HotRestartSeen } from './drain-outcome.js';

// The outcome's types, for the modules that know them as the drain's (their wording is in drain-outcome.ts).
export type { AdminFailureReport, DrainEndReason, DrainOutcome, DrainState, HotRestartSeen } from './drain-outcome.js';

/** What the drain needs from Envoy's admin API; EnvoyAdminClient implements it. */
export interface EnvoyDrainTarget extends OwnConnections {
  /** `host:port` or `unix:/path`, for messages. */
  readonly address: string;
  /** Whether the admin API has given a valid answer once in this process's life (the start-up probe or any call). */
  readonly hasAnswered: boolean;
  failHealthChecks(signal: AbortSignal): Promise<void>;
  drainListeners(signal: AbortSignal): Promise<void>;
  /** With `evidence`, what the witness connection showed (EnvoyAdminClient); absent from a target that keeps none. */
  countOpenConnections(signal: AbortSignal): Promise<ConnectionCount & { readonly evidence?: ReadEvidence }>;
}

/**
 * Refusals that end a drain as envoy-exited without the witness's evidence (no witness ever connected, or the
 * refusals are of another kind of target): they must have lasted this long, besides admin-refusals in a row.
 */
export const REFUSALS_WITHOUT_EVIDENCE_MS = 10_000;

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

/** What /drain shows: enough to understand a pod stuck in Terminating. */
export interface DrainSnapshot {
  readonly state: DrainState;
  readonly reason: DrainEndReason | null;
  readonly startedAt: string | null;
  readonly deadline: string | null;
  readonly finishedAt: string | null;
  readonly elapsedMs: number | null;
  readonly remainingMs: number | null;
  readonly openConnections: number | null;
  readonly openConnectionsByListener: Readonly<Record<string, number>> | null;
  /** Of openConnections at the last poll, those Envoy can drain, and those it cannot (see ConnectionCount). */
  readonly drainableConnections: number | null;
  readonly longLivedConnections: number | null;
  /** The long-lived-grace; null when off (long-lived connections hold the drain like any other). */
  readonly longLivedGraceMs: number | null;
  readonly missingListeners: readonly string[];
  readonly availableListeners: readonly string[] | null;
  readonly lastPollAt: string | null;
  readonly polls: number;
  readonly minOpenConnections: number;
  readonly healthChecksFailed: boolean;
  /** When Envoy took POST /healthcheck/fail; the count can end the drain from check-delay after it. */
  readonly healthChecksFailedAt: string | null;
  readonly listenersDraining: boolean;
  readonly consecutiveRefusals: number;
  readonly lastError: string | null;
  readonly adminFailure: AdminFailureReport | null;
  /** `host:port` of Envoy's admin API. */
  readonly envoyAdmin: string;
  /** False while the admin API has never answered: refusals then do not mean that Envoy exited. */
  readonly envoyAdminEverReachable: boolean;
  /** The mark of the Envoy process this drain is pinned to (see src/envoy/identity.ts); null before the first read. */
  readonly pinnedProcess: ProcessMark;
  /** The load balancer's lag so far, and whether it has let go (see load-balancer.ts). */
  readonly loadBalancer: LoadBalancerReport;
  readonly hotRestarts: readonly HotRestartSeen[];
  /** `server.parent_connections` at the last read: a hot restart parent's open connections; null when not reported. */
  readonly parentConnections: number | null;
}

/**
 * Told before each initiation call is sent (`intended`: it may reach Envoy) and once Envoy took it
 * (`accepted`), so that a record of it survives this process (see journal.ts). Never rejects.
 */
export type StepHook = (step: DrainStepId, progress: 'intended' | 'accepted') => Promise<void>;

/** The drain that ended before this one (see DrainOptions.previous). */
export interface PreviousDrain {
  /** The last read known of the process that drain drained. */
  readonly read: MarkedRead;
  /** Monotonic; undefined if that drain's POST /healthcheck/fail was never taken. */
  readonly healthChecksFailedAtMs: number | undefined;
  /** What that drain saw of the load balancer: a drain of the same process goes on from it. */
  readonly loadBalancer?: LoadBalancerWatch;
}

export interface DrainOptions {
  /**
   * The drain that ended before this one. If this drain finds the same process, that process's health checks
   * have been failing since then: check-delay counts from that, and a repeated /shutdown ends quickly.
   */
  readonly previous?: PreviousDrain;
  readonly onStep?: StepHook;
  /** Whether marks follow our connections at this admin address (identity.ts); the supervisor shares one. */
  readonly trust?: MarkTrust;
  /** The traffic seen before the drain, asked for when it starts (load-balancer.ts PriorTraffic); none when absent. */
  readonly priorTraffic?: () => PriorTraffic | null;
}

interface InitiationStep {
  readonly id: DrainStepId;
  readonly call: (signal: AbortSignal) => Promise<void>;
  done: boolean;
}

export class Drain {
  private state: DrainState = 'idle';
  private outcome: Promise<DrainOutcome> | undefined;
  private resolveOutcome: ((outcome: DrainOutcome) => void) | undefined;
  private rejectOutcome: ((error: unknown) => void) | undefined;
  private startedAtMs: number | undefined;
  private finishedAtMs: number | undefined;
  private endReason: DrainEndReason | null = null;
  /** Aborted when the drain ends, however: cancels every sleep, timer and pending admin call at once. */
  private readonly ended = new AbortController();
  /** The process this drain drains, followed from its first read (see observeProcess), or a hot restart's child. */
  private pinned: ProcessTrail;
  /** `server.hot_restart_epoch` of the pinned process; null when Envoy does not report it, undefined before the first read. */
  private pinnedEpoch: number | null | undefined;
  private readonly hotRestarts: HotRestartSeen[] = [];
  /** After following a hot restart: the child has not yet shown that it merged its parent's stats (childMerged). */
  private awaitingChildMerge = false;
  /** The last read, of whichever process answered it (another one, when the drain ends replaced). */
  private latest: MarkedRead | undefined;
  /** Steps Envoy took since the last read of the pinned process: they may have reached a process that replaced it. */
  private stepsSinceRead: DrainStepId[] = [];
  private lastCount: ConnectionCount | undefined;
  private lastPollAtMs: number | undefined;
  private polls = 0;
  /** Failed admin calls: counts, the last one, the run of refusals, the steps that timed out, their warnings. */
  private readonly failures: AdminFailureLedger;
  /** The missing listeners last logged (warnMissingListeners); '' before any. */
  private readonly missingLine = new OnChange('');
  /** The sight and blind spots last warned about (warnIfBlind); '' before any. */
  private readonly blindLine = new OnChange('');
  /**
   * The once-per-drain lines: a hot restart's parent holding connections, stats without the admin listener's mark,
   * a refusal while the witness shows Envoy alive, a read that could be a reset or another process (drainAsForBoth).
   */
  private readonly warned = new Once<'parent-holds' | 'unmarked' | 'alive-refusing' | 'untold'>();
  /** The admin call in flight, if any: named when the deadline cuts it. */
  private pendingCall: DrainActionId | undefined;
  /** When POST /healthcheck/fail succeeded: load balancers start deregistering the pod from then on. */
  private healthChecksFailedAtMs: number | undefined;
  private readonly steps: InitiationStep[];
  private readonly onStep: StepHook;
  /** New client traffic on the drained listeners, read by read (replaced by the previous drain's for the same process). */
  private loadBalancerWatch: LoadBalancerWatch;

  constructor(
    private readonly envoy: EnvoyDrainTarget,
    private readonly settings: DrainLoopSettings,
    private readonly log: SidecarLog,
    private readonly clock: Clock = systemClock,
    private readonly options: DrainOptions = {},
  ) {
    this.onStep = options.onStep ?? (async () => undefined);
    this.failures = new AdminFailureLedger(envoy, log, clock);
    this.pinned = new ProcessTrail(envoy, options.trust ?? new MarkTrust());
    this.loadBalancerWatch = new LoadBalancerWatch(quietPeriodOf(settings));
    this.steps = [
      { id: 'fail-health-checks', call: (signal) => envoy.failHealthChecks(signal), done: false },
      { id: 'drain-listeners', call: (signal) => envoy.drainListeners(signal), done: false },
    ];
  }

  /**
   * Starts the drain on the first call; every call returns the same outcome, settled by the drain deadline at
   * the latest. `startedAtMs` (monotonic; first call only, default now): when the /shutdown that asked for it
   * arrived, so that any time spent before counts against the deadline. Admin failures are retried, never
   * thrown: it rejects only on a bug (the clock or the logger throwing).
   */
  start(startedAtMs?: number): Promise<DrainOutcome> {
    if (this.outcome === undefined) {
      this.outcome = new Promise<DrainOutcome>((resolve, reject) => {
        this.resolveOutcome = resolve;
        this.rejectOutcome = reject;
      });
      this.state = 'draining';
      this.startedAtMs = startedAtMs ?? this.clock.now();
      this.loadBalancerWatch.setPriorTraffic(this.options.priorTraffic?.() ?? null);
      this.armTimers();
      this.run().catch((error: unknown) => this.fail(error));
    }
    return this.outcome;
  }

  /** Ends a running drain now (the sidecar is stopping); its callers get an 'interrupted' outcome. */
  interrupt(): void {
    if (this.state === 'draining') this.settle('interrupted');
  }

  get current(): DrainState {
    return this.state;
  }

  /** When the process drained had its health checks failed: for a drain that may find it again. */
  get healthChecksFailedAt(): number | undefined {
    return this.healthChecksFailedAtMs;
  }

  /** The last read, whichever process gave it: what the next read must be compared with. */
  get latestRead(): MarkedRead | undefined {
    return this.latest;
  }

  /** Monotonic instant the drain ended; undefined while it has not. */
  get finishedAt(): number | undefined {
    return this.finishedAtMs;
  }

  /** What this drain saw of the load balancer: for a drain that may find the same process again. */
  get loadBalancer(): LoadBalancerWatch {
    return this.loadBalancerWatch;
  }

  /** Reads taken so far (for counters that must keep counting across drains). */
  get pollCount(): number {
    return this.polls;
  }

  snapshot(): DrainSnapshot {
    const now = this.clock.now();
    const started = this.startedAtMs;
    const deadline = started === undefined ? undefined : started + this.settings['drain-timeout'];
    const end = this.finishedAtMs ?? now;
    return {
      state: this.state,
      reason: this.endReason,
      startedAt: isoAtOrNull(this.clock, started),
      deadline: isoAtOrNull(this.clock, deadline),
      finishedAt: isoAtOrNull(this.clock, this.finishedAtMs),
      elapsedMs: started === undefined ? null : end - started,
      remainingMs: deadline === undefined ? null : Math.max(0, deadline - end),
      openConnections: this.lastCount?.total ?? null,
      openConnectionsByListener: this.lastCount?.byListener ?? null,
      drainableConnections: this.lastCount?.drainable ?? null,
      longLivedConnections: this.lastCount?.longLived ?? null,
      longLivedGraceMs: this.longLivedGraceMs,
      missingListeners: this.lastCount?.missingListeners ?? [],
      availableListeners: this.lastCount?.availableListeners ?? null,
      lastPollAt: isoAtOrNull(this.clock, this.lastPollAtMs),
      polls: this.polls,
      minOpenConnections: this.settings['min-open-connections'],
      healthChecksFailed: this.healthChecksFailedAtMs !== undefined,
      healthChecksFailedAt: isoAtOrNull(this.clock, this.healthChecksFailedAtMs),
      listenersDraining: this.stepDone('drain-listeners'),
      consecutiveRefusals: this.failures.consecutiveRefusals,
      lastError: this.failures.lastError,
      adminFailure: this.failures.report(),
      envoyAdmin: this.envoy.address,
      envoyAdminEverReachable: this.envoy.hasAnswered,
      pinnedProcess: this.pinned.latest?.mark ?? null,
      loadBalancer: this.loadBalancerReport(),
      hotRestarts: [...this.hotRestarts],
      parentConnections: this.lastCount?.hotRestart?.parentConnections ?? null,
    };
  }

  // --- the race: whichever comes first settles the outcome, once ---------------------------------------

  /**
   * The deadline, and the earlier end of a drain whose admin API never answered: both on timers of their own,
   * so that they fire whatever the loop is waiting for.
   */
  private armTimers(): void {
    const deadlineAtMs = (this.startedAtMs ?? 0) + this.settings['drain-timeout'];
    this.clock.sleep(deadlineAtMs - this.clock.now(), this.ended.signal).then(
      // Node's timers keep time in whole milliseconds and may fire a fraction early: the drain ends at its deadline.
      () => this.settle(this.envoy.hasAnswered ? 'deadline' : 'admin-unreachable', Math.max(deadlineAtMs, this.clock.now())),
      () => undefined, // the drain ended first
    );
    this.clock.sleep(this.unansweredCutoffAtMs() - this.clock.now(), this.ended.signal).then(
      () => this.endIfNeverAnswered(),
      () => undefined,
    );
  }

  private get isOver(): boolean {
    return this.endReason !== null;
  }

  private settle(reason: DrainEndReason, atMs = this.clock.now()): void {
    if (this.isOver) return;
    this.endReason = reason;
    this.finishedAtMs = atMs;
    this.state = stateAfter(reason);
    if (this.pendingCall !== undefined && reason !== 'interrupted') this.failures.noteCutCall(this.pendingCall);
    this.ended.abort(reason);
    const outcome = this.outcomeNow(reason);
    this.log.info(
      {
        event: 'drain_finished',
        state: outcome.state,
        reason,
        open_connections: outcome.openConnections,
        long_lived_connections: outcome.longLivedConnections,
        min_connections: this.settings['min-open-connections'],
        duration_ms: outcome.durationMs,
        ...loadBalancerFields(outcome.loadBalancer),
        ...(outcome.adminFailure === null ? {} : { admin_failure: outcome.adminFailure.kind }),
        ...(outcome.missingListeners.length > 0 ? { missing_listeners: outcome.missingListeners } : {}),
        ...(heldByTraffic(outcome) ? { held_by_traffic: true } : {}),
      },
      describeOutcome(outcome),
    );
    this.resolveOutcome?.(outcome);
  }

  /** A bug in the loop: the callers get an error (500), and the drain counts as interrupted. */
  private fail(error: unknown): void {
    if (this.isOver) return;
    this.endReason = 'interrupted';
    this.finishedAtMs = this.clock.now();
    this.state = 'interrupted';
    this.ended.abort(error);
    this.rejectOutcome?.(error);
  }

  // --- the loop ----------------------------------------------------------------------------------------

  /**
   * Rounds until the drain is settled: each reads Envoy (the count, and which process answered), then sends the
   * initiation calls not taken yet, once the drain delay is over. Every await in it ends when the drain does
   * (sleeps and admin calls get `ended.signal`), and every round is at least a millisecond after the last.
   */
  private async run(): Promise<void> {
    this.logStarted();
    while (!this.isOver) {
      const roundAtMs = this.clock.now();
      await this.round();
      if (this.isOver) return;
      const nextAtMs = Math.max(roundAtMs + 1, this.nextRoundAtMs(roundAtMs));
      try {
        await this.clock.sleep(nextAtMs - this.clock.now(), this.ended.signal);
      } catch {
        return; // ended
      }
    }
  }

  private async round(): Promise<void> {
    const answered = await this.readEnvoy();
    if (this.isOver) return;
    if (answered !== 'refused' && this.clock.now() >= this.stepsDueAtMs()) await this.sendSteps();
    if (this.isOver) return;
    if (this.clock.now() >= this.unansweredCutoffAtMs()) this.endIfNeverAnswered();
  }

  /**
   * Rounds follow check-interval from one start to the next; the first round after the drain delay comes at
   * its end, and one comes exactly when a count may first end the drain (check-delay after the health checks
   * failed) and when long-lived connections may first be left (see longLivedMayBeLeftFromMs), so that the
   * drain ends then rather than up to an interval later.
   */
  private nextRoundAtMs(lastRoundAtMs: number): number {
    const candidates = [lastRoundAtMs + this.settings['check-interval']];
    const stepsDue = this.stepsDueAtMs();
    if (stepsDue > lastRoundAtMs) candidates.push(stepsDue);
    for (const mayEnd of [this.countMayEndFromMs(), this.longLivedMayBeLeftFromMs()]) {
      if (mayEnd !== undefined && mayEnd > lastRoundAtMs) candidates.push(mayEnd);
    }
    return Math.min(...candidates);
  }

  private stepsDueAtMs(): number {
    return (this.startedAtMs ?? 0) + this.settings['drain-delay'];
  }

  /**
   * An admin API that never answered holds the pod only as long as a `sleep` preStop would: the drain delay
   * and the check delay, so that endpoints propagate. Holding longer helps no one: Envoy was never told to
   * drain, so its connections are cut at the end anyway.
   */
  private unansweredCutoffAtMs(): number {
    return (this.startedAtMs ?? 0) + this.settings['drain-delay'] + this.settings['check-delay'];
  }

  /**
   * Ends the drain as admin-unreachable if the admin API never answered and nothing it did suggests that it got
   * our calls: a call that timed out may have reached an overloaded Envoy, which may be draining, so such a
   * drain runs on to its deadline.
   */
  private endIfNeverAnswered(): void {
    if (this.isOver || this.envoy.hasAnswered || this.failures.timeouts > 0) return;
    // Not before a call has failed, nor while one is pending: it may yet answer, or time out.
    if (this.failures.last === undefined || this.pendingCall !== undefined) return;
    this.settle('admin-unreachable');
  }

  /**
   * Load balancers notice the pod leaving only once Envoy fails its health checks, so the count may end the
   * drain only check-delay after POST /healthcheck/fail succeeded, however late that was. Undefined while it
   * has not: only the deadline (or Envoy exiting) ends such a drain.
   */
  private countMayEndFromMs(): number | undefined {
    const failedAt = this.healthChecksFailedAtMs;
    if (failedAt === undefined) return undefined;
    const quietFrom = this.loadBalancerWatch.quietFromMs();
    return Math.max(failedAt + this.settings['check-delay'], quietFrom ?? -Infinity);
  }

  private loadBalancerReport(): LoadBalancerReport {
    return this.loadBalancerWatch.report(this.healthChecksFailedAtMs, this.lastCount?.arrivals.watched ?? []);
  }

  private get longLivedGraceMs(): number | null {
    return this.settings['long-lived-grace'] ?? null;
  }

  /**
   * From when long-lived connections no longer hold the drain: long-lived-grace after the health checks failed
   * (the instant check-delay counts from, so that clients had the same notice), never before check-delay, and with
   * the observed rule, once no client request came for its silence. New TCP-proxy connections do not restart that
   * silence: they are long-lived ones too, cut with the rest, and a load balancer's TCP checks on a TCP proxy look
   * just like them (issue 33, case 4: they held such a drain to its deadline, grace or not). Undefined when the
   * setting is off, or the health checks have not failed.
   */
  private longLivedMayBeLeftFromMs(): number | undefined {
    const grace = this.longLivedGraceMs;
    const failedAt = this.healthChecksFailedAtMs;
    if (grace === null || failedAt === undefined) return undefined;
    const requestsQuietFrom = this.loadBalancerWatch.requestsQuietFromMs() ?? -Infinity;
    return Math.max(failedAt + this.settings['check-delay'], failedAt + grace, requestsQuietFrom);
  }

  // --- reading Envoy -----------------------------------------------------------------------------------

  /** One stats read: which process answered, and its count. Settles the drain when that says it is over. */
  private async readEnvoy(): Promise<'answered' | 'refused' | 'failed'> {
    const sentAtMs = this.clock.now();
    const growth = this.expectedGrowth();
    let count: ConnectionCount & { readonly evidence?: ReadEvidence };
    try {
      count = await this.adminCall('count-connections', (signal) => this.envoy.countOpenConnections(signal));
    } catch (error) {
      return this.onAdminFailure(error, 'count-connections');
    }
    if (this.isOver) return 'answered';
    this.failures.readAnswered();
    const process = this.observeProcess(count.adminConnectionsTotal, growth, count.evidence, count.hotRestart?.epoch ?? null);
    if (process === 'hot-restarted') {
      this.followHotRestart(count);
      return 'answered';
    }
    if (process === 'replaced') {
      this.settle('envoy-replaced');
      return 'answered';
    }
    // A count linked to the pinned process: by the witness, a mark that grew as it must, or the pin itself.
    const attributed = process === 'same' || process === 'reset' || process === 'pinned';
    // Only reads of the pinned process are compared: a doubtful one waits for the next read to settle it. After a
    // reset the arrival counters went down too, which the watch counts as new traffic (load-balancer.ts): it waits.
    if (attributed) this.loadBalancerWatch.observe(count.arrivals, sentAtMs, this.clock.now(), this.healthChecksFailedAtMs, count.byListener);
    this.warnIfBlind(count);
    this.recordCount(count, sentAtMs, process);
    // A count that cannot be attributed to the pinned process never ends the drain.
    const ending = attributed ? this.endOfDrainBy(count, sentAtMs) : undefined;
    if (ending !== undefined) this.settle(ending);
    return 'answered';
  }

  /**
   * Taken right before a read is sent: how much the admin counter must have grown since the pinned process's
   * last read (or, before the first, since the previous drain's) if the same process answers (identity.ts).
   */
  private expectedGrowth(): { readonly pinned: Expectation; readonly previous: number | undefined } {
    const previous = this.options.previous;
    const sincePrevious = previous === undefined || this.pinned.latest !== undefined ? undefined : this.envoy.connectedSince(previous.read.marker) + 1;
    return { pinned: this.pinned.expect(), previous: sincePrevious };
  }

  /**
   * The one place that decides which process a read came from. The first read pins the process (inheriting
   * the previous drain's health-check failure if it is the same one); every later read must come from it.
   */
  private observeProcess(
    mark: ProcessMark,
    growth: { readonly pinned: Expectation; readonly previous: number | undefined },
    evidence: ReadEvidence | undefined,
    epoch: number | null,
  ): ProcessVerdict | 'pinned' | 'hot-restarted' {
    if (mark === null) this.warnUnmarked(evidence !== undefined);
    const verdict = this.pinned.observe(mark, growth.pinned, evidence);
    this.latest = markedRead(mark, this.envoy.connectionMarker(), evidence);
    // Another process whose restart epoch is above the pinned one's is its hot restart child: the pinned process
    // (the parent) still holds its connections, and the child took its listeners (see followHotRestart). The
    // parent holds the witness too, so a counter that went down reads as a reset ('reset') unless the epoch says.
    const otherProcess = verdict === 'replaced' || verdict === 'doubtful' || verdict === 'reset';
    if (otherProcess && isHotRestartChild(this.pinnedEpoch, epoch)) return 'hot-restarted';
    if (verdict === 'first') {
      this.pinnedEpoch = epoch;
      this.forgetStepsOfUnknownProcess();
      const previous = this.options.previous;
      const same = previous !== undefined && growth.previous !== undefined && compareProcess(previous.read.mark, mark, growth.previous, this.pinned.trust.verified) === 'same';
      if (same) this.inheritFrom(previous);
      return 'pinned';
    }
    if (verdict === 'replaced') {
      const reached = this.stepsSinceRead.map(labelOf);
      this.log.warn(
        { event: 'envoy_replaced', pinned_admin_connections: this.pinned.latest?.mark ?? null, seen_admin_connections: mark, steps_maybe_to_new_process: reached },
        'another Envoy process answers on the admin port: the one being drained has exited, and its connections with it' +
          (reached.length === 0 ? '' : `; ${reached.join(' and ')}, sent since the last read of the old one, may have reached the new one (the next /shutdown drains it)`),
      );
      return verdict;
    }
    if (verdict === 'reset' && (epoch === null || typeof this.pinnedEpoch !== 'number')) this.resendStepsAfterBlindReset(epoch);
    if (verdict === 'reset') {
      this.log.warn(
        { event: 'envoy_counters_reset', pinned_admin_connections: growth.pinned.base?.mark ?? null, seen_admin_connections: mark, witness: evidence?.witness ?? null },
        "Envoy's admin counter went down while the connection this sidecar holds open to the process being drained stayed open: its counters were reset (POST /reset_counters), it is the same process, and the drain goes on",
      );
    }
    // Marks follow our connections here, yet this one did not, and no witness tells: a reset or another process.
    if (verdict === 'doubtful' && this.pinned.trust.verified) this.drainAsForBoth(growth.pinned.base?.mark ?? null, mark);
    if (verdict === 'doubtful' || verdict === 'unknown') return verdict; // not the pinned process's: steps since stay noted
    this.stepsSinceRead = [];
    return verdict;
  }

  /**
   * Steps Envoy took before the first read that answered went to a process nobody identified: perhaps not the
   * one now pinned (replaced in between). They are sent again, and check-delay counts from the new answer:
   * both steps are idempotent, and a drain must never count a process whose health checks it did not fail.
   */
  private forgetStepsOfUnknownProcess(): void {
    if (this.stepsSinceRead.length === 0) return;
    this.log.info(
      { event: 'drain_steps_resent', steps: this.stepsSinceRead.map(labelOf) },
      `${this.stepsSinceRead.map(labelOf).join(' and ')} went to an Envoy process not identified yet: sending again to the one that answered`,
    );
    this.sendStepsAgain();
  }

  /**
   * Once per drain: a read that is the pinned process reset or another process, and nothing here tells which (issue
   * 38: a hot restart child reset just after its parent exited with the witness). Drained as for both: the steps are
   * sent again, so that another process is told to drain too, and no count ends the drain until a read is tied to
   * the pinned process again (a doubt never ends it), so it is never taken for "replaced".
   */
  private drainAsForBoth(pinnedMark: ProcessMark, seenMark: ProcessMark): void {
    if (!this.warned.first('untold')) return;
    this.log.warn(
      { event: 'envoy_process_untold', pinned_admin_connections: pinnedMark, seen_admin_connections: seenMark },
      "Envoy's admin counter did not grow as this sidecar's connections say, and no connection held to the process being drained tells whether it was reset or replaced: " +
        'draining as for both (its health checks failed and its listeners drained again); no count ends the drain until one is tied to that process again',
    );
    this.sendStepsAgain();
  }

  /** Whether Envoy took the step (and it was not to be sent again since). */
  private stepDone(id: DrainStepId): boolean {
    return this.steps.some((step) => step.id === id && step.done);
  }

  /** Both steps sent again at the next round (they are idempotent), and check-delay counted from their new answer. */
  private sendStepsAgain(): void {
    for (const step of this.steps) step.done = false;
    this.healthChecksFailedAtMs = undefined;
    this.stepsSinceRead = [];
  }

  /**
   * A counter reset seen with no restart epoch to compare (a stats_matcher trims `server.hot_restart_epoch`, now or
   * at the pin) is also what a hot restart looks like over TCP: the parent holds the witness, and the child's
   * counter starts again at 0. Its child would never be told to drain, and its count (which merges the parent's)
   * would end the drain on check-delay counted from the parent's /healthcheck/fail. So the steps are sent again
   * (both are idempotent) and check-delay counts from the new one: a real reset costs one check-delay, a hot restart
   * is drained. Found by the drain model (test/sidecar/drain-model.test.ts, the hot-restart-gauges trim). And, as
   * after a hot restart, no count ends the drain until Envoy reports an uptime (childMerged): a reset process has
   * one already, a hot restart child only once it merged its parent's connections, and a stats_matcher that trims
   * the uptime too holds the drain to its deadline.
   */
  private resendStepsAfterBlindReset(epoch: number | null): void {
    if (epoch !== null) this.pinnedEpoch = epoch;
    this.awaitingChildMerge = true;
    this.log.info(
      { event: 'drain_steps_resent', steps: this.steps.map((step) => labelOf(step.id)), cause: 'counters-reset-without-epoch' },
      "Envoy's counters went down with no restart epoch in its stats (a stats_matcher?): a hot restart cannot be ruled out, so its health checks are failed and its listeners drained again",
    );
    this.sendStepsAgain();
  }

  /**
   * A hot restart (Envoy's hot_restart.rst): the child took the listen sockets and the admin address, and the
   * parent (the process pinned) keeps serving its open connections until the child terminates it
   * (`--parent-shutdown-time-s`). Neither is drained by the other: the drain now pins the child, fails its health
   * checks and drains its listeners (the steps are sent again, and check-delay counts from the child's failure),
   * and its count ends the drain only once `server.parent_connections` is 0 (see parentHoldsConnections). The
   * child's listener gauges include the parent's connections anyway (StatMerger: gauges accumulate), but only from
   * its first merge, when its workers start (InstanceBase::startWorkers calls updateServerStats): before it, the
   * parent's connections are in no count and parent_connections is 0, so no count ends the drain until the child
   * reports an uptime (set by that same update; see childMerged).
   */
  private followHotRestart(count: ConnectionCount & { readonly evidence?: ReadEvidence }): void {
    const fromEpoch = this.pinnedEpoch ?? 0;
    const toEpoch = count.hotRestart?.epoch ?? fromEpoch + 1;
    this.hotRestarts.push({ fromEpoch, toEpoch });
    this.log.warn(
      { event: 'envoy_hot_restarted', from_epoch: fromEpoch, to_epoch: toEpoch, parent_connections: count.hotRestart?.parentConnections ?? null },
      `Envoy hot-restarted (restart epoch ${fromEpoch} to ${toEpoch}): the parent keeps its connections until it exits; ` +
        'the drain now follows the new epoch, fails its health checks and drains its listeners too, and ends only once the parent holds no connection',
    );
    // The witness is held by the parent, and speaks for none of the child's reads (identity.ts witnessVouches): the
    // admin client lets it go and holds a new one, and the child's reads are tied by that one and by its counter.
    this.pinned = new ProcessTrail(this.envoy, this.pinned.trust);
    const unwitnessed = count.evidence === undefined ? undefined : { ...count.evidence, witness: null };
    this.pinned.observe(count.adminConnectionsTotal, this.pinned.expect(), unwitnessed);
    this.pinnedEpoch = toEpoch;
    this.awaitingChildMerge = true;
    this.sendStepsAgain();
    this.recordCount(count, this.clock.now(), 'doubtful');
  }

  /**
   * Whether a hot restart child followed has merged its parent's stats: `server.uptime` above 0 (0 until
   * updateServerStats first runs; then the time since the parent's original start, in whole seconds). Unreported (a
   * stats_matcher), or 0 still because the parent was less than a second old, it never shows: the drain then holds to
   * its deadline, the safe side.
   */
  private childMerged(count: ConnectionCount): boolean {
    if (!this.awaitingChildMerge) return true;
    if ((count.hotRestart?.uptime ?? 0) > 0) this.awaitingChildMerge = false;
    return !this.awaitingChildMerge;
  }

  /** Whether a hot restart's parent still holds connections (`server.parent_connections`): then no count ends the drain. */
  private parentHoldsConnections(count: ConnectionCount): boolean {
    const parent = count.hotRestart?.parentConnections ?? 0;
    if (parent === 0) return false;
    if (this.warned.first('parent-holds')) {
      this.log.info(
        { event: 'hot_restart_parent_holds', parent_connections: parent },
        `a hot restart's parent process still holds ${parent} connections (server.parent_connections): the drain waits for them too`,
      );
    }
    return true;
  }

  private inheritFrom(previous: PreviousDrain): void {
    if (previous.loadBalancer !== undefined) this.loadBalancerWatch = previous.loadBalancer;
    const failedAt = previous.healthChecksFailedAtMs;
    if (failedAt !== undefined && (this.healthChecksFailedAtMs === undefined || failedAt < this.healthChecksFailedAtMs)) {
      this.healthChecksFailedAtMs = failedAt;
    }
  }

  /**
   * How a count ends the drain, if it does: only if it was asked for check-delay after the health checks
   * failed, and is whole. Every open connection at or below the minimum ends it; with long-lived-grace, so do
   * the drainable ones alone once the grace is over, leaving the long-lived ones to be cut.
   */
  private endOfDrainBy(count: ConnectionCount, sentAtMs: number): 'connections-closed' | 'long-lived-left' | undefined {
    const mayEnd = this.countMayEndFromMs();
    const leaveLongLived = this.longLivedMayBeLeftFromMs();
    const countMayEnd = mayEnd !== undefined && sentAtMs >= mayEnd;
    const longLivedMayBeLeft = leaveLongLived !== undefined && sentAtMs >= leaveLongLived;
    if (!countMayEnd && !longLivedMayBeLeft) return undefined;
    if (count.missingListeners.length > 0) return undefined;
    // No listener gauge at all (a stats_matcher trims them): the 0 summed is no count, whatever is open. The
    // supervisor says so at start (checkNeededStats: "it can only end at its deadline or when Envoy exits").
    if (count.availableListeners.length === 0) return undefined;
    if (!this.childMerged(count) || this.parentHoldsConnections(count)) return undefined;
    // A client that came after the failure, its request in flight: min-open-connections is for stragglers (issue 33, case 3).
    if (this.loadBalancerWatch.newConnectionsOpen > 0) return undefined;
    const min = this.settings['min-open-connections'];
    if (countMayEnd && count.total <= min) return 'connections-closed';
    return longLivedMayBeLeft && count.drainable <= min ? 'long-lived-left' : undefined;
  }

  private recordCount(count: ConnectionCount, sentAtMs: number, process: ProcessVerdict | 'pinned'): void {
    this.lastCount = count;
    this.lastPollAtMs = this.clock.now();
    this.polls += 1;
    if (count.missingListeners.length > 0) this.warnMissingListeners(count);
    const started = this.startedAtMs ?? 0;
    const mayEnd = this.countMayEndFromMs();
    this.log.info(
      {
        event: 'poll',
        open_connections: count.total,
        drainable_connections: count.drainable,
        long_lived_connections: count.longLived,
        min_connections: this.settings['min-open-connections'],
        elapsed_ms: sentAtMs - started,
        remaining_ms: Math.max(0, started + this.settings['drain-timeout'] - this.clock.now()),
        by_listener: count.byListener,
        // The mark of the process that answered (src/envoy/identity.ts): which Envoy this count is of.
        admin_connections: count.adminConnectionsTotal,
        process,
        ...(count.missingListeners.length > 0 ? { missing_listeners: count.missingListeners } : {}),
        ...(mayEnd === undefined || sentAtMs < mayEnd ? { check_delay_pending: true } : {}),
      },
      'polled open connections',
    );
  }

  /** Once per set of missing names: the count of such a drain can never end it, so say why, with the fix. */
  private warnMissingListeners(count: ConnectionCount): void {
    const key = count.missingListeners.join(',');
    if (!this.missingLine.changed(key)) return;
    this.log.error(
      { event: 'listeners_missing', missing_listeners: count.missingListeners, available_listeners: count.availableListeners },
      `--listeners names ${count.missingListeners.join(', ')}, which Envoy does not have (it has: ${count.availableListeners.join(', ') || 'none'}): ` +
        'their connections cannot be counted, so only the deadline or Envoy exiting ends this drain; fix the shutdown-manager.io/listeners annotation',
    );
  }

  /** Once per drain: a quiet period that cannot observe anything must say so, at the first read. */
  /**
   * Once per drain and set of blind spots: what of the load balancer letting go the drain cannot see, and what
   * protects it instead. Its lag is then not reported (never as 0): load-balancer.ts LoadBalancerReport.sight.
   */
  private warnIfBlind(count: ConnectionCount): void {
    if (quietPeriodOf(this.settings) === null || count.arrivals.watched.length === 0) return;
    const sight = this.loadBalancerWatch.sight;
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

  private warnUnmarked(witnessed: boolean): void {
    if (!this.warned.first('unmarked')) return;
    this.log.warn(
      { event: 'envoy_unmarked' },
      "Envoy's stats do not report listener.admin.downstream_cx_total (a stats_matcher?): " +
        (witnessed
          ? 'only the connection this sidecar holds open to Envoy ties a count to the process being drained; a count it does not tie never ends the drain'
          : 'an Envoy replaced during the drain cannot be told from the one being drained, so no count after the first ends the drain'),
    );
  }

  // --- telling Envoy to drain --------------------------------------------------------------------------

  /** The initiation calls not taken yet; a refusal ends the round (it is counted once per round). */
  private async sendSteps(): Promise<void> {
    for (const step of this.steps) {
      if (step.done) continue;
      await this.onStep(step.id, 'intended').catch(() => undefined);
      if (this.isOver) return;
      try {
        await this.adminCall(step.id, step.call);
      } catch (error) {
        if ((await this.onAdminFailure(error, step.id)) === 'refused') return;
        continue;
      }
      if (this.isOver) return;
      step.done = true;
      this.stepsSinceRead.push(step.id);
      this.failures.stepAccepted();
      if (step.id === 'fail-health-checks') this.healthChecksFailedAtMs ??= this.clock.now();
      this.log.info({ event: 'drain_step', step: labelOf(step.id) }, `Envoy admin: ${labelOf(step.id)} done`);
      await this.onStep(step.id, 'accepted').catch(() => undefined);
      if (this.isOver) return;
    }
  }

  /** Runs one admin call, noting it as pending so that a deadline that cuts it can say so. */
  private async adminCall<T>(name: DrainActionId, call: (signal: AbortSignal) => Promise<T>): Promise<T> {
    this.pendingCall = name;
    try {
      return await call(this.ended.signal);
    } finally {
      this.pendingCall = undefined;
    }
  }

  /**
   * Records a failed admin call, and settles the drain as envoy-exited once enough refusals came in a row from
   * an admin API that answered before. One that never answered is retried until its cutoff: a refusal then is
   * as likely a wrong admin port as an Envoy gone, and a wrong port must not pass for a drained Envoy.
   */
  private async onAdminFailure(error: unknown, action: DrainActionId): Promise<'refused' | 'failed'> {
    if (this.isOver) return 'failed'; // cut by the end itself
    const failure = this.failures.record(error, action);
    const { kind } = failure;
    if (kind === 'refused' && this.envoy.hasAnswered && this.failures.consecutiveRefusals >= this.settings['admin-refusals'] && this.exitProven(error)) {
      this.settle('envoy-exited');
      return 'refused';
    }
    this.failures.logFailure(error, failure, action);
    return kind === 'refused' ? 'refused' : 'failed';
  }

  /**
   * Whether refusals may be read as Envoy gone: not while the witness connection is open (the process holding it
   * lives: the address was unlinked or moved, not closed); yes once the process drained let go of a witness that
   * spoke for it (identity.ts letGoOfUs: not one held by the process before it, which a restart just before the
   * drain's first read closes: FUZZ_SEED=108 at the brisk pace), or, before any read was pinned, once the latest
   * witness was closed by the other end; otherwise only after refusals lasting REFUSALS_WITHOUT_EVIDENCE_MS. A
   * refusal without evidence at all (a target that keeps no witness) is taken as before.
   */
  private exitProven(error: unknown): boolean {
    const evidence: WitnessEvidence | undefined = error instanceof AdminRefusedError ? error.evidence : undefined;
    if (evidence === undefined) return true;
    if (evidence.witness !== null) {
      this.warnAliveRefusing(error as AdminRefusedError);
      return false;
    }
    const pinnedRead = this.pinned.latest;
    if (pinnedRead === undefined ? evidence.lastClosed : letGoOfUs(pinnedRead, evidence)) return true;
    return this.clock.now() - (this.failures.refusalsSinceMs ?? this.clock.now()) >= REFUSALS_WITHOUT_EVIDENCE_MS;
  }

  /** Once per drain: the admin address refuses while the process drained holds our connection, so it lives. */
  private warnAliveRefusing(error: AdminRefusedError): void {
    if (!this.warned.first('alive-refusing')) return;
    this.log.warn(
      { event: 'envoy_admin_address_lost', error_message: error.message, path_state: error.pathState ?? null, envoy_admin: this.envoy.address },
      `Envoy's admin address refuses connections (${error.message}), but the connection this sidecar holds open to Envoy is still open: Envoy runs, and its connections cannot be counted any more; the drain holds to its deadline`,
    );
  }

  private outcomeNow(reason: DrainEndReason): DrainOutcome {
    const finished = this.finishedAtMs ?? this.clock.now();
    return {
      state: stateAfter(reason),
      reason,
      healthChecksFailed: this.healthChecksFailedAtMs !== undefined,
      openConnections: this.lastCount?.total ?? null,
      durationMs: finished - (this.startedAtMs ?? finished),
      minOpenConnections: this.settings['min-open-connections'],
      longLivedConnections: this.lastCount?.longLived ?? null,
      longLivedGraceMs: this.longLivedGraceMs,
      envoyAdmin: this.envoy.address,
      lastError: this.failures.lastError,
      adminFailure: this.failures.report(),
      lastInvalidAnswer: this.failures.lastInvalidAnswer,
      missingListeners: this.lastCount?.missingListeners ?? [],
      availableListeners: this.lastCount?.availableListeners ?? [],
      unconfirmedSteps: this.failures.unconfirmedSteps((id) => this.stepDone(id)),
      loadBalancer: this.loadBalancerReport(),
      hotRestarts: [...this.hotRestarts],
    };
  }

  private logStarted(): void {
    const { 'drain-delay': drainDelayMs, 'check-delay': checkDelayMs, 'check-interval': checkIntervalMs } = this.settings;
    this.log.info(
      {
        event: 'drain_started',
        deadline: isoAtOrNull(this.clock, (this.startedAtMs ?? 0) + this.settings['drain-timeout']),
        drain_timeout_ms: this.settings['drain-timeout'],
        drain_delay_ms: drainDelayMs,
        check_delay_ms: checkDelayMs,
        check_interval_ms: checkIntervalMs,
        min_connections: this.settings['min-open-connections'],
        long_lived_grace_ms: this.longLivedGraceMs,
        quiet_period_ms: quietPeriodOf(this.settings),
      },
      drainDelayMs > 0
        ? `drain started: Envoy keeps serving for the drain delay of ${drainDelayMs} ms, then its health checks fail and its listeners drain`
        : 'drain started: failing Envoy health checks and draining its listeners',
    );
  }
}

/** The drain's quiet period, null when off. */
function quietPeriodOf(settings: DrainLoopSettings): number | null {
  const quiet = settings['quiet-period'] ?? 0;
  return quiet > 0 ? quiet : null;
}
