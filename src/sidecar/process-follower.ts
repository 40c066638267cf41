/**
 * The Envoy process the sidecar follows between drains (docs/glossary.md#trail): every read of the supervisor is
 * compared with the one before it, one read at a time, each bounded by the read timeout; another process answering
 * is followed from then on, and a drain that ends hands its last read over. It holds the sidecar's one `trust`
 * (whether marks follow our connections at this address), shared with every drain. See
 * docs/design.md#how-the-sidecar-follows-envoys-process.
 */
import { within } from '../clock.js';
import { AdminRefusedError, failureKindOf, type AdminFailureKind } from '../envoy/admin-errors.js';
import { markedRead, MarkTrust, ProcessTrail, type Expectation, type MarkedRead, type ProcessMark, type ReadEvidence } from '../envoy/process/identity.js';
import type { ConnectionCount } from '../envoy/stats.js';
import { messageOf } from '../errors.js';
import type { EnvoyDrainTarget } from './drain.js';
import { Once } from './log-throttle.js';
import type { SidecarLog } from './log.js';

/** Which process a read came from, against the one followed ('first': none was followed yet). */
export type FollowVerdict = ReturnType<ProcessTrail['observe']>;

/** `restartEpoch`: the answer's `server.hot_restart_epoch` (null: it lacked the gauge, so a hot restart cannot be told). */
export type MarkRead =
  | { readonly ok: true; readonly verdict: FollowVerdict; readonly restartEpoch: number | null }
  | {
      readonly ok: false;
      readonly kind: AdminFailureKind;
      readonly message: string;
      /** Refused while this witness was open (null: none was): the process holding it lives, its address lost (a socket path). */
      readonly openWitness?: number | null;
    };

/** Told of each read answered: its count, which process it came from, and when it was sent. */
export type CountListener = (count: ConnectionCount, verdict: FollowVerdict, sentAtMs: number) => void;

export interface FollowerOptions {
  /** The bound of one read (the admin timeout): a /shutdown after a drain waits no longer to decide. */
  readonly readTimeoutMs: number;
  /** Aborted when the sidecar stops: a read in flight is cancelled. */
  readonly stopping: AbortSignal;
  readonly clock: { now(): number };
  readonly onCount: CountListener;
}

export class ProcessFollower {
  /** Whether marks follow our connections at this admin address: one for the sidecar, shared with its drains. */
  readonly trust = new MarkTrust();
  private trail: ProcessTrail;
  /** The read of Envoy in flight, if any: reads are one at a time, so that each is compared with the one before. */
  private reading: Promise<MarkRead> | undefined;
  /** Doubtful reads so far while marks are unproven (warnIfMarksUnproven). */
  private unproven = 0;
  private readonly warned = new Once<'marks-unproven'>();

  constructor(
    private readonly envoy: EnvoyDrainTarget,
    private readonly log: SidecarLog,
    private readonly options: FollowerOptions,
  ) {
    this.trail = new ProcessTrail(envoy, this.trust);
  }

  /** The last read of the process followed; undefined before the first. */
  get latest(): MarkedRead | undefined {
    return this.trail.latest;
  }

  /** Follows on from a drain's last read: whichever process gave it is the one running now. */
  handOver(latest: MarkedRead): void {
    this.trail = new ProcessTrail(this.envoy, this.trust, latest);
  }

  /**
   * A stats read for the mark of the process that answers, compared with the process followed (and followed
   * from then on unless another one answered), bounded by the read timeout whatever the call does.
   */
  async read(): Promise<MarkRead> {
    // One at a time: a /shutdown deciding while the watch reads waits for that read, then reads afresh.
    for (let waited = 0; this.reading !== undefined && waited < 2; waited += 1) await this.reading;
    const read = this.readNow();
    this.reading = read;
    try {
      return await read;
    } finally {
      if (this.reading === read) this.reading = undefined;
    }
  }

