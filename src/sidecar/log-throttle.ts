/**
 * Lines that must not flood the log, written once for the whole sidecar. Three shapes, each named for what it
 * promises; the lines themselves (event, fields, message) stay with the code that knows what happened.
 *
 * - LogThrottle: a burst of events (connections closed by the server's guard, /shutdown refused for want of
 *   the token) logged at once, then as one summary per period while it goes on, and a last summary at stop.
 *   On Node's timers: a summary comes at the period's end even if no event follows.
 * - RateLimit: at most one line per period, by key, on the sidecar's clock, with the count of events since the
 *   key's last line (a failing admin call in the drain, the supervisor's watch, the start-up probe). Nothing is
 *   scheduled: the line comes with the first event after the period.
 * - Once, OnChange: a line once only (by key), or once per value of what it reports.
 */
import type { Clock } from '../clock.js';

/**
 * Logs a burst of events without flooding the log: the first event at once, then at most one summary per
 * period while events go on. A period without events ends the burst: the next event is logged at once again.
 */
export class LogThrottle {
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;

  /** `flush` logs what was noted since its last line, and says whether there was anything. */
  constructor(
    private readonly periodMs: number,
    private readonly flush: () => boolean,
  ) {}

  noted(): void {
    if (this.timer === undefined) this.tick();
  }

  /** Logs what is still unreported; later events are logged one by one (the server is closing). */
  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
    this.timer = undefined;
    this.flush();
  }

  private tick(): void {
    this.timer = undefined;
    if (!this.flush() || this.stopped) return;
    // Unref'd: a summary still due holds neither close() nor the process's exit (stop() logs it).
    this.timer = setTimeout(() => this.tick(), this.periodMs);
    this.timer.unref();
  }
}

/**
 * At most one line per `periodMs` for each key: a key's first event is logged at once, later ones only once
 * `periodMs` has passed since its last line; the events in between are counted, for that line to say.
 */
export class RateLimit {
  private readonly lines = new Map<string, { atMs: number; events: number }>();

  constructor(
    private readonly periodMs: number,
    private readonly clock: Pick<Clock, 'now'>,
  ) {}

  /** Whether a line was logged for any key (since its reset). */
  get any(): boolean {
    return this.lines.size > 0;
  }

  /**
   * An event of `key`. When a line is due now: the events of `key` since its last line, this one included (the
   * line is then taken as logged); undefined when the line must wait.
   */
  note(key = ''): number | undefined {
    const now = this.clock.now();
    const last = this.lines.get(key);
    const events = (last?.events ?? 0) + 1;
    if (last !== undefined && now - last.atMs < this.periodMs) {
      last.events = events;
      return undefined;
    }
    this.lines.set(key, { atMs: now, events: 0 });
    return events;
  }

  /** Ends `key`'s run (what it reported is over): its next event is logged at once. Its events since its last line; undefined when it had no line. */
  reset(key = ''): number | undefined {
    const last = this.lines.get(key);
    this.lines.delete(key);
    return last?.events;
  }
}

/** Once-only lines: `first(key)` is true at the first call for `key`, false ever after. */
export class Once<Key extends string = string> {
  private readonly done = new Set<Key>();

  first(key: Key): boolean {
    if (this.done.has(key)) return false;
    this.done.add(key);
    return true;
  }
}

/** A line once per value of what it reports: `changed(value)` is true when `value` is not the last one seen (at first, `initial`). */
export class OnChange {
  constructor(private last = '') {}

  changed(value: string): boolean {
    if (value === this.last) return false;
    this.last = value;
    return true;
  }
}
