/** A SidecarLog that keeps its lines, for assertions on what was logged. */
import type { SidecarLog } from '../../src/sidecar/log.js';

export class MemoryLog implements SidecarLog {
  readonly lines: { level: string; fields: Record<string, unknown>; message: string }[] = [];
  info(fields: object, message: string): void {
    this.lines.push({ level: 'info', fields: fields as Record<string, unknown>, message });
  }
  warn(fields: object, message: string): void {
    this.lines.push({ level: 'warn', fields: fields as Record<string, unknown>, message });
  }
  error(fields: object, message: string): void {
    this.lines.push({ level: 'error', fields: fields as Record<string, unknown>, message });
  }
  events(name: string): Record<string, unknown>[] {
    return this.lines.filter((line) => line.fields['event'] === name).map((line) => line.fields);
  }
}