  private async readNow(): Promise<MarkRead> {
    const cancel = new AbortController();
    const stop = (): void => cancel.abort();
    this.options.stopping.addEventListener('abort', stop, { once: true });
    const expected = this.trail.expect();
    const trail = this.trail;
    const sentAtMs = this.options.clock.now();
    const read = this.envoy.countOpenConnections(cancel.signal).then(
      (count): MarkRead => {
        const verdict = this.follow(trail, count.adminConnectionsTotal, expected, count.evidence);
        this.options.onCount(count, verdict, sentAtMs);
        return { ok: true, verdict, restartEpoch: count.hotRestart?.epoch ?? null };
      },
      (error: unknown): MarkRead => ({
        ok: false,
        kind: failureKindOf(error),
        message: messageOf(error),
        openWitness: error instanceof AdminRefusedError ? (error.evidence?.witness ?? null) : null,
      }),
    );
    const timeoutMs = this.options.readTimeoutMs;
    const answer = await within(read, timeoutMs, { ok: false, kind: 'timeout', message: `no answer within ${timeoutMs} ms` } satisfies MarkRead);
    cancel.abort();
    this.options.stopping.removeEventListener('abort', stop);
    return answer;
  }

  /** Observes a read on `trail`; another process answering is followed from then on. */
  private follow(trail: ProcessTrail, mark: ProcessMark, expected: Expectation, evidence: ReadEvidence | undefined): FollowVerdict {
    const verdict = trail.observe(mark, expected, evidence);
    if (verdict === 'replaced' && trail === this.trail) {
      this.trail = new ProcessTrail(this.envoy, this.trust, markedRead(mark, this.envoy.connectionMarker(), evidence));
    }
    this.warnIfMarksUnproven(verdict, mark);
    return verdict;
  }

  /**
   * Reads that answer with a mark but never once grow as our own connections do: the admin address is not
   * Envoy's own listener (a proxy, such as Contour's read-only 127.0.0.1:9001), and a replaced Envoy can then be
   * told only by a counter that goes down.
   */
  private warnIfMarksUnproven(verdict: FollowVerdict, mark: ProcessMark): void {
    if (this.trust.verified || mark === null || verdict !== 'doubtful') return;
    this.unproven += 1;
    if (this.unproven < 3 || !this.warned.first('marks-unproven')) return;
    this.log.warn(
      { event: 'admin_marks_unproven', envoy_admin: this.envoy.address },
      `Envoy's admin counter at ${this.envoy.address} does not grow with this sidecar's own calls: is the admin address a proxy in front of Envoy? A replaced Envoy can then be told only by a counter that goes down`,
    );
  }
}

/** Whether a refused read came while a witness was open that the drained process's last read was not spoken for by. */
export function heldByAnother(read: Extract<MarkRead, { ok: false }>, drained: MarkedRead | undefined): boolean {
  const open = read.openWitness ?? null;
  return open !== null && open !== (drained?.witness ?? null);
}

/**
 * Why a read after an ended drain cannot say that the drained process still runs, for the re-arm's log line. A reset
 * without a restart epoch is what a hot restart looks like while its parent holds this sidecar's witness: as a running
 * drain does (drain-process.ts awaitMergeAfterBlindReset), the next drain fails the health checks of whatever answers.
 */
export function whyUntold(read: MarkRead): string {
  if (!read.ok && (read.openWitness ?? null) !== null) return "Envoy's admin address refuses while a connection held to a process behind it stays open: that process lives, its address lost";
  if (!read.ok) return `Envoy's admin API did not say which process runs (${read.kind}): it may be a new one`;
  switch (read.verdict) {
    case 'reset':
      return "Envoy's counters went down with no restart epoch in its stats: a counter reset or a hot restart, which nothing here can tell apart, so it is drained again";
    case 'doubtful':
      return "Envoy's admin counter did not grow as this sidecar's own connections say, and no connection held to the drained process tells whether it is the same one, reset, or another: it is drained again";
    default:
      return "Envoy's admin API did not say which process runs (no earlier read to compare with): it may be a new one";
  }
}
