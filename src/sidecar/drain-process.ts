/**
 * The process a drain drains (docs/glossary.md#pin): pinned by the first read that answers, followed read by read
 * on a trail (src/envoy/process/identity.ts), and through a hot restart to the child. It keeps the drain's promise
 * never to confuse two Envoys in one place: which process each read came from, whether its count may end the drain,
 * and whether refusals prove the pinned process gone. It knows nothing of steps or timers: it tells the drain when
 * the steps must go out again (`resendSteps`). See docs/design.md#how-the-sidecar-follows-envoys-process.
 */
import { AdminRefusedError } from '../envoy/admin-errors.js';
import { compareProcess, isHotRestartChild, letGoOfUs, markedRead, MarkTrust, ProcessTrail, type Expectation, type MarkedRead, type OwnConnections, type ProcessMark, type ProcessVerdict, type ReadEvidence } from '../envoy/process/identity.js';
import type { WitnessEvidence } from '../envoy/process/witness.js';
import type { ConnectionCount } from '../envoy/stats.js';
import type { HotRestartSeen } from './drain-outcome.js';
import { INITIATION_STEPS, labelOf, type DrainStepId } from './drain-steps.js';
import type { LoadBalancerWatch } from './load-balancer.js';
import { Once } from './log-throttle.js';
import type { SidecarLog } from './log.js';

/** The drain that ended before this one (see DrainOptions.previous). */
export interface PreviousDrain {
  /** The last read known of the process that drain drained. */
  readonly read: MarkedRead;
  /** Monotonic; undefined if that drain's POST /healthcheck/fail was never taken. */
  readonly healthChecksFailedAtMs: number | undefined;
  /** What that drain saw of the load balancer: a drain of the same process goes on from it. */
  readonly loadBalancer?: LoadBalancerWatch;
}

/**
 * Where the drain stands with the process it drains. `epoch`: its `server.hot_restart_epoch` (null: its stats carry
 * none). `awaiting-merge`: a hot restart child followed, or a reset that may be one (no epoch to tell), whose counts
 * end no drain until it has merged its parent's stats (see `countIsWhole`).
 */
export type PinState =
  | { readonly kind: 'unpinned' }
  | { readonly kind: 'pinned'; readonly epoch: number | null }
  | { readonly kind: 'awaiting-merge'; readonly epoch: number | null };

/** Which process a read came from, as the drain acts on it. */
export type ReadProcess = ProcessVerdict | 'pinned' | 'hot-restarted';

/** What a read means for the drain: whose it is, and what the drain must do about it. */
export interface ReadDecision {
  readonly process: ReadProcess;
  /** Both steps go out again, and check-delay counts from their new answer. */
  readonly resendSteps: boolean;
  /** The first read found the process of the previous drain: it goes on from that drain's failure and traffic. */
  readonly inherit?: PreviousDrain;
}

/** Taken right before a read is sent: what the read must show to be the pinned process's (identity.ts Expectation). */
export interface ReadExpectation {
  readonly pinned: Expectation;
  /** Before the first read: the growth expected since the previous drain's last read. */
  readonly previous: number | undefined;
}

/** What the drain needs of Envoy to follow its process. */
export interface FollowedEnvoy extends OwnConnections {
  /** For messages. */
  readonly address: string;
}

/** Refusals that end a drain as envoy-exited without the witness's evidence must have lasted this long. */
const REFUSALS_WITHOUT_EVIDENCE_MS = 10_000;

export class DrainedProcess {
  private state: PinState = { kind: 'unpinned' };
  private trail: ProcessTrail;
  /** The last read, of whichever process answered it (another one, when the drain ends replaced). */
  private latest: MarkedRead | undefined;
  /** Steps Envoy took since the last read of the pinned process: they may have reached a process that replaced it. */
  private stepsSinceRead: DrainStepId[] = [];
  private readonly hotRestarts: HotRestartSeen[] = [];
  /**
   * The once-per-drain lines: a hot restart's parent holding connections, stats without the admin listener's mark,
   * a refusal while the witness shows Envoy alive, a read that could be a reset or another process (drainAsForBoth).
   */
  private readonly warned = new Once<'parent-holds' | 'unmarked' | 'alive-refusing' | 'untold'>();

  constructor(
    private readonly envoy: FollowedEnvoy,
    private readonly log: SidecarLog,
    readonly trust: MarkTrust = new MarkTrust(),
    private readonly previous?: PreviousDrain,
  ) {
    this.trail = new ProcessTrail(envoy, trust);
  }

  get pin(): PinState {
    return this.state;
  }

  /** The last read, whichever process gave it: what the next read must be compared with. */
  get latestRead(): MarkedRead | undefined {
    return this.latest;
  }

  /** The mark of the process pinned, at its last read; null before the first. */
  get pinnedMark(): ProcessMark {
    return this.trail.latest?.mark ?? null;
  }

  get hotRestartsSeen(): readonly HotRestartSeen[] {
    return [...this.hotRestarts];
  }

