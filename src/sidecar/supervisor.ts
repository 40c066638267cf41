/**
 * The supervisor (docs/glossary.md#supervisor): owns the drain across the life of the sidecar, which may see more than
 * one Envoy process (docs/design.md#the-other-paths-restarts-and-an-envoy-left-draining). `shutdown()` (Envoy's
 * preStop) starts the drain or joins it, and after an ended drain drains whatever new process answers; `wait()` (the
 * sidecar's own preStop) never starts one; `watch()` reads Envoy between drains and re-arms for a new process
 * (docs/glossary.md#re-arm); `recover()` brings back an Envoy left draining (recovery.ts). Which process answers is
 * process-follower.ts's to say. It knows only Envoy's admin API, the journal and the clock: routes and signals live
 * elsewhere.
 */
import type { AdminFailureKind } from '../envoy/admin-errors.js';
import type { EnvoyProcessInfo } from '../envoy/admin-client.js';
import type { ConnectionCount } from '../envoy/stats.js';
import { LoadBalancerWatch } from './load-balancer.js';
import { isoAt, within, type Clock } from '../clock.js';
import { messageOf } from '../errors.js';
import { Drain, type DrainSnapshot, type EnvoyDrainTarget } from './drain.js';
import type { DrainLoopSettings } from './drain-settings.js';
import type { DrainOutcome, DrainState } from './drain-outcome.js';
import type { DrainStepId } from './drain-steps.js';
import type { DrainJournal, StepProgress } from './journal.js';
import { Once, RateLimit } from './log-throttle.js';
import { checkNeededStats, type StatsCheck } from './needed-stats.js';
import { heldByAnother, ProcessFollower, whyUntold, type FollowVerdict, type MarkRead } from './process-follower.js';
import type { SidecarLog } from './log.js';
import { decideRecovery, type RecoveryAction, type RecoveryDecision } from './recovery.js';

/** What the supervisor needs from Envoy's admin API beyond the drain's calls; EnvoyAdminClient implements it. */
export interface SupervisedEnvoy extends EnvoyDrainTarget {
  serverInfo(signal?: AbortSignal): Promise<EnvoyProcessInfo>;
  passHealthChecks(signal?: AbortSignal): Promise<void>;
  quit(signal?: AbortSignal): Promise<void>;
}

export interface SupervisorOptions {
  readonly drain: DrainLoopSettings;
  /** Bring back an Envoy found left draining at start (--recover-envoy). */
  readonly recoverEnvoy: boolean;
  /** How often to read Envoy while no drain runs (the check interval). */
  readonly watchIntervalMs: number;
  /** The bound of one identity read (the admin timeout): a /shutdown after a drain waits no longer to decide. */
  readonly readTimeoutMs: number;
}

export interface RecoveryReport extends RecoveryDecision {
  readonly at: string;
  /** What Envoy's /server_info said when the sidecar started. */
  readonly envoyState: string;
  readonly envoyUptimeSeconds: number;
  /** True when a step was needed but --recover-envoy=false left Envoy as it was. */
  readonly disabled: boolean;
  /** The admin call that failed, if the action could not be taken. */
  readonly error: string | null;
}

/** What the watch last saw of Envoy's admin API. */
export interface AdminWatch {
  /** Whether the last read got a valid answer; null before the first read. */
  readonly up: boolean | null;
  readonly lastReadAt: string | null;
  /** The kind of the last failure while it lasts; null once Envoy answers again. */
  readonly failing: AdminFailureKind | null;
}

/** /drain: the current drain, and what happened around it. */
export interface SupervisorSnapshot extends DrainSnapshot {
  /** How many times the drain was re-armed for a new Envoy process. */
  readonly rearms: number;
  /** Reads of Envoy by every drain of this process (a counter: never goes down when a drain is re-armed). */
  readonly pollsTotal: number;
  /**
   * The load-balancer lag (ms) of each drain of this process whose lag is settled: it ended after Envoy's health
   * checks failed, or the load balancer has been quiet for the quiet period. Oldest first; the last few only.
   */
  readonly settledLoadBalancerLagsMs: readonly number[];
  /** The Envoy process last seen through /server_info. */
  readonly envoyProcess: {
    readonly state: string;
    /** Envoy's release (`1.36.2`), null when its build string names none. */
    readonly version: string | null;
    readonly startedAt: string;
    readonly uptimeSeconds: number;
  } | null;
  readonly recovery: RecoveryReport | null;
  readonly watch: AdminWatch;
  /** What the first stats read after start showed missing of what the drain needs (see StatsCheck); null before it. */
  readonly envoyStats: StatsCheck | null;
}

