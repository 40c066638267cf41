/**
 * The drain, as a state machine that knows Envoy only through the three calls it needs and nothing of
 * HTTP routes: idle → draining → drained | timed-out | interrupted.
 *
 * Started once (single flight): the kubelet delivers preStop hooks at least once and calls both
 * containers' hooks at the same time, so every caller awaits the same outcome.
 */
import { AdminRefusedError, AdminResponseError, AdminStatusError } from '../envoy/admin-client.js';
import type { ConnectionCount } from '../envoy/stats.js';
import { adminPortHint } from './admin-hint.js';
import { systemClock, type Clock } from '../clock.js';
import type { SidecarLog } from './log.js';
import type { SidecarConfig } from '../config/sidecar.js';

/** What the drain needs from Envoy's admin API; EnvoyAdminClient implements it. */
export interface EnvoyDrainTarget {
  /** `host:port`, for messages. */
  readonly address: string;
  /** Whether the admin API has answered once in this process's life (the start-up probe or any call). */
  readonly hasAnswered: boolean;
  failHealthChecks(signal: AbortSignal): Promise<void>;
  drainListeners(signal: AbortSignal): Promise<void>;
  countOpenConnections(signal: AbortSignal): Promise<ConnectionCount>;
}

/**
 * The sidecar's settings the drain loop reads, under their flag names. admin-refusals: consecutive refused
 * admin connections after which Envoy is taken as exited (at least 1); only once the admin API has answered
 * before, or a wrong admin port would pass for an exited Envoy.
 */
export type DrainLoopSettings = Pick<
  SidecarConfig,
  'drain-delay' | 'check-delay' | 'check-interval' | 'min-open-connections' | 'drain-timeout' | 'admin-refusals'
>;

export type DrainState = 'idle' | 'draining' | 'drained' | 'timed-out' | 'interrupted';

export type DrainEndReason =
  /** Open connections at or below min-open-connections. */
  | 'connections-closed'
  /** Envoy's admin port, which answered before, refused connections several times in a row: Envoy is gone, and its connections with it. */
  | 'envoy-exited'
  /** drain-timeout elapsed first. */
  | 'deadline'
  /** drain-timeout elapsed, and Envoy's admin API never answered in this process's life (a wrong admin port?). */
  | 'admin-unreachable'
  /** The sidecar was told to stop (SIGTERM) before the drain ended. */
  | 'interrupted';

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
  /** `host:port` of Envoy's admin API. */
  readonly envoyAdmin: string;
  /** The last admin failure, as logged; null when every call succeeded. */
  readonly lastError: string | null;
  /**
   * The last HTTP answer of the admin port that was not what Envoy answers (a 500, an HTML page): such a
   * port is reachable, so "never reachable" would send the operator looking at the network.
   */
  readonly lastInvalidAnswer: string | null;
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
  readonly lastPollAt: string | null;
  readonly polls: number;
  readonly minOpenConnections: number;
  readonly healthChecksFailed: boolean;
  /** When Envoy took POST /healthcheck/fail; the count can end the drain from check-delay after it. */
  readonly healthChecksFailedAt: string | null;
  readonly listenersDraining: boolean;
  readonly consecutiveRefusals: number;
  readonly lastError: string | null;
  /** `host:port` of Envoy's admin API. */
  readonly envoyAdmin: string;
  /** False while the admin API has never answered: refusals then do not mean that Envoy exited. */
  readonly envoyAdminEverReachable: boolean;
}

export type DrainStepName = 'fail health checks' | 'drain listeners';

/** Told before each initiation call is sent, so that a record of it survives this process (see journal.ts). */
export type BeforeStep = (step: DrainStepName) => Promise<void>;

interface InitiationStep {
  readonly name: DrainStepName;
  readonly run: (signal: AbortSignal) => Promise<void>;
  done: boolean;
}

/** Thrown inside the run when the deadline or an interruption stops it; never escapes the class. */
class Stopped extends Error {
  override readonly name = 'Stopped';
}

export class Drain {
  private state: DrainState = 'idle';
  private outcome: Promise<DrainOutcome> | undefined;
  private startedAtMs: number | undefined;
  private finishedAtMs: number | undefined;
  private endReason: DrainEndReason | null = null;
  private lastCount: ConnectionCount | undefined;
  private lastPollAtMs: number | undefined;
  private polls = 0;
  private consecutiveRefusals = 0;
  private lastError: string | null = null;
  /** See DrainOutcome.lastInvalidAnswer. */
  private lastInvalidAnswer: string | null = null;
  /** When the last poll was sent: polls are check-interval apart, from one start to the next. */
  private lastPollSentAtMs: number | undefined;
  /** When POST /healthcheck/fail succeeded: load balancers start deregistering the pod from then on. */
  private healthChecksFailedAtMs: number | undefined;
  /** Aborted at the deadline or on interrupt(): cancels the pending sleep or admin call at once. */
  private readonly stop = new AbortController();
  /** Aborted when the drain ends, to cancel the deadline timer. */
  private readonly finished = new AbortController();
  private readonly steps: InitiationStep[];

