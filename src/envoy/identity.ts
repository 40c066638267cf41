/**
 * Which Envoy process answered: the one a drain is pinned to, or another one that took its admin port.
 *
 * The mark is `listener.admin.downstream_cx_total`, read in the same answer as the connection counts (see
 * CONNECTION_STATS_FILTER), so that a count and the process it belongs to can never come from two processes.
 * A counter only grows within one process and starts again at 0 in a new one, and every admin call of ours
 * opens a connection of its own (no keep-alive): between two of our reads of one process, the later one sees
 * a strictly larger value. Equal or smaller means another process.
 *
 * Why not `/server_info`'s `uptime_current_epoch`: Envoy computes it from its wall clock, so a step of the
 * node's clock moves it as a restart would (backwards even below zero), and a drain that took a clock step
 * for a new Envoy would say "drained" while the old one still holds its connections. Uptimes still serve
 * where a wrong guess costs nothing (re-arming, the journal: see supervisor.ts and recovery.ts).
 *
 * The one way to fool the mark: a new process whose admin listener took more connections before our first
 * read of it than the old one had taken in its whole life up to our last read. Our own reads of the old one
 * (one every check-interval) make that a race the new process loses by seconds.
 */

/** A process's mark at one read; null when Envoy did not report the counter (then nothing can be told). */
export type ProcessMark = number | null;

export type ProcessVerdict =
  /** The process that gave `earlier` answered again. */
  | 'same'
  /** Another process answered: the one that gave `earlier` has exited. */
  | 'replaced'
  /** One of the two reads carried no mark. */
  | 'unknown';

/**
 * Compares two reads, `earlier` answered before `later` was sent (reads that overlap in time may be accepted
 * in either order and must not be compared).
 */
export function compareProcess(earlier: ProcessMark, later: ProcessMark): ProcessVerdict {
  if (earlier === null || later === null) return 'unknown';
  return later > earlier ? 'same' : 'replaced';
}
