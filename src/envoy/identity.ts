/**
 * Which Envoy process answered: the one a drain is pinned to, or another one that took its admin port.
 *
 * The mark is `listener.admin.downstream_cx_total`, read in the same answer as the connection counts (see
 * CONNECTION_STATS_FILTER), so that a count and the process it belongs to can never come from two processes.
 * A counter only grows within one process and starts again at 0 in a new one. Between two reads of one process
 * it grows by at least the connections this sidecar opened to the admin port in between and that the port
 * answered on (proof that Envoy accepted and counted them): the sockets created after the earlier answer arrived
 * and answered before the later read was sent, plus the later read's own (`OwnConnections`). A counter that went
 * down is another process. One that grew by less is another process once marks have proved to follow our
 * connections at this address (MarkTrust); before that, it is doubtful (a proxy in front of the admin API grows
 * its own counter, not ours), and a doubtful count never ends a drain.
 *
 * Why not `/server_info`'s `uptime_current_epoch`: Envoy computes it from its wall clock, so a step of the
 * node's clock moves it as a restart would (backwards, even below zero), and a drain that took a clock step for
 * a new Envoy would say "drained" while the old one still holds its connections. Uptimes still serve where a
 * wrong guess costs nothing (the journal and recovery: see recovery.ts).
 *
 * The one way to fool the mark: a new process that, before our first read of it, took more connections (from
 * others, or ours it never answered) than the old one had taken in its whole life up to our earlier read. The old
 * one's counter includes every read of ours (one every check-interval since the sidecar started), so a new
 * process loses that race unless the old one was seconds old; and a read of the new process that grew too
 * little is kept as a doubt that the next read settles (see ProcessTrail). test/support/drain-model.ts searches
 * for such paths with processes seconds old.
 */

/** A process's mark at one read; null when Envoy did not report the counter (then nothing can be told). */
export type ProcessMark = number | null;

export type ProcessVerdict =
  /** The process that gave the earlier read answered again. */
  | 'same'
  /** Another process answered: the one that gave the earlier read has exited. */
  | 'replaced'
  /**
   * The counter grew, but less than our own connections, before marks have proved to follow them at this
   * address (MarkTrust): another process, or a proxy in front of Envoy. Its count must not end a drain.
   */
  | 'doubtful'
  /** One of the two reads carried no mark. */
  | 'unknown';

/** This sidecar's own connections to the admin port, numbered as their sockets are created (EnvoyAdminClient). */
export interface OwnConnections {
  /** How many sockets have been created so far. */
  connectionMarker(): number;
  /** How many sockets created after `marker` the admin port has answered on so far. */
  connectedSince(marker: number): number;
}

/**
 * Whether marks have been seen to follow this sidecar's own connections at this admin address: once two reads of
 * one process showed at least the growth expected, a smaller growth can only be another process. Until then it
 * may be the address: a proxy in front of Envoy's admin API (Contour's read-only 127.0.0.1:9001) keeps its own
 * pooled connections upstream, so Envoy's counter does not grow with ours, and every read would look like a new
 * Envoy. One per sidecar, shared by every trail.
 */
export class MarkTrust {
  verified = false;
}

/**
 * Compares two reads, `earlier` answered before `later` was sent; `minGrowth`: the connections the process
 * answering `earlier` must have accepted since, if it answered `later` too (at least 1: the later read's own).
 * A counter that went down is another process whatever the trust; one that grew too little is, once verified.
 */
export function compareProcess(earlier: ProcessMark, later: ProcessMark, minGrowth = 1, verified = true): ProcessVerdict {
  if (earlier === null || later === null) return 'unknown';
  if (later < earlier) return 'replaced';
  if (later - earlier >= minGrowth) return 'same';
  return verified ? 'replaced' : 'doubtful';
}

/** A read that carried a mark, and this sidecar's connection marker when its answer arrived. */
export interface MarkedRead {
  readonly mark: ProcessMark;
  readonly marker: number;
}

/** Taken right before a read is sent: the reads it will be compared with, and the growth it must show since each. */
export interface Expectation {
  readonly base: MarkedRead | undefined;
  readonly growth: number;
  /** The first doubtful read since `base`, if any (see ProcessTrail), and the growth expected since it. */
  readonly doubt?: { readonly read: MarkedRead; readonly growth: number };
}

/**
 * The process a series of reads follows: `expect()` right before each read is sent, then `observe()` with
 * its mark once answered. The drain follows the process it pins; the supervisor follows whatever runs.
 *
 * A doubtful read (too little growth while marks are unproven at this address) is kept: if a later read grows
 * from it as our connections say it must, marks do follow them here, so the doubtful read was another process
 * already ('replaced'); if not, the doubt stays for good (a proxy, most likely) and no count ends a drain.
 */
export class ProcessTrail {
  private last: MarkedRead | undefined;
  private doubt: MarkedRead | undefined;

  constructor(
    private readonly own: OwnConnections,
    readonly trust: MarkTrust,
    start?: MarkedRead,
  ) {
    this.last = start;
  }

  /** The last read of the process followed; undefined before the first. */
  get latest(): MarkedRead | undefined {
    return this.last;
  }

  expect(): Expectation {
    const base = this.last;
    const doubt = this.doubt;
    return {
      base,
      growth: base === undefined ? 1 : this.own.connectedSince(base.marker) + 1,
      ...(doubt === undefined ? {} : { doubt: { read: doubt, growth: this.own.connectedSince(doubt.marker) + 1 } }),
    };
  }

  /**
   * After the read answered: its verdict against the reads it was expected from ('first' when there was none).
   * A replaced or doubtful process is not followed; an older read answered late never takes a newer one's place.
   */
  observe(mark: ProcessMark, expected: Expectation): ProcessVerdict | 'first' {
    const read: MarkedRead = { mark, marker: this.own.connectionMarker() };
    const newest = this.last === undefined || read.marker >= this.last.marker;
    if (expected.base === undefined) {
      if (newest) this.last = read;
      return 'first';
    }
    if (expected.doubt !== undefined) {
      if (compareProcess(expected.doubt.read.mark, mark, expected.doubt.growth, true) !== 'same') return 'doubtful';
      this.trust.verified = true;
      return 'replaced';
    }
    const verdict = compareProcess(expected.base.mark, mark, expected.growth, this.trust.verified);
    if (verdict === 'same') this.trust.verified = true;
    if (verdict === 'doubtful') this.doubt ??= read;
    if ((verdict === 'same' || verdict === 'unknown') && mark !== null && newest) this.last = read;
    return verdict;
  }
}