  constructor(
    private readonly envoy: EnvoyDrainTarget,
    private readonly settings: DrainLoopSettings,
    private readonly log: SidecarLog,
    private readonly clock: Clock = systemClock,
    beforeStep: BeforeStep = async () => undefined,
  ) {
    this.steps = [
      {
        name: 'fail health checks',
        run: async (signal) => {
          await beforeStep('fail health checks');
          await envoy.failHealthChecks(signal);
          this.healthChecksFailedAtMs = this.clock.now();
        },
        done: false,
      },
      {
        name: 'drain listeners',
        run: async (signal) => {
          await beforeStep('drain listeners');
          await envoy.drainListeners(signal);
        },
        done: false,
      },
    ];
  }

  /**
   * Starts the drain on the first call; every call returns the same outcome. Admin failures are retried,
   * never thrown: it rejects only if the clock or the logger throws (a bug).
   */
  start(): Promise<DrainOutcome> {
    this.outcome ??= this.run();
    return this.outcome;
  }

  /** Ends a running drain now (the sidecar is stopping); its callers get an 'interrupted' outcome. */
  interrupt(): void {
    if (this.state === 'draining') this.stop.abort('interrupted' satisfies DrainEndReason);
  }

  get current(): DrainState {
    return this.state;
  }

  snapshot(): DrainSnapshot {
    const now = this.clock.now();
    const started = this.startedAtMs;
    const deadline = started === undefined ? undefined : started + this.settings['drain-timeout'];
    const end = this.finishedAtMs ?? now;
    return {
      state: this.state,
      reason: this.endReason,
      startedAt: isoOrNull(started),
      deadline: isoOrNull(deadline),
      finishedAt: isoOrNull(this.finishedAtMs),
      elapsedMs: started === undefined ? null : end - started,
      remainingMs: deadline === undefined ? null : Math.max(0, deadline - end),
      openConnections: this.lastCount?.total ?? null,
      openConnectionsByListener: this.lastCount?.byListener ?? null,
      lastPollAt: isoOrNull(this.lastPollAtMs),
      polls: this.polls,
      minOpenConnections: this.settings['min-open-connections'],
      healthChecksFailed: this.healthChecksFailedAtMs !== undefined,
      healthChecksFailedAt: isoOrNull(this.healthChecksFailedAtMs),
      listenersDraining: this.steps[1]?.done ?? false,
      consecutiveRefusals: this.consecutiveRefusals,
      lastError: this.lastError,
      envoyAdmin: this.envoy.address,
      envoyAdminEverReachable: this.envoy.hasAnswered,
    };
  }

  private async run(): Promise<DrainOutcome> {
    this.state = 'draining';
    this.startedAtMs = this.clock.now();
    this.armDeadline();
    const {
      'drain-delay': drainDelayMs,
      'check-delay': checkDelayMs,
      'check-interval': checkIntervalMs,
      'min-open-connections': minOpenConnections,
      'drain-timeout': drainTimeoutMs,
    } = this.settings;
    this.log.info(
      {
        event: 'drain_started',
        deadline: isoOrNull(this.startedAtMs + drainTimeoutMs),
        drain_timeout_ms: drainTimeoutMs,
        drain_delay_ms: drainDelayMs,
        check_delay_ms: checkDelayMs,
        check_interval_ms: checkIntervalMs,
        min_connections: minOpenConnections,
      },
      drainDelayMs > 0
        ? `drain started: Envoy keeps serving for the drain delay of ${drainDelayMs} ms, then its health checks fail and its listeners drain`
        : 'drain started: failing Envoy health checks and draining its listeners',
    );
    try {
      if (drainDelayMs > 0) await this.sleep(drainDelayMs);
      for (;;) {
        const ended = await this.check();
        if (ended !== undefined) return this.finish(ended);
        await this.sleep(this.msUntilNextCheck());
      }
    } catch (error) {
      if (!(error instanceof Stopped)) throw error;
      if (this.stop.signal.reason === 'interrupted') return this.finish('interrupted');
      return this.finish(this.envoy.hasAnswered ? 'deadline' : 'admin-unreachable');
    }
  }

