/**
 * The drain (docs/glossary.md#drain): a state machine, idle → draining → drained | timed-out | interrupted, that knows
 * Envoy through three admin calls and nothing of HTTP routes. Its promises (docs/design.md#what-the-drain-promises),
 * each kept in one place:
 * - it ends by its deadline whatever Envoy does: `settle`, once, and the deadline's own timer (`armTimers`);
 * - it never confuses two Envoys: which process a read came from is drain-process.ts's to say;
 * - a clock step cannot move it: every instant is on the monotonic Clock.now() (src/clock.ts);
 * - it never says "drained" with drainable connections open: `endOfDrainBy`, after check-delay and the observed
 *   rule (`countMayEndFromMs`, docs/glossary.md#the-observed-rule);
 * - it is started once (docs/glossary.md#single-flight), and its outcome says what happened (drain-outcome.ts).
 */
import { MarkTrust, type MarkedRead, type OwnConnections, type ProcessMark, type ReadEvidence } from '../envoy/process/identity.js';
import { DrainedProcess, type PreviousDrain, type ReadDecision, type ReadProcess } from './drain-process.js';
import type { ConnectionCount } from '../envoy/stats.js';
import { LoadBalancerWatch, type LoadBalancerReport, type PriorTraffic } from './load-balancer.js';
import { isoAtOrNull, systemClock, type Clock } from '../clock.js';
import { DrainLog } from './drain-log.js';
import { longLivedGraceOf, quietPeriodOf, type DrainLoopSettings } from './drain-settings.js';
import type { SidecarLog } from './log.js';
import { labelOf, type DrainActionId, type DrainStepId } from './drain-steps.js';
import { AdminFailureLedger } from './drain-admin-failures.js';
import { describeOutcome, heldByTraffic, loadBalancerFields, stateAfter, type AdminFailureReport, type DrainEndReason, type DrainOutcome, type DrainState, type HotRestartSeen } from './drain-outcome.js';

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
  /** The mark of the Envoy process this drain is pinned to (see src/envoy/process/identity.ts); null before the first read. */
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
  private outcome: Promise<DrainOutcome> | undefined;
  private resolveOutcome: ((outcome: DrainOutcome) => void) | undefined;
  private rejectOutcome: ((error: unknown) => void) | undefined;
  private startedAtMs: number | undefined;
  private finishedAtMs: number | undefined;
  private endReason: DrainEndReason | null = null;
  /** Aborted when the drain ends, however: cancels every sleep, timer and pending admin call at once. */
  private readonly ended = new AbortController();
  /** The process this drain drains: which process each read came from (drain-process.ts). */
  private readonly process: DrainedProcess;
  private lastCount: ConnectionCount | undefined;
  private lastPollAtMs: number | undefined;
  private polls = 0;
  /** Failed admin calls: counts, the last one, the run of refusals, the steps that timed out, their warnings. */
  private readonly failures: AdminFailureLedger;
  /** The drain's own log lines (drain-log.ts). */
  private readonly drainLog: DrainLog;
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
    this.drainLog = new DrainLog(log, settings);
    this.process = new DrainedProcess(envoy, log, options.trust ?? new MarkTrust(), options.previous);
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
      this.startedAtMs = startedAtMs ?? this.clock.now();
      this.loadBalancerWatch.setPriorTraffic(this.options.priorTraffic?.() ?? null);
      this.armTimers();
      this.run().catch((error: unknown) => this.fail(error));
    }
    return this.outcome;
  }

  /** Ends a running drain now (the sidecar is stopping); its callers get an 'interrupted' outcome. */
  interrupt(): void {
    if (this.current === 'draining') this.settle('interrupted');
  }

  /** The state, from the two facts that make it: whether the drain started, and how it ended. */
  get current(): DrainState {
    if (this.outcome === undefined) return 'idle';
    return this.endReason === null ? 'draining' : stateAfter(this.endReason);
  }

  /** When the process drained had its health checks failed: for a drain that may find it again. */
  get healthChecksFailedAt(): number | undefined {
    return this.healthChecksFailedAtMs;
  }

  /** The last read, whichever process gave it: what the next read must be compared with. */
  get latestRead(): MarkedRead | undefined {
    return this.process.latestRead;
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
      state: this.current,
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
      pinnedProcess: this.process.pinnedMark,
      loadBalancer: this.loadBalancerReport(),
      hotRestarts: this.process.hotRestartsSeen,
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
    this.drainLog.started(isoAtOrNull(this.clock, (this.startedAtMs ?? 0) + this.settings['drain-timeout']));
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
    return longLivedGraceOf(this.settings);
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
    const expected = this.process.expect();
    let count: ConnectionCount & { readonly evidence?: ReadEvidence };
    try {
      count = await this.adminCall('count-connections', (signal) => this.envoy.countOpenConnections(signal));
    } catch (error) {
      return this.onAdminFailure(error, 'count-connections');
    }
    if (this.isOver) return 'answered';
    this.failures.readAnswered();
    const decision = this.process.observe(count, expected);
    this.actOn(decision);
    const process = decision.process;
    if (process === 'hot-restarted') {
      this.recordCount(count, this.clock.now(), 'doubtful');
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
    this.drainLog.blindness(count, this.loadBalancerWatch.sight);
    this.recordCount(count, sentAtMs, process);
    // A count that cannot be attributed to the pinned process never ends the drain.
    const ending = attributed ? this.endOfDrainBy(count, sentAtMs) : undefined;
    if (ending !== undefined) this.settle(ending);
    return 'answered';
  }

  /** Whether Envoy took the step (and it was not to be sent again since). */
  private stepDone(id: DrainStepId): boolean {
    return this.steps.some((step) => step.id === id && step.done);
  }

  /** Both steps sent again at the next round (they are idempotent), and check-delay counted from their new answer. */
  private sendStepsAgain(): void {
    for (const step of this.steps) step.done = false;
    this.healthChecksFailedAtMs = undefined;
    this.process.stepsResent();
  }

  /** What a read asks of the drain: the steps again (before anything is inherited), what the previous drain saw. */
  private actOn(decision: ReadDecision): void {
    if (decision.resendSteps) this.sendStepsAgain();
    if (decision.inherit !== undefined) this.inheritFrom(decision.inherit);
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
    if (!this.process.countIsWhole(count)) return undefined;
    // A client that came after the failure, its request in flight: min-open-connections is for stragglers (issue 33, case 3).
    if (this.loadBalancerWatch.newConnectionsOpen > 0) return undefined;
    const min = this.settings['min-open-connections'];
    if (countMayEnd && count.total <= min) return 'connections-closed';
    return longLivedMayBeLeft && count.drainable <= min ? 'long-lived-left' : undefined;
  }

  private recordCount(count: ConnectionCount, sentAtMs: number, process: ReadProcess): void {
    this.lastCount = count;
    this.lastPollAtMs = this.clock.now();
    this.polls += 1;
    const started = this.startedAtMs ?? 0;
    const mayEnd = this.countMayEndFromMs();
    this.drainLog.poll(count, {
      elapsedMs: sentAtMs - started,
      remainingMs: Math.max(0, started + this.settings['drain-timeout'] - this.clock.now()),
      process,
      checkDelayPending: mayEnd === undefined || sentAtMs < mayEnd,
    });
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
      this.process.stepTaken(step.id);
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
    if (kind === 'refused' && this.envoy.hasAnswered && this.failures.consecutiveRefusals >= this.settings['admin-refusals'] && this.process.exitProven(error, this.refusingForMs())) {
      this.settle('envoy-exited');
      return 'refused';
    }
    this.failures.logFailure(error, failure, action);
    return kind === 'refused' ? 'refused' : 'failed';
  }

  /** How long admin calls have been refused in a row; 0 when the last call was not refused. */
  private refusingForMs(): number {
    const now = this.clock.now();
    return now - (this.failures.refusalsSinceMs ?? now);
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
      hotRestarts: this.process.hotRestartsSeen,
    };
  }

}
