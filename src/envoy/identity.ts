/**
 * Which Envoy process answered: the one a drain is pinned to, or another one that took its admin port.
 *
 * The mark is `listener.admin.downstream_cx_total`, read in the same answer as the connection counts (see
 * CONNECTION_STATS_FILTER), so that a count and the process it belongs to can never come from two processes.
 * A counter only grows within one process and starts again at 0 in a new one. Between two reads of one process
 * it grows by at least the connections this sidecar opened to the admin port in between, each accepted by that
 * process: the sockets created after the earlier answer arrived and connected before the later read was sent,
 * plus the later read's own (`OwnConnections`). Growing by less than that means another process answered.
 *
 * Why not `/server_info`'s `uptime_current_epoch`: Envoy computes it from its wall clock, so a step of the
 * node's clock moves it as a restart would (backwards, even below zero), and a drain that took a clock step for
 * a new Envoy would say "drained" while the old one still holds its connections. Uptimes still serve where a
 * wrong guess costs nothing (the journal and recovery: see recovery.ts).
 *
 * The one way to fool the mark: a new process that, before our read of it, took more connections from others
 * than the old one had taken in its whole life up to our earlier read. The old one's counter includes every
 * read of ours (one every check-interval since the sidecar started), so a new process loses that race unless
 * the old one was seconds old.
 */

/** A process's mark at one read; null when Envoy did not report the counter (then nothing can be told). */
export type ProcessMark = number | null;

export type ProcessVerdict =
  /** The process that gave the earlier read answered again. */
  | 'same'
  /** Another process answered: the one that gave the earlier read has exited. */
  | 'replaced'
  /** One of the two reads carried no mark. */
  | 'unknown';

/** This sidecar's own connections to the admin port, numbered as their sockets are created (EnvoyAdminClient). */
export interface OwnConnections {
  /** How many sockets have been created so far. */
  connectionMarker(): number;
  /** How many sockets created after `marker` have connected so far. */
  connectedSince(marker: number): number;
}

/**
 * Compares two reads, `earlier` answered before `later` was sent; `minGrowth`: the connections the process
 * answering `earlier` must have accepted since, if it answered `later` too (at least 1: the later read's own).
 */
export function compareProcess(earlier: ProcessMark, later: ProcessMark, minGrowth = 1): ProcessVerdict {
  if (earlier === null || later === null) return 'unknown';
  return later - earlier >= minGrowth ? 'same' : 'replaced';
}

/** A read that carried a mark, and this sidecar's connection marker when its answer arrived. */
export interface MarkedRead {
  readonly mark: ProcessMark;
  readonly marker: number;
}

/**
 * The process a series of reads follows: `expect()` right before each read is sent, then `observe()` with
 * its mark once answered. The drain follows the process it pins; the supervisor follows whatever runs.
 */
export class ProcessTrail {
  private last: MarkedRead | undefined;

  constructor(
    private readonly own: OwnConnections,
    start?: MarkedRead,
  ) {
    this.last = start;
  }

  /** The last read followed; undefined before the first. */
  get latest(): MarkedRead | undefined {
    return this.last;
  }

  /** Before a read is sent: the growth that read must show to come from the same process. */
  expect(): number {
    return this.last === undefined ? 1 : this.own.connectedSince(this.last.marker) + 1;
  }

  /** After the read answered: its verdict ('first' for the first read); a replaced process is not followed. */
  observe(mark: ProcessMark, minGrowth: number): ProcessVerdict | 'first' {
    const read: MarkedRead = { mark, marker: this.own.connectionMarker() };
    if (this.last === undefined) {
      this.last = read;
      return 'first';
    }
    const verdict = compareProcess(this.last.mark, mark, minGrowth);
    if (verdict !== 'replaced' && mark !== null) this.last = read;
    return verdict;
  }
}
