/**
 * Which Envoy process answered a read: the one a drain is pinned to, or another that took its admin port. Pure rules
 * over two kinds of evidence, the mark (docs/glossary.md#mark: the admin listener's connection counter, read in the
 * same answer as the counts) and the witness (docs/glossary.md#witness: a connection only its process holds).
 *
 * The rule: a count ends a drain only when it is linked to the pinned process by the witness or by a mark that grew
 * as our connections say; the pinned process is taken as gone only when the witness it held was closed by the other
 * end, and then no later read is its own, whatever its counter. Why, and what it cannot see:
 * docs/design.md#the-evidence-the-mark-and-the-witness, #trails-trust-and-verdicts and #what-it-cannot-see.
 */

/** A process's mark at one read; null when Envoy did not report the counter (then nothing can be told). */
export type ProcessMark = number | null;

export type ProcessVerdict =
  /** The process that gave the earlier read answered again. */
  | 'same'
  /**
   * The process that gave the earlier read answered again (the witness stayed open across both), and its counter
   * did not grow as our connections say it must: its counters were reset. Its count is its own.
   */
  | 'reset'
  /** Another process answered: the one that gave the earlier read has exited. */
  | 'replaced'
  /**
   * The counter grew, but less than our own connections, before marks have proved to follow them at this
   * address (MarkTrust): another process, or a proxy in front of Envoy. Its count must not end a drain.
   */
  | 'doubtful'
  /** One of the two reads carried no mark, and no witness links them: its count must not end a drain. */
  | 'unknown';

/** What the witness connection showed of a read (WitnessEvidence in admin-client.ts, restated to keep this module pure). */
export interface ReadEvidence {
  /**
   * The witness open throughout the read, at an address unchanged since it connected, and held by the process that
   * answered it (`witnessVouches`); null when none was.
   */
  readonly witness: number | null;
  /** Every witness numbered up to this one has been closed by the other end. */
  readonly closedThrough: number;
  /** How many witnesses had been created when the read was answered (numbered from 1). */
  readonly created?: number;
  /** How many had been created when it was sent: 0 while witnesses were not kept yet (the client's first reads). */
  readonly createdAtSend?: number;
  /** `server.hot_restart_epoch` in the read's answer; null or undefined when unknown. */
  readonly restartEpoch?: number | null;
  /** The latest witnesses closed by the other end, with the restart epoch of the process that held each (see letGoOfUs). */
  readonly closed?: readonly ClosedWitness[];
}

/**
 * The restart epoch of the process that holds a witness: a number, null when that process's stats carry none (a
 * stats_matcher), or 'ambiguous' when a hot restart may have handed the admin address on while the witness connected.
 */
export type HolderEpoch = number | null | 'ambiguous';

/** A witness closed by the other end, and the epoch of the process that held it (undefined: never settled by a read). */
export interface ClosedWitness {
  readonly id: number;
  readonly holder: HolderEpoch | undefined;
}

/**
 * Which process a witness connected to, from the reads around its connect: `before`, the epoch of the newest read
 * answered before it was created (undefined: none); `after`, the epoch of the first read sent once it was open.
 * The admin address passes only to a higher epoch while the process holding it lives (a hot restart child), and a
 * new epoch 0 only once it has exited (and closed the witness). So the holder's epoch lies between the two: it is
 * known when they agree, or when the later one is 0; otherwise a hot restart may have passed the address on between
 * them, and the witness is held by the parent or the child: 'ambiguous'. Both without the gauge: null, the blind
 * case the drain handles as a possible hot restart (drain.ts resendStepsAfterBlindReset).
 */
export function holderEpochOf(before: number | null | undefined, after: number | null): HolderEpoch {
  if (after === 0 || before === after) return after;
  if (before === undefined && after === null) return null;
  return 'ambiguous';
}

/**
 * Whether a witness held by a process of epoch `holder` speaks for a read of epoch `epoch`: only when they are the
 * same. A read of another epoch is of another process (a hot restart child while its parent holds the witness,
 * issue 38), and so is a read whose stats carry the gauge where the holder's did not, or the reverse: a process's
 * stats_matcher is bootstrap config, fixed for its life.
 */