  /**
   * One round of admin calls: the initiation calls that have not succeeded yet (a slow Envoy may accept
   * them later), then a poll once check-delay has passed since the drain started. A refusal ends the
   * round, so that refusals are counted once per check interval: "Envoy has exited" then means "refused
   * for a few intervals", not "refused 3 times in 1 ms".
   */
  private async check(): Promise<DrainEndReason | undefined> {
    for (const step of this.steps) {
      if (step.done) continue;
      try {
        await step.run(this.stop.signal);
        step.done = true;
        this.consecutiveRefusals = 0;
        this.log.info({ event: 'drain_step', step: step.name }, `Envoy admin: ${step.name} done`);
      } catch (error) {
        const ended = this.recordFailure(error, step.name);
        if (ended !== undefined || error instanceof AdminRefusedError) return ended;
      }
    }
    return this.clock.now() >= this.nextPollAtMs() ? this.poll() : undefined;
  }

  /**
   * Polls start check-delay after the drain delay, then follow check-interval from one poll's start to the
   * next, as the README says, whatever the steps or the count did in between. A count that may end the
   * drain only later (see countMayEndFromMs) waits for the next poll on that grid, never for an extra one.
   */
  private nextPollAtMs(): number {
    const { 'drain-delay': drainDelayMs, 'check-delay': checkDelayMs, 'check-interval': checkIntervalMs } = this.settings;
    if (this.lastPollSentAtMs !== undefined) return this.lastPollSentAtMs + checkIntervalMs;
    return (this.startedAtMs ?? 0) + drainDelayMs + checkDelayMs;
  }

  /**
   * Load balancers notice the pod leaving only once Envoy fails its health checks, so the count may end
   * the drain only check-delay after POST /healthcheck/fail succeeded, however late that was. Undefined
   * while it has not: only the deadline (or Envoy exiting) ends such a drain.
   */
  private countMayEndFromMs(): number | undefined {
    const failedAt = this.healthChecksFailedAtMs;
    return failedAt === undefined ? undefined : failedAt + this.settings['check-delay'];
  }

  /** Until the next poll; steps not done yet are retried every check-interval meanwhile. */
  private msUntilNextCheck(): number {
    const untilPoll = this.nextPollAtMs() - this.clock.now();
    if (this.steps.every((step) => step.done)) return Math.max(0, untilPoll);
    // A poll already due did not happen: a refused step ended the round. Both wait for the next interval.
    return untilPoll > 0 ? Math.min(this.settings['check-interval'], untilPoll) : this.settings['check-interval'];
  }

  private async poll(): Promise<DrainEndReason | undefined> {
    this.lastPollSentAtMs = this.clock.now();
    try {
      const count = await this.envoy.countOpenConnections(this.stop.signal);
      this.consecutiveRefusals = 0;
      this.lastCount = count;
      this.lastPollAtMs = this.clock.now();
      this.polls += 1;
      const mayEnd = this.countMayEndFromMs();
      const delayServed = mayEnd !== undefined && this.clock.now() >= mayEnd;
      this.logPoll(count, delayServed);
      return delayServed && count.total <= this.settings['min-open-connections'] ? 'connections-closed' : undefined;
    } catch (error) {
      return this.recordFailure(error, 'count open connections');
    }
  }

  /** `delayServed` false: a count at or below the minimum does not end the drain yet (see countMayEndFromMs). */
  private logPoll(count: ConnectionCount, delayServed: boolean): void {
    const started = this.startedAtMs ?? 0;
    const now = this.clock.now();
    this.log.info(
      {
        event: 'poll',
        open_connections: count.total,
        min_connections: this.settings['min-open-connections'],
        elapsed_ms: now - started,
        remaining_ms: Math.max(0, started + this.settings['drain-timeout'] - now),
        by_listener: count.byListener,
        ...(count.missingListeners.length > 0 ? { missing_listeners: count.missingListeners } : {}),
        ...(delayServed ? {} : { check_delay_pending: true }),
      },
      'polled open connections',
    );
  }

  /**
   * Logs a failed admin call; answers 'envoy-exited' once enough refusals came in a row from an admin API
   * that answered before. One that never answered is retried until the deadline: a refusal then is as
   * likely a wrong admin port as an Envoy gone, and a wrong port must not let the pod go with open connections.
   */
  private recordFailure(error: unknown, action: string): DrainEndReason | undefined {
    if (this.stop.signal.aborted) {
      if (this.stop.signal.reason === 'deadline') this.recordCutByDeadline(action);
      throw new Stopped();
    }
    const message = error instanceof Error ? error.message : String(error);
    this.lastError = message;
    if (error instanceof AdminStatusError || error instanceof AdminResponseError) this.lastInvalidAnswer = message;
    const everAnswered = this.envoy.hasAnswered;
    if (error instanceof AdminRefusedError) {
      this.consecutiveRefusals += 1;
      if (everAnswered && this.consecutiveRefusals >= this.settings['admin-refusals']) return 'envoy-exited';
    } else {
      this.consecutiveRefusals = 0;
    }
    this.log.warn(
      {
        event: 'admin_error',
        action,
        error: error instanceof Error ? error.name : 'Error',
        error_message: message,
        consecutive_refusals: this.consecutiveRefusals,
        envoy_admin_ever_reachable: everAnswered,
      },
      everAnswered
        ? `Envoy admin call failed (${action}); retrying at the next check`
        : `Envoy admin call failed (${action}) and the admin API has never answered: ${adminPortHint(this.envoy.address)}; retrying until the deadline`,
    );
    return undefined;
  }