/** Lags of ended drains kept for /metrics: a sidecar re-armed by a crash-looping Envoy must not grow without bound. */
const SETTLED_LAGS_KEPT = 16;

/**
 * A drain's load-balancer lag once it can no longer grow: with the observed rule, once the balancer has been quiet
 * long enough (a drain that ended before, at its deadline or by Envoy's exit, never saw it let go: traffic that never
 * stops, a poller, is no lag); with the fixed rule, once the drain ended.
 */
function settledLag(drain: DrainSnapshot): number | undefined {
  const { lagMs, quiet, quietPeriodMs } = drain.loadBalancer;
  if (lagMs === null || !drain.loadBalancer.observable) return undefined;
  if (quietPeriodMs !== null) return quiet ? lagMs : undefined;
  return drain.state !== 'idle' && drain.state !== 'draining' ? lagMs : undefined;
}

/** An identity read for the journal must not hold back the health-check failure for long: the drain matters more. */
const JOURNAL_IDENTITY_WAIT_MS = 500;
/** First retry delay of the watch after a failure; doubled up to the watch interval. */
const WATCH_RETRY_MIN_MS = 100;
/** At most one line per this long about a failing watch, with the count since the last one. */
const WATCH_LOG_EVERY_MS = 60_000;

export class DrainSupervisor {
  private drain: Drain;
  private rearmCount = 0;
  /** Reads by drains that were replaced by a re-arm. */
  private pollsOfEndedDrains = 0;
  /** Settled load-balancer lags of the drains before this one (see SupervisorSnapshot). */
  private lagsOfEndedDrains: readonly number[] = [];
  /** The Envoy process last read, followed read after read (process-follower.ts). */
  private readonly follower: ProcessFollower;
  /** Its new clients between drains (noteTraffic): what a drain's silence is sized from. */
  private traffic = new LoadBalancerWatch(null);
  private envoyProcess: EnvoyProcessInfo | undefined;
  private recovery: RecoveryReport | null = null;
  /** A /shutdown after a drain ended, deciding whether Envoy is new: waiters and SIGTERM wait for it. */
  private deciding: Promise<DrainOutcome> | undefined;
  private readonly startWaiters = new Set<() => void>();
  private readonly stopping = new AbortController();
  private watchState: { up: boolean | null; lastReadAtMs: number | undefined; failing: AdminFailureKind | null } = {
    up: null,
    lastReadAtMs: undefined,
    failing: null,
  };
  private watching = false;
  /** The once-only line: a journal that cannot be written. */
  private readonly warned = new Once<'journal'>();
  /** The stats check of the first stats read after start (see checkNeededStats). */
  private statsCheck: StatsCheck | null = null;

  constructor(
    private readonly envoy: SupervisedEnvoy,
    private readonly options: SupervisorOptions,
    private readonly journal: DrainJournal,
    private readonly log: SidecarLog,
    private readonly clock: Clock,
  ) {
    this.follower = new ProcessFollower(envoy, log, {
      readTimeoutMs: options.readTimeoutMs,
      stopping: this.stopping.signal,
      clock,
      onCount: (count, verdict, sentAtMs) => this.noteCount(count, verdict, sentAtMs),
    });
    this.drain = this.newDrain();
  }

  /** The state of the current drain (a re-armed drain is idle again). */
  get state(): DrainState {
    return this.drain.current;
  }

  /** Starts the drain, joins the running one, or decides whether Envoy is a new process after one ended. */
  shutdown(): Promise<DrainOutcome> {
    const arrivedAtMs = this.clock.now();
    if (this.stopping.signal.aborted) return this.refuseWhileStopping(arrivedAtMs);
    if (this.drain.current === 'idle') return this.startDrain(arrivedAtMs);
    if (this.drain.current === 'draining' || this.drain.current === 'interrupted') return this.drain.start();
    this.deciding ??= this.drainIfNewProcess(arrivedAtMs).finally(() => (this.deciding = undefined));
    return this.deciding;
  }