export function witnessVouches(holder: HolderEpoch, epoch: number | null): boolean {
  return holder !== 'ambiguous' && holder === epoch;
}

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
  /** The witness open throughout this read (null: none); undefined from a target that keeps no witness. */
  readonly witness?: number | null;
  /** How many witnesses had been created when it was answered: one created later connected after it. */
  readonly witnessesCreated?: number;
  /** How many had been created when it was sent (ReadEvidence.createdAtSend). */
  readonly witnessesAtSend?: number;
  /** `server.hot_restart_epoch` in its answer; null when the answer lacked it, undefined when not known. */
  readonly restartEpoch?: number | null;
}

/** A read as a trail keeps it, with what the witness showed (nothing, from a target that keeps none). */
export function markedRead(mark: ProcessMark, marker: number, evidence: ReadEvidence | undefined): MarkedRead {
  if (evidence === undefined) return { mark, marker };
  const epoch = evidence.restartEpoch === undefined ? {} : { restartEpoch: evidence.restartEpoch };
  const atSend = evidence.createdAtSend === undefined ? {} : { witnessesAtSend: evidence.createdAtSend };
  return { mark, marker, witness: evidence.witness, ...(evidence.created === undefined ? {} : { witnessesCreated: evidence.created }), ...atSend, ...epoch };
}

/**
 * Whether a read of restart epoch `later` is of a hot restart child of the process whose read had `earlier` (null:
 * that answer lacked the gauge; undefined: not known): a higher epoch, or one above 0 where the earlier answer had
 * none. A process's stats_matcher is bootstrap config, fixed for its life, so a gauge that appears is another
 * process's; an epoch above 0 is a hot restart's.
 */
export function isHotRestartChild(earlier: number | null | undefined, later: number | null | undefined): boolean {
  if (typeof later !== 'number') return false;
  if (typeof earlier === 'number') return later > earlier;
  return earlier === null && later > 0;
}

/** Whether two reads' restart epochs (undefined: not known) differ: then they are of two processes. */
export function epochChanged(earlier: number | null | undefined, later: number | null | undefined): boolean {
  return earlier !== undefined && later !== undefined && earlier !== later;
}

/**
 * Whether a mark that did not grow as expected may be taken for another process: only once the process of the
 * earlier read has closed the witness it held then (docs/design.md#trails-trust-and-verdicts). `undefined` evidence (no witness kept at
 * all): the counter alone decides, as before witnesses.
 */
