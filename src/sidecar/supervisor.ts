/**
 * The drain across the life of the sidecar, which can outlive several Envoy processes:
 *
 * - `shutdown()` (Envoy's preStop, GET /shutdown) starts the drain or joins the one running. Once a drain
 *   has ended, it is kept (hooks are delivered at least once: a repeat gets the same answer) unless Envoy
 *   has been restarted since; then the drain is re-armed and the new process is drained.
 * - `wait()` (the sidecar's own preStop, GET /wait) never starts a drain: it joins one that is running or
 *   that starts within a short window. So a kubelet restarting the sidecar alone leaves Envoy serving.
 * - `recover()` runs once at start: an Envoy found left draining is brought back (see recovery.ts).
 *
 * HTTP routes and signals live elsewhere; this knows only Envoy's admin API, the journal and the clock.
 */
import type { EnvoyProcessInfo } from '../envoy/admin-client.js';
import type { Clock } from '../clock.js';
import { Drain, type DrainOutcome, type DrainState, type DrainLoopSettings, type DrainSnapshot, type DrainStepName, type EnvoyDrainTarget } from './drain.js';
import type { DrainJournal } from './journal.js';
import type { SidecarLog } from './log.js';
import { decideRecovery, type RecoveryAction, type RecoveryDecision } from './recovery.js';

/** What the supervisor needs from Envoy's admin API beyond the drain's calls; EnvoyAdminClient implements it. */
export interface SupervisedEnvoy extends EnvoyDrainTarget {
  serverInfo(signal?: AbortSignal, now?: () => number): Promise<EnvoyProcessInfo>;
  passHealthChecks(signal?: AbortSignal): Promise<void>;
  quit(signal?: AbortSignal): Promise<void>;
}

export interface SupervisorOptions {
  readonly drain: DrainLoopSettings;
  /** Bring back an Envoy found left draining at start (--recover-envoy). */
  readonly recoverEnvoy: boolean;
  /** How often to look for a new Envoy process once a drain has ended. */
  readonly watchIntervalMs: number;
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

/** /drain: the current drain, and what happened around it. */
export interface SupervisorSnapshot extends DrainSnapshot {
  /** How many times the drain was re-armed for a new Envoy process. */
  readonly rearms: number;
  /** The Envoy process last seen through /server_info. */
  readonly envoyProcess: { readonly state: string; readonly startedAt: string; readonly uptimeSeconds: number } | null;
  readonly recovery: RecoveryReport | null;
}

/** An identity read must not hold back the health-check failure for long: the drain matters more. */
const IDENTITY_READ_TIMEOUT_MS = 500;
/** Envoy floors its uptime to the second: a process counts as new only if it started clearly after the drain. */
const UPTIME_GRANULARITY_MS = 1_000;

export class DrainSupervisor {
  private drain: Drain;
  private rearmCount = 0;
  private envoyProcess: EnvoyProcessInfo | undefined;
  private recovery: RecoveryReport | null = null;
  /** A /shutdown after a drain ended, deciding whether Envoy is new: waiters and SIGTERM wait for it. */
  private deciding: Promise<DrainOutcome> | undefined;
  private readonly startWaiters = new Set<() => void>();
  private readonly stopping = new AbortController();
  private journalWarned = false;

  constructor(
    private readonly envoy: SupervisedEnvoy,
    private readonly options: SupervisorOptions,
    private readonly journal: DrainJournal,
    private readonly log: SidecarLog,
    private readonly clock: Clock,
  ) {
    this.drain = this.newDrain();
  }

  /** The state of the current drain (a re-armed drain is idle again). */
  get state(): DrainState {
    return this.drain.current;
  }

  /** Starts the drain, joins the running one, or re-arms it for a new Envoy process. */
  shutdown(): Promise<DrainOutcome> {
    if (this.drain.current === 'idle') return this.startDrain();
    if (this.drain.current === 'draining' || this.drain.current === 'interrupted') return this.drain.start();
    this.deciding ??= this.rearmIfEnvoyRestarted().finally(() => (this.deciding = undefined));
    return this.deciding;
  }