  /**
   * A /shutdown after SIGTERM (one already being read as the process stops): nothing would see its drain to the
   * end, so none starts; the answer says so. Joining a drain under way stays possible: the stop waits for it.
   */
  private refuseWhileStopping(arrivedAtMs: number): Promise<DrainOutcome> {
    if (this.drain.current !== 'idle') return this.drain.start();
    const outcome = this.drain.start(arrivedAtMs);
    this.drain.interrupt();
    return outcome;
  }

  /**
   * Joins a drain that runs or starts within `windowMs`, or answers with the one that ended; undefined when none
   * did. Never starts one: the kubelet runs this container's hook on a restart of this container alone, and
   * Envoy must keep serving.
   */
  async wait(windowMs: number): Promise<DrainOutcome | undefined> {
    if (this.deciding !== undefined) return this.deciding;
    if (this.drain.current !== 'idle') return this.drain.start();
    const started = await this.nextStart(windowMs);
    return started ? this.drain.start() : undefined;
  }

  /** Settles when a drain running (or being decided) has ended; undefined when none is. For SIGTERM. */
  busy(): Promise<unknown> | undefined {
    if (this.deciding !== undefined) return this.deciding;
    return this.drain.current === 'draining' ? this.drain.start() : undefined;
  }

  /** Ends a running drain at once and stops watching (the process is exiting). */
  stop(): void {
    this.stopping.abort();
    this.drain.interrupt();
    for (const wake of this.startWaiters) wake();
  }

  /** Ready once Envoy's admin API has answered, for the life of the process. */
  readiness(): { readonly ready: boolean; readonly detail: string } {
    // Ready even when stats are missing: the drain still ends by its deadline, never "drained" on a count it cannot
    // attribute; an unready pod would stop a rollout for a stats_matcher setting. The detail, the log and
    // shutdown_manager_envoy_stats_missing say it.
    const stats = this.statsCheck === null || this.statsCheck.detail === '' ? '' : `; ${this.statsCheck.detail}`;
    if (this.envoy.hasAnswered) return { ready: true, detail: `Envoy's admin API answered at ${this.envoy.address}${stats}` };
    return { ready: false, detail: `Envoy's admin API has not answered at ${this.envoy.address} yet: is the admin address right?` };
  }

  /**
   * Once, when Envoy's admin API first answers: finds out whether an earlier sidecar left this Envoy
   * draining, and brings it back. Does nothing once a drain has started (a deletion is then under way).
   */
  async recover(): Promise<RecoveryReport | null> {
    if (this.drainEverStarted()) return null;
    let process: EnvoyProcessInfo;
    let decision: RecoveryDecision;
    try {
      process = await this.readEnvoyProcess();
      decision = decideRecovery(process, await this.journal.read());
    } catch (error) {
      this.log.warn({ event: 'recovery_check_failed', error: messageOf(error) }, `could not check whether Envoy was left draining: ${messageOf(error)}`);
      return null;
    }
    // A /shutdown may have come while reading: from then on Envoy is being drained on purpose.
    if (this.drainEverStarted() || this.stopping.signal.aborted) return null;
    const report = await this.act(process, decision);
    this.recovery = report;
    return report;
  }

  /**
   * Reads Envoy every watch interval until the process stops, from the first call on (main.ts calls it once
   * the admin API has answered). Resolves when stopping.
   */
  async watch(): Promise<void> {
    if (this.watching) return;
    this.watching = true;
    const intervalMs = this.options.watchIntervalMs;
    let delayMs = intervalMs;
    let retryMs: number | undefined;
    const failures = this.failureLogger();
    while (!this.stopping.signal.aborted) {
      try {
        await this.clock.sleep(delayMs, this.stopping.signal);
      } catch {
        return; // stopping
      }
      if (this.drain.current === 'draining' || this.deciding !== undefined) continue; // the drain reads Envoy itself
      const read = await this.follower.read();
      if (this.stopping.signal.aborted) return;
      this.noteWatch(read);
      if (read.ok) {
        failures.recovered();
        retryMs = undefined;
        delayMs = intervalMs;
        this.afterWatchRead(read);
      } else {
        failures.failed(read.kind, read.message);
        retryMs = retryMs === undefined ? Math.min(intervalMs, WATCH_RETRY_MIN_MS) : Math.min(intervalMs, retryMs * 2);
        delayMs = retryMs;
      }
    }
  }

