/**
 * The sidecar's logger: the JSON lines that pino writes for the webhook (src/logging.ts), byte for byte,
 * without pino. The sidecar runs in every Envoy pod and logs a few lines per drain; pino, its stream and its
 * worker-thread support cost it about 7 MiB of memory and a tenth of its start-up. Same line format:
 *
 *   {"level":"info","time":"2025-01-01T00:00:00.000Z","component":"shutdown-manager",<fields>,"msg":"<message>"}
 *
 * Fields are written as pino writes them: own enumerable keys in order, undefined and functions left out,
 * numbers that are not finite as null, strings escaped by pino's own rules (ported below), everything else
 * by JSON.stringify. The sidecar logs plain data only: no Error under `err` (pino would apply its error
 * serializer) and nothing circular. test/sidecar/json-log.test.ts compares the lines with pino's.
 */
import type { SidecarLog } from './log.js';

/** pino's level numbers: a line is written when its level is at or above the logger's. */
const LEVEL_VALUES: Readonly<Record<string, number>> = {
  trace: 10,
  debug: 20,
  info: 30,
  warn: 40,
  error: 50,
  fatal: 60,
  silent: Number.POSITIVE_INFINITY,
};

export interface JsonLogOptions {
  /** Where each line goes, newline included. Default: stdout. */
  readonly write?: (line: string) => void;
  /** Milliseconds since the epoch, for the time field. Default: Date.now. */
  readonly now?: () => number;
}

export function createJsonLog(level: string, component: string, options: JsonLogOptions = {}): SidecarLog {
  if (!Object.hasOwn(LEVEL_VALUES, level)) throw new Error(`unknown log level ${JSON.stringify(level)}`);
  const threshold = LEVEL_VALUES[level] as number;
  const write = options.write ?? writeToStdout();
  const now = options.now ?? Date.now;
  const bindings = `,"component":${asString(component)}`;
  const method =
    (label: 'info' | 'warn' | 'error') =>
    (fields: object, message: string): void => {
      if ((LEVEL_VALUES[label] as number) < threshold) return;
      const time = new Date(now()).toISOString();
      write(`{"level":"${label}","time":"${time}"${bindings}${properties(fields)},"msg":${asString(message)}}\n`);
    };
  return { info: method('info'), warn: method('warn'), error: method('error') };
}

/**
 * Synchronous on Linux for the pipe a container runtime reads and for files, so that nothing logged is lost
 * when the process exits right after. Like pino, a reader that went away (EPIPE) only ends the logging.
 */
function writeToStdout(): (line: string) => void {
  let broken = false;
  process.stdout.on('error', (error: NodeJS.ErrnoException) => {
    if (error.code !== 'EPIPE') throw error;
    broken = true;
  });
  return (line) => {
    if (!broken) process.stdout.write(line);
  };
}

/** pino's `_asJson` loop, for a logger without serializers, formatters or stringifiers of its own. */
function properties(fields: object): string {
  let text = '';
  for (const key in fields) {
    if (!Object.prototype.hasOwnProperty.call(fields, key)) continue;
    const json = valueJson((fields as Record<string, unknown>)[key]);
    if (json !== undefined) text += `,${asString(key)}:${json}`;
  }
  return text;
}

function valueJson(value: unknown): string | undefined {
  switch (typeof value) {
    case 'undefined':
    case 'function':
      return undefined;
    case 'number':
      return Number.isFinite(value) ? String(value) : 'null';
    case 'boolean':
      return String(value);
    case 'string':
      return asString(value);
    default:
      // Objects, arrays and null; a symbol gives undefined and is left out, as pino leaves it.
      try {
        return JSON.stringify(value);
      } catch {
        return '"[unable to serialize]"';
      }
  }
}

const NODE_MAJOR = Number(process.versions.node.split('.')[0]);

/**
 * pino's string escaping (lib/tools.js `_asString`, used before Node 25): short strings without control
 * characters have only `"` and `\` escaped, everything else goes through JSON.stringify. From Node 25 on pino
 * uses JSON.stringify for all; the two differ only for a lone surrogate in a short string.
 */
const asString: (text: string) => string = NODE_MAJOR >= 25 ? (text) => JSON.stringify(text) : pinoAsString;

function pinoAsString(text: string): string {
  if (text.length > 100) return JSON.stringify(text);
  let result = '';
  let last = 0;
  let found = false;
  let point = 255;
  for (let i = 0; i < text.length && point >= 32; i += 1) {
    point = text.charCodeAt(i);
    if (point === 34 || point === 92) {
      result += `${text.slice(last, i)}\\`;
      last = i;
      found = true;
    }
  }
  result = found ? result + text.slice(last) : text;
  return point < 32 ? JSON.stringify(text) : `"${result}"`;
}