  /** A call still waiting for Envoy when the deadline came: the one thing that explains a drain with no count. */
  private recordCutByDeadline(action: string): void {
    this.lastError = `${action}: no answer from Envoy's admin API before the drain deadline`;
    this.log.warn(
      { event: 'admin_error', action, error: 'DeadlineReached', error_message: this.lastError, consecutive_refusals: this.consecutiveRefusals },
      `Envoy admin call (${action}) was still waiting for an answer when the drain deadline came`,
    );
  }

  private async sleep(ms: number): Promise<void> {
    try {
      await this.clock.sleep(ms, this.stop.signal);
    } catch (error) {
      if (this.stop.signal.aborted) throw new Stopped();
      throw error;
    }
  }

  private armDeadline(): void {
    this.clock.sleep(this.settings['drain-timeout'], this.finished.signal).then(
      () => this.stop.abort('deadline' satisfies DrainEndReason),
      () => undefined, // the drain ended first
    );
  }

  private finish(reason: DrainEndReason): DrainOutcome {
    this.finishedAtMs = this.clock.now();
    this.finished.abort();
    this.endReason = reason;
    this.state = stateAfter(reason);
    const outcome: DrainOutcome = {
      state: this.state,
      reason,
      healthChecksFailed: this.healthChecksFailedAtMs !== undefined,
      openConnections: this.lastCount?.total ?? null,
      durationMs: this.finishedAtMs - (this.startedAtMs ?? this.finishedAtMs),
      minOpenConnections: this.settings['min-open-connections'],
      envoyAdmin: this.envoy.address,
      lastError: this.lastError,
      lastInvalidAnswer: this.lastInvalidAnswer,
    };
    this.log.info(
      {
        event: 'drain_finished',
        state: outcome.state,
        reason,
        open_connections: outcome.openConnections,
        min_connections: this.settings['min-open-connections'],
        duration_ms: outcome.durationMs,
      },
      describeOutcome(outcome),
    );
    return outcome;
  }
}

/** One sentence for logs and for the /shutdown answer. */
export function describeOutcome(outcome: DrainOutcome): string {
  const { minOpenConnections } = outcome;
  const seconds = (outcome.durationMs / 1000).toFixed(1);
  const open = outcome.openConnections === null ? 'an unknown number of' : String(outcome.openConnections);
  switch (outcome.reason) {
    case 'connections-closed':
      return `drained: ${open} open connections (at most ${minOpenConnections} allowed) after ${seconds}s`;
    case 'envoy-exited':
      return `drained: Envoy's admin API refuses connections, Envoy has exited (after ${seconds}s)`;
    case 'deadline':
      if (!outcome.healthChecksFailed) {
        return `drain deadline reached after ${seconds}s: Envoy never took POST /healthcheck/fail, so load balancers were not told to stop sending (${open} connections open); letting the pod terminate`;
      }
      return `drain deadline reached after ${seconds}s with ${open} connections still open (at most ${minOpenConnections} wanted); letting the pod terminate`;
    case 'admin-unreachable':
      if (outcome.lastInvalidAnswer !== null) {
        return `drain deadline reached after ${seconds}s: Envoy's admin API at ${outcome.envoyAdmin} answered, but never as Envoy does (last: ${outcome.lastInvalidAnswer}), so Envoy was not drained and its connections were not counted; letting the pod terminate`;
      }
      return `drain deadline reached after ${seconds}s: Envoy's admin API was never reachable at ${outcome.envoyAdmin}, so Envoy was not drained and its connections were not counted; letting the pod terminate`;
    case 'interrupted':
      return `drain interrupted after ${seconds}s: the shutdown manager is stopping, ${open} connections were open`;
  }
}

function stateAfter(reason: DrainEndReason): DrainOutcome['state'] {
  switch (reason) {
    case 'connections-closed':
    case 'envoy-exited':
      return 'drained';
    case 'deadline':
    case 'admin-unreachable':
      return 'timed-out';
    case 'interrupted':
      return 'interrupted';
  }
}

function isoOrNull(ms: number | undefined): string | null {
  return ms === undefined ? null : new Date(ms).toISOString();
}