  snapshot(): SupervisorSnapshot {
    const process = this.envoyProcess;
    const drain = this.drain.snapshot();
    const current = settledLag(drain);
    return {
      ...drain,
      rearms: this.rearmCount,
      settledLoadBalancerLagsMs: current === undefined ? [...this.lagsOfEndedDrains] : [...this.lagsOfEndedDrains, current],
      pollsTotal: this.pollsOfEndedDrains + this.drain.pollCount,
      envoyProcess:
        process === undefined
          ? null
          : { state: process.state, version: process.version?.text ?? null, startedAt: isoAt(this.clock, process.startedAtMs), uptimeSeconds: process.uptimeSeconds },
      recovery: this.recovery,
      envoyStats: this.statsCheck,
      watch: {
        up: this.watchState.up,
        lastReadAt: this.watchState.lastReadAtMs === undefined ? null : isoAt(this.clock, this.watchState.lastReadAtMs),
        failing: this.watchState.failing,
      },
    };
  }

  // --- drains ------------------------------------------------------------------------------------------

  /**
   * `previous`: the drain that ended, when the process it drained may still be the one running (its identity
   * could not be read): if the new drain finds it, it inherits its failed health checks. Never after another
   * process was seen: a mark only tells two reads of one process apart from a change between them, and a new
   * process's counter can grow past an old mark given time.
   */
  private newDrain(previous?: Drain): Drain {
    const read = this.follower.latest;
    return new Drain(this.envoy, this.options.drain, this.log, this.clock, {
      ...(previous === undefined || read === undefined ? {} : { previous: { read, healthChecksFailedAtMs: previous.healthChecksFailedAt, loadBalancer: previous.loadBalancer } }),
      priorTraffic: () => this.traffic.priorTraffic(this.clock.now()),
      onStep: (step, progress) => this.onStep(step, progress),
      trust: this.follower.trust,
    });
  }

  private startDrain(arrivedAtMs: number): Promise<DrainOutcome> {
    const drain = this.drain;
    const outcome = drain.start(arrivedAtMs);
    for (const wake of this.startWaiters) wake();
    void outcome.then(
      ({ reason }) => {
        if (this.drain !== drain) return;
        // Follow on from the drain's last read: whichever process gave it is the one running now.
        const latest = drain.latestRead;
        if (latest !== undefined) this.follower.handOver(latest);
        // The process drained is gone and another runs: the next /shutdown must drain that one.
        if (reason === 'envoy-replaced') this.rearm('another Envoy process took the admin port during the drain', false);
      },
      () => undefined,
    );
    return outcome;
  }

  /**
   * A /shutdown after a drain ended: one identity read, bounded by the admin timeout and counted against the
   * next drain's deadline. The drained process, or none at all, gets the ended drain's answer again; another
   * process, or one that cannot be told, is drained.
   */
  private async drainIfNewProcess(arrivedAtMs: number): Promise<DrainOutcome> {
    const ended = this.drain;
    const read = await this.follower.read();
    // The watch re-armed meanwhile: the new drain still counts from this /shutdown's arrival.
    if (this.drain !== ended) return this.drain.current === 'idle' ? this.startDrain(arrivedAtMs) : this.drain.start();
    // No Envoy: nothing to drain. Unless a witness other than the one the drained process held is still open: then
    // another process lives behind an address that refuses (a Unix socket path unlinked), and is drained (FUZZ_SEED=603).
    if (!read.ok && read.kind === 'refused' && !heldByAnother(read, ended.latestRead)) return ended.start();
    if (read.ok && (read.verdict === 'same' || (read.verdict === 'reset' && read.restartEpoch !== null))) return ended.start();
    if (read.ok && read.verdict === 'replaced') {
      this.rearm('a /shutdown came after the last drain had ended, and another Envoy process answers', false);
    } else {
      // A blind reset may be a hot restart child never told to drain: no inheriting the drained process's failed checks.
      const blindReset = read.ok && read.verdict === 'reset';
      this.rearm(`a /shutdown came after the last drain had ended, and ${whyUntold(read)}`, !blindReset);
    }
    return this.startDrain(arrivedAtMs);
  }

