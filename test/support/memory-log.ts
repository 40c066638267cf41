/**
 * A log that keeps its lines, for assertions on what was logged: the sidecar's SidecarLog directly, and
 * the webhook's pino loggers through pino().
 */
import pino, { type Logger } from 'pino';
import type { SidecarLog } from '../../src/sidecar/log.js';

export interface MemoryLogLine {
  readonly level: string;
  readonly fields: Record<string, unknown>;
  readonly message: string;
  /** When it was logged: Date.now(), or the clock given to the log. */
  readonly at: number;
}

export class MemoryLog implements SidecarLog {
  readonly lines: MemoryLogLine[] = [];

  /** `now`: stamps each line (default Date.now; a monotonic clock to line the log up with other monotonic stamps). */
  constructor(private readonly now: () => number = Date.now) {}

  info(fields: object, message: string): void {
    this.push('info', fields, message);
  }

  warn(fields: object, message: string): void {
    this.push('warn', fields, message);
  }

  error(fields: object, message: string): void {
    this.push('error', fields, message);
  }

  events(name: string): Record<string, unknown>[] {
    return this.lines.filter((line) => line.fields['event'] === name).map((line) => line.fields);
  }

  /** A pino logger (every level from debug) whose lines land here, serialized as pino writes them. */
  pino(): Logger {
    return pino({ level: 'debug' }, {
      write: (text: string) => {
        const { level, msg, ...fields } = JSON.parse(text) as Record<string, unknown>;
        this.push(pino.levels.labels[Number(level)] ?? String(level), fields, String(msg));
      },
    });
  }

  private push(level: string, fields: object, message: string): void {
    this.lines.push({ level, fields: fields as Record<string, unknown>, message, at: this.now() });
  }
}
