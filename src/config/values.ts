/** The kinds of value a setting can hold, each with the form a user is told to write when a value is wrong. */
import { DURATION_FORM, formatDuration, parseDuration } from './duration.js';

export interface ValueKind<T> {
  /** How a valid value looks, for error messages: "a port number from 1 to 65535". */
  readonly form: string;
  /** The value, or undefined when `raw` is not of this kind. */
  parse(raw: string): T | undefined;
  /** The canonical spelling, used in --help and when passing a value on as a flag. */
  format(value: T): string;
}

const INTEGER = /^\d+$/;

function integerIn(min: number, max: number, form: string): ValueKind<number> {
  return {
    form,
    parse(raw) {
      const text = raw.trim();
      if (!INTEGER.test(text)) return undefined;
      const value = Number(text);
      return value >= min && value <= max ? value : undefined;
    },
    format: String,
  };
}

/**
 * Node timers overflow past 2^31-1 ms (about 24.8 days) and then fire at once: a day is far more than any
 * drain needs, and keeps every duration safely below that.
 */
export const MAX_DURATION_MS = 24 * 3_600_000;

function durationBetween(minMs: number, form: string): ValueKind<number> {
  return {
    form,
    parse: (raw) => {
      const ms = parseDuration(raw);
      return ms !== undefined && ms >= minMs && ms <= MAX_DURATION_MS ? ms : undefined;
    },
    format: formatDuration,
  };
}

export const durationMs = durationBetween(0, `${DURATION_FORM}, at most 24h`);

/** A duration that must be longer than zero (a poll interval of 0 would spin). */
export const positiveDurationMs = durationBetween(1, `${DURATION_FORM}, greater than zero and at most 24h`);

export const connectionCount = integerIn(0, 1_000_000_000, 'a whole number of connections, 0 or more');

/** A count of retries or attempts: at least one, or the setting would mean nothing. */
export const attempts = integerIn(1, 100, 'a whole number from 1 to 100');

export const port = integerIn(1, 65535, 'a port number from 1 to 65535');

/** A port to listen on; 0 asks the system for a free one (tests, local runs). */
export const listenPort = integerIn(0, 65535, 'a port number from 0 to 65535 (0 picks a free port)');

export const byteSize = integerIn(1024, 64 * 1024 * 1024, 'a number of bytes from 1024 to 67108864');

/** Kubernetes' terminationGracePeriodSeconds: whole seconds, or a duration that is a whole number of seconds. */
export const gracePeriodSeconds: ValueKind<number> = {
  form: 'whole seconds from 2 to 86400, such as 300, or a duration such as 5m',
  parse(raw) {
    const text = raw.trim();
    const seconds = INTEGER.test(text) ? Number(text) : (parseDuration(text) ?? NaN) / 1000;
    return Number.isInteger(seconds) && seconds >= 2 && seconds <= 86_400 ? seconds : undefined;
  },
  format: String,
};

export const text: ValueKind<string> = {
  form: 'a non-empty string',
  parse: (raw) => (raw.trim() === '' ? undefined : raw.trim()),
  format: (value) => value,
};

/** An address to listen on; empty means every interface, both IP families. */
export const listenAddress: ValueKind<string> = {
  form: 'an IP address or host name, or empty for every interface (IPv4 and IPv6)',
  parse: (raw) => raw.trim(),
  format: (value) => value,
};

/** An absolute directory path, or empty for "none". */
export const optionalDirectory: ValueKind<string> = {
  form: 'an absolute directory path, or empty for none',
  parse: (raw) => {
    const path = raw.trim();
    return path === '' || path.startsWith('/') ? path : undefined;
  },
  format: (value) => value,
};

export const boolean: ValueKind<boolean> = {
  form: '"true" or "false"',
  parse: (raw) => ({ true: true, false: false })[raw.trim().toLowerCase() as 'true' | 'false'],
  format: String,
};

/** A comma-separated list of names; empty means "none given". */
export const nameList: ValueKind<readonly string[]> = {
  form: 'a comma-separated list of names',
  parse: (raw) =>
    raw
      .split(',')
      .map((name) => name.trim())
      .filter((name) => name !== ''),
  format: (names) => names.join(','),
};

export function oneOf<T extends string>(...choices: T[]): ValueKind<T> {
  return {
    form: `one of ${choices.join(', ')}`,
    parse: (raw) => choices.find((choice) => choice === raw.trim()),
    format: (value) => value,
  };
}