  /**
   * After a drain ended: another process is drained by the next /shutdown, and so is a reset without a restart
   * epoch (a hot restart child while its parent holds the witness looks just so), from its first step.
   */
  private afterWatchRead(read: Extract<MarkRead, { ok: true }>): void {
    const ended = this.drain.current === 'drained' || this.drain.current === 'timed-out';
    if (!ended) return;
    if (read.verdict === 'replaced') this.rearm('Envoy was restarted after the last drain', false);
    // Not as the same process: the reset one's read is followed now, and a hot restart child must be told to drain.
    else if (read.verdict === 'reset' && read.restartEpoch === null) this.rearm(`after the last drain ended, ${whyUntold(read)}`, false);
  }

  /** A new idle drain for the next /shutdown; `mayBeSameProcess`: see newDrain. */
  private rearm(why: string, mayBeSameProcess: boolean): void {
    const previous = this.drain;
    const before = previous.snapshot();
    this.rearmCount += 1;
    this.pollsOfEndedDrains += previous.pollCount;
    const lag = settledLag(before);
    if (lag !== undefined) this.lagsOfEndedDrains = [...this.lagsOfEndedDrains, lag].slice(-SETTLED_LAGS_KEPT);
    this.drain = this.newDrain(mayBeSameProcess ? previous : undefined);
    this.log.info(
      { event: 'drain_rearmed', previous_state: before.state, previous_reason: before.reason, rearms: this.rearmCount },
      `the drain is re-armed (${why}): the next /shutdown drains the Envoy process running then`,
    );
  }

  private drainEverStarted(): boolean {
    return this.rearmCount > 0 || this.drain.current !== 'idle' || this.deciding !== undefined;
  }

  // --- reading Envoy -----------------------------------------------------------------------------------

  /** Each read the follower took: the stats checked at the first, the traffic of the process running. */
  private noteCount(count: ConnectionCount, verdict: FollowVerdict, sentAtMs: number): void {
    this.checkStatsOnce(count);
    this.noteTraffic(verdict, count, sentAtMs);
  }

  /**
   * The traffic of the process running, read by read between drains: the next drain sizes its silence from it
   * (load-balancer.ts PriorTraffic). Only reads tied to the process followed; another process starts it anew.
   */
  private noteTraffic(verdict: FollowVerdict, count: ConnectionCount, sentAtMs: number): void {
    if (verdict === 'replaced') this.traffic = new LoadBalancerWatch(null);
    if (verdict === 'doubtful' || verdict === 'unknown') return;
    this.traffic.observe(count.arrivals, sentAtMs, this.clock.now(), undefined);
  }

  /**
   * At the first stats read after start (the watch's, or a drain's decision): what the drain needs and Envoy's
   * stats lack, logged once as a warning with why the drain cannot be trusted without it, so that it shows at pod
   * start and not at deletion (also in /ready's detail, /drain and shutdown_manager_envoy_stats_missing).
   */
  private checkStatsOnce(count: ConnectionCount): void {
    if (this.statsCheck !== null) return;
    const check = checkNeededStats(count);
    this.statsCheck = check;
    if (check.missing.length === 0) return;
    this.log.warn({ event: 'envoy_stats_missing', missing_stats: check.missing, envoy_admin: this.envoy.address }, check.detail);
  }

  private noteWatch(read: MarkRead): void {
    this.watchState = { up: read.ok, lastReadAtMs: this.clock.now(), failing: read.ok ? null : read.kind };
  }

