/**
 * The drain, as a state machine that knows Envoy only through the three calls it needs and nothing of
 * HTTP routes: idle → draining → drained | timed-out | interrupted.
 *
 * Started once (single flight): the kubelet delivers preStop hooks at least once and calls both
 * containers' hooks at the same time, so every caller awaits the same outcome.
 */
import { AdminRefusedError } from '../envoy/admin-client.js';
import type { ConnectionCount } from '../envoy/stats.js';
import { adminPortHint } from './admin-hint.js';
import { systemClock, type Clock } from './clock.js';

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

export interface DrainSettings {
  readonly checkDelayMs: number;
  readonly checkIntervalMs: number;
  readonly minOpenConnections: number;
  readonly drainTimeoutMs: number;
  /**
   * Consecutive refused admin connections after which Envoy is taken as exited (at least 1); only once
   * the admin API has answered before, or a wrong admin port would pass for an exited Envoy.
   */
  readonly refusalsBeforeExited: number;
}

/** The structured logger the drain reports to (pino's shape). */
export interface DrainLogger {
  info(fields: object, message: string): void;
  warn(fields: object, message: string): void;
}

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
  /** Last count read from Envoy; null when none could be read. */
  readonly openConnections: number | null;
  readonly durationMs: number;
  /** `host:port` of Envoy's admin API. */
  readonly envoyAdmin: string;
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
  readonly listenersDraining: boolean;
  readonly consecutiveRefusals: number;
  readonly lastError: string | null;
  /** `host:port` of Envoy's admin API. */
  readonly envoyAdmin: string;
  /** False while the admin API has never answered: refusals then do not mean that Envoy exited. */
  readonly envoyAdminEverReachable: boolean;
}

interface InitiationStep {
  readonly name: 'fail health checks' | 'drain listeners';
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
  /** Aborted at the deadline or on interrupt(): cancels the pending sleep or admin call at once. */
  private readonly stop = new AbortController();
  /** Aborted when the drain ends, to cancel the deadline timer. */
  private readonly finished = new AbortController();
  private readonly steps: InitiationStep[];