  /** Envoy took a step: it may have reached a process that replaced the pinned one since its last read. */
  stepTaken(step: DrainStepId): void {
    this.stepsSinceRead.push(step);
  }

  /** The steps go out again: none is pending on any process. */
  stepsResent(): void {
    this.stepsSinceRead = [];
  }

  /**
   * Taken right before a read is sent: how much the admin counter must have grown since the pinned process's
   * last read (or, before the first, since the previous drain's) if the same process answers (identity.ts).
   */
  expect(): ReadExpectation {
    const previous = this.previous;
    const sincePrevious = previous === undefined || this.trail.latest !== undefined ? undefined : this.envoy.connectedSince(previous.read.marker) + 1;
    return { pinned: this.trail.expect(), previous: sincePrevious };
  }

  /**
   * The one place that decides which process a read came from. The first read pins the process (inheriting
   * the previous drain's health-check failure if it is the same one); every later read must come from it.
   */
  observe(count: ConnectionCount & { readonly evidence?: ReadEvidence }, expected: ReadExpectation): ReadDecision {
    const mark = count.adminConnectionsTotal;
    const epoch = count.hotRestart?.epoch ?? null;
    const evidence = count.evidence;
    if (mark === null) this.warnUnmarked(evidence !== undefined);
    const verdict = this.trail.observe(mark, expected.pinned, evidence);
    this.latest = markedRead(mark, this.envoy.connectionMarker(), evidence);
    // Another process whose restart epoch is above the pinned one's is its hot restart child: the pinned process
    // (the parent) still holds its connections, and the child took its listeners (see followHotRestart). The
    // parent holds the witness too, so a counter that went down reads as a reset ('reset') unless the epoch says.
    const otherProcess = verdict === 'replaced' || verdict === 'doubtful' || verdict === 'reset';
    if (otherProcess && isHotRestartChild(this.pinnedEpoch, epoch)) return this.followHotRestart(count);
    if (verdict === 'first') return this.pinFirst(mark, epoch, expected);
    if (verdict === 'replaced') {
      this.logReplaced(mark);
      return { process: verdict, resendSteps: false };
    }
    let resendSteps = false;
    if (verdict === 'reset' && (epoch === null || typeof this.pinnedEpoch !== 'number')) resendSteps = this.awaitMergeAfterBlindReset(epoch);
    if (verdict === 'reset') this.logReset(expected.pinned.base?.mark ?? null, mark, evidence);
    // Marks follow our connections here, yet this one did not, and no witness tells: a reset or another process.
    if (verdict === 'doubtful' && this.trust.verified) resendSteps = this.drainAsForBoth(expected.pinned.base?.mark ?? null, mark) || resendSteps;
    // Not the pinned process's: the steps sent since stay noted.
    if (verdict !== 'doubtful' && verdict !== 'unknown') this.stepsSinceRead = [];
    return { process: verdict, resendSteps };
  }

  /**
   * Whether a count of the process followed is whole: not while a hot restart child has not merged its parent's
   * stats (childMerged), nor while the parent still holds connections (parentHoldsConnections).
   */
  countIsWhole(count: ConnectionCount): boolean {
    return this.childMerged(count) && !this.parentHoldsConnections(count);
  }

  /**
   * Whether refusals may be read as Envoy gone: not while the witness connection is open (the process holding it
   * lives: the address was unlinked or moved, not closed); yes once the process drained let go of a witness that
   * spoke for it (identity.ts letGoOfUs: not one held by the process before it, which a restart just before the
   * drain's first read closes: FUZZ_SEED=108 at the brisk pace), or, before any read was pinned, once the latest
   * witness was closed by the other end; otherwise only after refusals lasting REFUSALS_WITHOUT_EVIDENCE_MS
   * (`refusingForMs`). A refusal without evidence at all (a target that keeps no witness) is taken as before.
   */
  exitProven(error: unknown, refusingForMs: number): boolean {
    const evidence: WitnessEvidence | undefined = error instanceof AdminRefusedError ? error.evidence : undefined;
    if (evidence === undefined) return true;
    if (evidence.witness !== null) {
      this.warnAliveRefusing(error as AdminRefusedError);
      return false;
    }
    const pinnedRead = this.trail.latest;
    if (pinnedRead === undefined ? evidence.lastClosed : letGoOfUs(pinnedRead, evidence)) return true;
    return refusingForMs >= REFUSALS_WITHOUT_EVIDENCE_MS;
  }

  private get pinnedEpoch(): number | null | undefined {
    return this.state.kind === 'unpinned' ? undefined : this.state.epoch;
  }