  /**
   * The watch's log lines: the first failure, then at most one line per WATCH_LOG_EVERY_MS with how many
   * failed since; one line when Envoy answers again. After a drain, an Envoy that stopped answering is the
   * expected end of a pod, not a warning.
   */
  private failureLogger(): { failed(kind: AdminFailureKind, message: string): void; recovered(): void } {
    const lines = new RateLimit(WATCH_LOG_EVERY_MS, this.clock);
    return {
      failed: (kind, message) => {
        const since = lines.note();
        if (since === undefined) return;
        const afterDrain = this.drain.current !== 'idle';
        const fields = { event: 'envoy_admin_watch_failed', kind, error_message: message, failures_since_last_line: since, envoy_admin: this.envoy.address };
        const text = `Envoy's admin API does not answer (${kind}: ${message}); retrying with backoff up to every ${this.options.watchIntervalMs} ms`;
        if (afterDrain) this.log.info(fields, text);
        else this.log.warn(fields, text);
      },
      recovered: () => {
        // Undefined: no failure was logged since the last recovery, so there is nothing to say.
        const since = lines.reset();
        if (since === undefined) return;
        this.log.info({ event: 'envoy_admin_watch_recovered', failures_since_last_line: since }, "Envoy's admin API answers again");
      },
    };
  }

  private async readEnvoyProcess(): Promise<EnvoyProcessInfo> {
    const process = await this.envoy.serverInfo(this.stopping.signal);
    this.envoyProcess = process;
    return process;
  }

  // --- the journal and recovery ------------------------------------------------------------------------

  /**
   * Journals each step before it is sent and once Envoy took it. Before the first step, the process is read
   * for the journal (briefly: the drain matters more); a journal that cannot be written never holds the drain back.
   */
  private async onStep(step: DrainStepId, progress: StepProgress): Promise<void> {
    if (!this.journal.enabled) return;
    if (step === 'fail-health-checks' && progress === 'intended') {
      await within(this.readEnvoyProcess().catch(() => undefined), JOURNAL_IDENTITY_WAIT_MS, undefined);
    }
    try {
      await this.journal.record(step, progress, this.envoyProcess?.startedAtMs ?? null, this.clock.wallNow());
    } catch (error) {
      if (!this.warned.first('journal')) return;
      this.log.warn(
        { event: 'journal_failed', location: this.journal.location, error: messageOf(error) },
        `cannot write the drain journal at ${String(this.journal.location)} (${messageOf(error)}): a restarted shutdown manager will not know whether Envoy's listeners were drained`,
      );
    }
  }

  private async act(process: EnvoyProcessInfo, decision: RecoveryDecision): Promise<RecoveryReport> {
    const base = {
      ...decision,
      at: new Date(this.clock.wallNow()).toISOString(),
      envoyState: process.state,
      envoyUptimeSeconds: process.uptimeSeconds,
    };
    if (decision.action === 'none') return { ...base, disabled: false, error: null };
    const fields = { event: 'envoy_recovery', action: decision.action, envoy_state: process.state, listeners_drained: decision.listenersDrained, envoy_uptime_s: process.uptimeSeconds };
    if (!this.options.recoverEnvoy) {
      this.log.warn({ ...fields, disabled: true }, `Envoy was left draining (${decision.why}); --recover-envoy=false, so it is left as it is`);
      return { ...base, action: 'none', disabled: true, error: null };
    }
    try {
      await (decision.action === 'pass-health-checks' ? this.envoy.passHealthChecks(this.stopping.signal) : this.envoy.quit(this.stopping.signal));
    } catch (error) {
      this.log.error({ ...fields, error: messageOf(error) }, `Envoy was left draining (${decision.why}), and bringing it back failed: ${messageOf(error)}`);
      return { ...base, disabled: false, error: messageOf(error) };
    }
    const did = decision.action === 'pass-health-checks' ? 'sent POST /healthcheck/ok' : 'sent POST /quitquitquit so that the kubelet starts a fresh Envoy';
    this.log.warn(fields, `Envoy was left draining with no pod deletion under way (${decision.why}): ${did}`);
    return { ...base, disabled: false, error: null };
  }

  private async nextStart(windowMs: number): Promise<boolean> {
    const waiting = new AbortController();
    let started = false;
    const wake = (): void => {
      started = !this.stopping.signal.aborted;
      waiting.abort();
    };
    this.startWaiters.add(wake);
    try {
      await this.clock.sleep(windowMs, waiting.signal);
    } catch {
      // woken: a drain started, or the process is stopping
    } finally {
      this.startWaiters.delete(wake);
    }
    return started;
  }
}

export type { RecoveryAction };
