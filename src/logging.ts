/** One log format for every mode: JSON lines with ISO times and level names, as log pipelines expect. */
import { pino, type Logger } from 'pino';

export function createLogger(level: string, component: 'webhook' | 'shutdown-manager'): Logger {
  return pino({
    level,
    base: { component },
    timestamp: pino.stdTimeFunctions.isoTime,
    formatters: { level: (label) => ({ level: label }) },
  });
}