  /**
   * The first read pins its process. Steps Envoy took before it went to a process nobody identified: perhaps not the
   * one now pinned (replaced in between). They are sent again, and check-delay counts from the new answer: both steps
   * are idempotent, and a drain must never count a process whose health checks it did not fail.
   */
  private pinFirst(mark: ProcessMark, epoch: number | null, expected: ReadExpectation): ReadDecision {
    this.state = { kind: 'pinned', epoch };
    const resendSteps = this.stepsSinceRead.length > 0;
    if (resendSteps) {
      const steps = this.stepsSinceRead.map(labelOf);
      this.log.info({ event: 'drain_steps_resent', steps }, `${steps.join(' and ')} went to an Envoy process not identified yet: sending again to the one that answered`);
      this.stepsSinceRead = [];
    }
    const previous = this.previous;
    const same = previous !== undefined && expected.previous !== undefined && compareProcess(previous.read.mark, mark, expected.previous, this.trust.verified) === 'same';
    return { process: 'pinned', resendSteps, ...(same ? { inherit: previous } : {}) };
  }

  private logReplaced(mark: ProcessMark): void {
    const reached = this.stepsSinceRead.map(labelOf);
    this.log.warn(
      { event: 'envoy_replaced', pinned_admin_connections: this.trail.latest?.mark ?? null, seen_admin_connections: mark, steps_maybe_to_new_process: reached },
      'another Envoy process answers on the admin port: the one being drained has exited, and its connections with it' +
        (reached.length === 0 ? '' : `; ${reached.join(' and ')}, sent since the last read of the old one, may have reached the new one (the next /shutdown drains it)`),
    );
  }

  private logReset(pinnedMark: ProcessMark, mark: ProcessMark, evidence: ReadEvidence | undefined): void {
    this.log.warn(
      { event: 'envoy_counters_reset', pinned_admin_connections: pinnedMark, seen_admin_connections: mark, witness: evidence?.witness ?? null },
      "Envoy's admin counter went down while the connection this sidecar holds open to the process being drained stayed open: its counters were reset (POST /reset_counters), it is the same process, and the drain goes on",
    );
  }

  /**
   * Once per drain: a read that is the pinned process reset or another process, and nothing here tells which (issue
   * 38: a hot restart child reset just after its parent exited with the witness). Drained as for both: the steps are
   * sent again, so that another process is told to drain too, and no count ends the drain until a read is tied to
   * the pinned process again (a doubt never ends it), so it is never taken for "replaced".
   */
  private drainAsForBoth(pinnedMark: ProcessMark, seenMark: ProcessMark): boolean {
    if (!this.warned.first('untold')) return false;
    this.log.warn(
      { event: 'envoy_process_untold', pinned_admin_connections: pinnedMark, seen_admin_connections: seenMark },
      "Envoy's admin counter did not grow as this sidecar's connections say, and no connection held to the process being drained tells whether it was reset or replaced: " +
        'draining as for both (its health checks failed and its listeners drained again); no count ends the drain until one is tied to that process again',
    );
    this.stepsSinceRead = [];
    return true;
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
  private awaitMergeAfterBlindReset(epoch: number | null): boolean {
    this.state = { kind: 'awaiting-merge', epoch: epoch ?? this.pinnedEpoch ?? null };
    this.log.info(
      { event: 'drain_steps_resent', steps: INITIATION_STEPS.map(labelOf), cause: 'counters-reset-without-epoch' },
      "Envoy's counters went down with no restart epoch in its stats (a stats_matcher?): a hot restart cannot be ruled out, so its health checks are failed and its listeners drained again",
    );
    this.stepsSinceRead = [];
    return true;
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
  private followHotRestart(count: ConnectionCount & { readonly evidence?: ReadEvidence }): ReadDecision {
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
    this.trail = new ProcessTrail(this.envoy, this.trust);
    const unwitnessed = count.evidence === undefined ? undefined : { ...count.evidence, witness: null };
    this.trail.observe(count.adminConnectionsTotal, this.trail.expect(), unwitnessed);
    this.state = { kind: 'awaiting-merge', epoch: toEpoch };
    this.stepsSinceRead = [];
    return { process: 'hot-restarted', resendSteps: true };
  }

  /**
   * Whether a hot restart child followed has merged its parent's stats: `server.uptime` above 0 (0 until
   * updateServerStats first runs; then the time since the parent's original start, in whole seconds). Unreported (a
   * stats_matcher), or 0 still because the parent was less than a second old, it never shows: the drain then holds to
   * its deadline, the safe side.
   */
  private childMerged(count: ConnectionCount): boolean {
    if (this.state.kind !== 'awaiting-merge') return true;
    if ((count.hotRestart?.uptime ?? 0) <= 0) return false;
    this.state = { kind: 'pinned', epoch: this.state.epoch };
    return true;
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

  /** Once per drain: the admin address refuses while the process drained holds our connection, so it lives. */
  private warnAliveRefusing(error: AdminRefusedError): void {
    if (!this.warned.first('alive-refusing')) return;
    this.log.warn(
      { event: 'envoy_admin_address_lost', error_message: error.message, path_state: error.pathState ?? null, envoy_admin: this.envoy.address },
      `Envoy's admin address refuses connections (${error.message}), but the connection this sidecar holds open to Envoy is still open: Envoy runs, and its connections cannot be counted any more; the drain holds to its deadline`,
    );
  }
}