  constructor(
    private readonly envoy: EnvoyDrainTarget,
    private readonly settings: DrainSettings,
    private readonly log: DrainLogger,
    private readonly clock: Clock = systemClock,
  ) {
    this.steps = [
      { name: 'fail health checks', run: (signal) => envoy.failHealthChecks(signal), done: false },
      { name: 'drain listeners', run: (signal) => envoy.drainListeners(signal), done: false },
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
    const deadline = started === undefined ? undefined : started + this.settings.drainTimeoutMs;
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
      minOpenConnections: this.settings.minOpenConnections,
      healthChecksFailed: this.steps[0]?.done ?? false,
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
    const { checkDelayMs, checkIntervalMs, minOpenConnections, drainTimeoutMs } = this.settings;
    this.log.info(
      {
        event: 'drain_started',
        deadline: isoOrNull(this.startedAtMs + drainTimeoutMs),
        drain_timeout_ms: drainTimeoutMs,
        check_delay_ms: checkDelayMs,
        check_interval_ms: checkIntervalMs,
        min_connections: minOpenConnections,
      },
      'drain started: failing Envoy health checks and draining its listeners',
    );
    try {
      const ended = (await this.check({ poll: false })) ?? (await this.waitCheckDelay());
      if (ended !== undefined) return this.finish(ended);
      for (;;) {
        const result = await this.check({ poll: true });
        if (result !== undefined) return this.finish(result);
        await this.sleep(checkIntervalMs);
      }
    } catch (error) {
      if (!(error instanceof Stopped)) throw error;
      if (this.stop.signal.reason === 'interrupted') return this.finish('interrupted');
      return this.finish(this.envoy.hasAnswered ? 'deadline' : 'admin-unreachable');
    }
  }

  /**
   * The delay lets load balancers notice the failing health checks before connections are counted, so
   * initiation calls that failed are retried meanwhile, every check interval. When Envoy, which answered
   * before, refused the calls it is likely gone already: the checks that confirm it are not held back by
   * the delay. An admin API that never answered may be Envoy still starting or a wrong port: the delay holds.
   */
  private async waitCheckDelay(): Promise<DrainEndReason | undefined> {
    const { checkDelayMs, checkIntervalMs } = this.settings;
    if (this.consecutiveRefusals > 0 && this.envoy.hasAnswered) {
      await this.sleep(checkIntervalMs);
      return undefined;
    }
    const delayEndsAt = this.clock.now() + checkDelayMs;
    while (this.steps.some((step) => !step.done) && this.clock.now() + checkIntervalMs < delayEndsAt) {
      await this.sleep(checkIntervalMs);
      const ended = await this.check({ poll: false });
      if (ended !== undefined) return ended;
    }
    await this.sleep(delayEndsAt - this.clock.now());
    return undefined;
  }

  /**
   * One round of admin calls: the initiation calls that have not succeeded yet (a slow Envoy may accept
   * them later), then a poll. A refusal ends the round, so that refusals are counted once per check
   * interval: "Envoy has exited" then means "refused for a few intervals", not "refused 3 times in 1 ms".
   */
  private async check(options: { poll: boolean }): Promise<DrainEndReason | undefined> {
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
    return options.poll ? this.poll() : undefined;
  }

  private async poll(): Promise<DrainEndReason | undefined> {
    try {
      const count = await this.envoy.countOpenConnections(this.stop.signal);
      this.consecutiveRefusals = 0;
      this.lastCount = count;
      this.lastPollAtMs = this.clock.now();
      this.polls += 1;
      this.logPoll(count);
      return count.total <= this.settings.minOpenConnections ? 'connections-closed' : undefined;
    } catch (error) {
      return this.recordFailure(error, 'count open connections');
    }
  }

  private logPoll(count: ConnectionCount): void {
    const started = this.startedAtMs ?? 0;
    const now = this.clock.now();
    this.log.info(
      {
        event: 'poll',
        open_connections: count.total,
        min_connections: this.settings.minOpenConnections,
        elapsed_ms: now - started,
        remaining_ms: Math.max(0, started + this.settings.drainTimeoutMs - now),
        by_listener: count.byListener,
        ...(count.missingListeners.length > 0 ? { missing_listeners: count.missingListeners } : {}),
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
    if (this.stop.signal.aborted) throw new Stopped();
    const message = error instanceof Error ? error.message : String(error);
    this.lastError = message;
    const everAnswered = this.envoy.hasAnswered;
    if (error instanceof AdminRefusedError) {
      this.consecutiveRefusals += 1;
      if (everAnswered && this.consecutiveRefusals >= this.settings.refusalsBeforeExited) return 'envoy-exited';
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

  private async sleep(ms: number): Promise<void> {
    try {
      await this.clock.sleep(ms, this.stop.signal);
    } catch (error) {
      if (this.stop.signal.aborted) throw new Stopped();
      throw error;
    }
  }

  private armDeadline(): void {
    this.clock.sleep(this.settings.drainTimeoutMs, this.finished.signal).then(
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
      openConnections: this.lastCount?.total ?? null,
      durationMs: this.finishedAtMs - (this.startedAtMs ?? this.finishedAtMs),
      envoyAdmin: this.envoy.address,
    };
    this.log.info(
      {
        event: 'drain_finished',
        state: outcome.state,
        reason,
        open_connections: outcome.openConnections,
        min_connections: this.settings.minOpenConnections,
        duration_ms: outcome.durationMs,
      },
      describeOutcome(outcome, this.settings.minOpenConnections),
    );
    return outcome;
  }
}

/** One sentence for logs and for the /shutdown answer. */
export function describeOutcome(outcome: DrainOutcome, minOpenConnections: number): string {
  const seconds = (outcome.durationMs / 1000).toFixed(1);
  const open = outcome.openConnections === null ? 'an unknown number of' : String(outcome.openConnections);
  switch (outcome.reason) {
    case 'connections-closed':
      return `drained: ${open} open connections (at most ${minOpenConnections} allowed) after ${seconds}s`;
    case 'envoy-exited':
      return `drained: Envoy's admin API refuses connections, Envoy has exited (after ${seconds}s)`;
    case 'deadline':
      return `drain deadline reached after ${seconds}s with ${open} connections still open (at most ${minOpenConnections} wanted); letting the pod terminate`;
    case 'admin-unreachable':
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
