/**
 * One log format for every mode: JSON lines with ISO times and level names, as log pipelines expect. The
 * webhook logs through pino (Fastify's logger); the sidecar writes the same lines with src/sidecar/json-log.ts,
 * which test/sidecar/json-log.test.ts holds to these options.
 */
import { pino, type Logger, type LoggerOptions } from 'pino';

export type LogComponent = 'webhook' | 'shutdown-manager';

export function loggerOptions(level: string, component: LogComponent): LoggerOptions {
  return {
    level,
    base: { component },
    timestamp: isoTime,
    formatters: { level: (label) => ({ level: label }) },
  };
}

/**
 * pino.stdTimeFunctions.isoTime, the same text, formatted once per millisecond: Date#toISOString was a quarter of the
 * webhook's time per log line, and under load many lines fall in the same millisecond.
 */
let formattedAt = Number.NaN;
let formatted = '';
function isoTime(): string {
  const now = Date.now();
  if (now !== formattedAt) {
    formattedAt = now;
    formatted = `,"time":"${new Date(now).toISOString()}"`;
  }
  return formatted;
}

export function createLogger(level: string, component: LogComponent): Logger {
  return pino(loggerOptions(level, component));
}