export function letGoOfUs(earlier: MarkedRead, evidence: ReadEvidence | undefined): boolean {
  if (evidence === undefined || earlier.witness === undefined) return true;
  // The witness that spoke for the earlier read is held by its process: closed by the other end, that process exited.
  if (earlier.witness !== null) return evidence.closedThrough >= earlier.witness;
  // No witness spoke for the earlier read: one created after it was answered, held by a process of the same epoch,
  // and closed since. That process held the admin address after the earlier read with the earlier one's epoch: the
  // same process (an epoch passes to a child, never back), or one of a new chain, which the earlier one had to exit
  // to let bind. A witness held by a hot restart's parent or child of another epoch proves nothing of it (issue 38).
  const createdBefore = earlier.witnessesCreated;
  if (createdBefore === undefined) return false;
  const epoch = earlier.restartEpoch ?? null;
  return (evidence.closed ?? []).some((witness) => witness.id > createdBefore && witness.holder !== undefined && witnessVouches(witness.holder, epoch));
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
   * After the read answered: its verdict against the reads it was expected from ('first' when there was none),
   * and `evidence`, what the witness connection showed (undefined for a target without one).
   * A replaced or doubtful process is not followed; an older read answered late never takes a newer one's place.
   */
  observe(mark: ProcessMark, expected: Expectation, evidence?: ReadEvidence): ProcessVerdict | 'first' {
    const read = markedRead(mark, this.own.connectionMarker(), evidence);
    const newest = this.last === undefined || read.marker >= this.last.marker;
    const base = expected.base;
    if (base === undefined) {
      if (newest) this.last = read;
      return 'first';
    }
    // A hot restart child: its parent, which gave the earlier read, holds the witness, which proves nothing of it.
    if (isHotRestartChild(base.restartEpoch, evidence?.restartEpoch)) return 'replaced';
    // Any other change of the restart epoch (a lower one: a new chain of processes; the gauge gone or come) is another
    // process too, whatever the counter says: a young process replaced by one whose counter outgrew its own passed
    // for it on the counter alone (FUZZ_SEED=210). Replaced on the witness's evidence, else a doubt.
    if (epochChanged(base.restartEpoch, evidence?.restartEpoch)) {
      if (letGoOfUs(base, evidence)) return 'replaced';
      this.doubt ??= read;
      return 'doubtful';
    }
    // The connection first: the same witness open across both reads is the same process, whatever the counter.
    // Only where marks proved to follow our connections (the address is Envoy's own admin listener, where a
    // connection ends at Envoy itself), or where there are no marks to go by.
    const linked = evidence !== undefined && base.witness !== undefined && base.witness !== null && evidence.witness === base.witness;
    const unmarked = mark === null || base.mark === null;
    if (linked && (unmarked || this.trust.verified)) {
      const grew = !unmarked && compareProcess(base.mark, mark, expected.growth, true) === 'same';
      const verdict = unmarked || grew ? 'same' : 'reset';
      this.doubt = undefined;
      if (newest) this.last = read;
      return verdict;
    }
    // The witness that spoke for the earlier read was closed by the other end: that process exited, and no counter
    // makes a later read its own (a young successor's counter can outgrow a young predecessor's: FUZZ_SEED=404). Only
    // where marks proved the witness ends at Envoy itself: without marks, a proxy's idle close would pass for an exit,
    // and the reads stay 'unknown' below.
    if (!unmarked && base.witness !== undefined && base.witness !== null && letGoOfUs(base, evidence)) {
      if (this.trust.verified) return 'replaced';
      this.doubt ??= read;
      return 'doubtful';
    }
    if (expected.doubt !== undefined) {
      if (compareProcess(expected.doubt.read.mark, mark, expected.doubt.growth, true) !== 'same') return 'doubtful';
      this.trust.verified = true;
      return letGoOfUs(base, evidence) ? 'replaced' : 'doubtful';
    }
    // A counter that appears where the earlier answer had none, or the reverse, is another process's: a stats_matcher
    // is bootstrap config, fixed for a process's life (as for the restart epoch: isHotRestartChild). Taken for the same
    // one, its reads would pass for the pinned process's (FUZZ_SEED=107 at the brisk pace).
    if ((base.mark === null) !== (mark === null)) {
      if (letGoOfUs(base, evidence)) return 'replaced';
      this.doubt ??= mark === null ? undefined : read;
      return 'doubtful';
    }
    const verdict = compareProcess(base.mark, mark, expected.growth, this.trust.verified);
    // Witnesses were kept already, yet none spoke for the earlier read while one speaks for this one (the earlier read's
    // process was not the one holding ours: a Unix socket path bound again by another Envoy, a process that had just
    // exited): only the counter ties them, and a successor's can pass for a young or reset predecessor's
    // (FUZZ_SEED=707). Not when the earlier read was sent before any witness (the client's first reads, racing the
    // start-up probe that begins them): nothing was amiss then. A restart epoch above 0 ties them instead (only a hot
    // restart chain reaches it; a change is caught above).
    const witnessesKeptAtBase = (base.witnessesAtSend ?? 0) > 0;
    if (verdict === 'same' && evidence !== undefined && witnessesKeptAtBase && base.witness === null && evidence.witness !== null && !((base.restartEpoch ?? 0) > 0)) {
      this.doubt ??= read;
      return 'doubtful';
    }
    if (verdict === 'same') this.trust.verified = true;
    if (verdict === 'replaced' && !letGoOfUs(base, evidence)) {
      // Another process, or this one reset: with the witness still held (or never held), nothing says it went.
      this.doubt ??= read;
      return 'doubtful';
    }
    if (verdict === 'doubtful') this.doubt ??= read;
    // Only a read tied to the process followed is followed: an unknown one (neither read marked, no witness across
    // them) says nothing of which process gave it.
    if (verdict === 'same' && newest) this.last = read;
    return verdict;
  }
}