  /**
   * Joins a drain that runs or starts within `windowMs`; undefined when none did. Never starts one: the
   * kubelet runs this container's hook on a restart of this container alone, and Envoy must keep serving.
   */
  async wait(windowMs: number): Promise<DrainOutcome | undefined> {
    if (this.drain.current === 'draining') return this.drain.start();
    if (this.deciding !== undefined) return this.deciding;
    // The kubelet sends both hooks at once, but this one may come late, after a short drain ended.
    if (this.endedWithin(windowMs)) return this.drain.start();
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

  /** Ready once Envoy's admin API has answered, for the life of the process. */
  readiness(): { readonly ready: boolean; readonly detail: string } {
    if (this.envoy.hasAnswered) return { ready: true, detail: `Envoy's admin API answered at ${this.envoy.address}` };
    return { ready: false, detail: `Envoy's admin API has not answered at ${this.envoy.address} yet` };
  }

  snapshot(): SupervisorSnapshot {
    const process = this.envoyProcess;
    return {
      ...this.drain.snapshot(),
      rearms: this.rearmCount,
      envoyProcess:
        process === undefined
          ? null
          : { state: process.state, startedAt: new Date(process.startedAtMs).toISOString(), uptimeSeconds: process.uptimeSeconds },
      recovery: this.recovery,
    };
  }

  private async act(process: EnvoyProcessInfo, decision: RecoveryDecision): Promise<RecoveryReport> {
    const base = {
      ...decision,
      at: new Date(this.clock.now()).toISOString(),
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
      await (decision.action === 'pass-health-checks' ? this.envoy.passHealthChecks() : this.envoy.quit());
    } catch (error) {
      this.log.error({ ...fields, error: messageOf(error) }, `Envoy was left draining (${decision.why}), and bringing it back failed: ${messageOf(error)}`);
      return { ...base, disabled: false, error: messageOf(error) };
    }
    const did = decision.action === 'pass-health-checks' ? 'sent POST /healthcheck/ok' : 'sent POST /quitquitquit so that the kubelet starts a fresh Envoy';
    this.log.warn(fields, `Envoy was left draining with no pod deletion under way (${decision.why}): ${did}`);
    return { ...base, disabled: false, error: null };
  }

  private endedWithin(windowMs: number): boolean {
    const { finishedAt, state } = this.drain.snapshot();
    if (finishedAt === null || state === 'interrupted') return false;
    return this.clock.now() - Date.parse(finishedAt) <= windowMs;
  }

  private drainEverStarted(): boolean {
    return this.rearmCount > 0 || this.drain.current !== 'idle' || this.deciding !== undefined;
  }

  private newDrain(): Drain {
    return new Drain(this.envoy, this.options.drain, this.log, this.clock, (step) => this.beforeStep(step));
  }

  private startDrain(): Promise<DrainOutcome> {
    const outcome = this.drain.start();
    for (const wake of this.startWaiters) wake();
    void outcome.then(() => this.watchForNewEnvoy(), () => undefined);
    return outcome;
  }

  private async rearmIfEnvoyRestarted(): Promise<DrainOutcome> {
    const ended = this.drain;
    let process: EnvoyProcessInfo;
    try {
      process = await this.readEnvoyProcess();
    } catch {
      // No Envoy answering: nothing to drain, the answer stays what it was.
      return ended.start();
    }
    if (this.drain !== ended) return this.drain.start(); // the watcher re-armed meanwhile
    if (!this.isNewProcess(process, ended)) return ended.start();
    this.rearm(process, 'a /shutdown came after the last drain had ended');
    return this.startDrain();
  }

  /**
   * After a drain ended, looks every watch interval for a new Envoy process (a container restart) and
   * re-arms, so that /drain and the metrics show that the next deletion will drain again.
   */
  private async watchForNewEnvoy(): Promise<void> {
    const ended = this.drain;
    if (ended.current === 'interrupted') return;
    while (!this.stopping.signal.aborted && this.drain === ended) {
      try {
        await this.clock.sleep(this.options.watchIntervalMs, this.stopping.signal);
      } catch {
        return; // stopping
      }
      if (this.drain !== ended || this.deciding !== undefined) return;
      const process = await this.readEnvoyProcess().catch(() => undefined);
      if (process !== undefined && this.drain === ended && this.deciding === undefined && this.isNewProcess(process, ended)) {
        this.rearm(process, 'Envoy was restarted after the last drain');
        return;
      }
    }
  }

  /**
   * The drained process never comes back: once its admin port refused (it exited), or once its health
   * checks failed (no one undoes that but this sidecar's recovery), any Envoy that answers LIVE or starts
   * up is another one; and so is any process that started after the drain began.
   */
  private isNewProcess(process: EnvoyProcessInfo, ended: Drain): boolean {
    const snapshot = ended.snapshot();
    if (snapshot.reason === 'envoy-exited') return true;
    const drainStartedAt = snapshot.startedAt === null ? undefined : Date.parse(snapshot.startedAt);
    if (drainStartedAt !== undefined && process.startedAtMs - UPTIME_GRANULARITY_MS > drainStartedAt) return true;
    return snapshot.healthChecksFailed && process.state !== 'DRAINING';
  }

  private rearm(process: EnvoyProcessInfo, why: string): void {
    const previous = this.drain.snapshot();
    this.rearmCount += 1;
    this.drain = this.newDrain();
    this.log.info(
      {
        event: 'drain_rearmed',
        previous_state: previous.state,
        previous_reason: previous.reason,
        envoy_state: process.state,
        envoy_uptime_s: process.uptimeSeconds,
        rearms: this.rearmCount,
      },
      `a new Envoy process is running (up ${process.uptimeSeconds}s; ${why}): the next /shutdown drains it`,
    );
  }

  private async readEnvoyProcess(): Promise<EnvoyProcessInfo> {
    const process = await this.envoy.serverInfo(AbortSignal.any([this.stopping.signal, AbortSignal.timeout(IDENTITY_READ_TIMEOUT_MS)]), () => this.clock.now());
    this.envoyProcess = process;
    return process;
  }

  /** Journals the step before it is sent; a journal that cannot be written never holds the drain back. */
  private async beforeStep(step: DrainStepName): Promise<void> {
    if (!this.journal.enabled) return;
    if (step === 'fail health checks') await this.readEnvoyProcess().catch(() => undefined);
    try {
      await this.journal.record(step, this.envoyProcess?.startedAtMs ?? null, this.clock.now());
    } catch (error) {
      if (this.journalWarned) return;
      this.journalWarned = true;
      this.log.warn(
        { event: 'journal_failed', location: this.journal.location, error: messageOf(error) },
        `cannot write the drain journal at ${String(this.journal.location)} (${messageOf(error)}): a restarted shutdown manager will not know whether Envoy's listeners were drained`,
      );
    }
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
      await this.clock.sleep(windowMs, AbortSignal.any([waiting.signal, this.stopping.signal]));
    } catch {
      // woken: a drain started, or the process is stopping
    } finally {
      this.startWaiters.delete(wake);
    }
    return started;
  }
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

export type { RecoveryAction };
