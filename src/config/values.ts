/** The kinds of value a setting can hold, each with the form a user is told to write when a value is wrong. */
import { DURATION_FORM, formatDuration, parseDuration } from './duration.js';
import { formatLabelSelector, LABEL_SELECTOR_FORM, labelSelectorProblem, parseLabelSelector, type LabelSelector } from './label-selector.js';
import { isMultipleOf, isZero, parseQuantity, QuantityError, type Quantity } from './quantity.js';

export interface ValueKind<T> {
  /** How a valid value looks, for error messages: "a port number from 1 to 65535". */
  readonly form: string;
  /** The value, or undefined when `raw` is not of this kind. */
  parse(raw: string): T | undefined;
  /** The canonical spelling, used in --help and when passing a value on as a flag. */
  format(value: T): string;
  /**
   * For kinds whose form alone does not tell what went wrong (a selector, a quantity): why `raw` is not of
   * this kind, added to the error message after the form.
   */
  problem?(raw: string): string | undefined;
}

/** "expected <form>", with the kind's own account of what is wrong when it has one. */
export function expectedForm(kind: Pick<ValueKind<unknown>, 'form' | 'problem'>, raw: string): string {
  const problem = kind.problem?.(raw);
  return problem === undefined ? kind.form : `${kind.form}, but ${problem}`;
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

/** The words that turn an optional duration off; an empty value does too. */
const OFF_WORDS = new Set(['', 'off']);

/**
 * A duration, or "off" (or empty) for none: `null`. For settings whose absence keeps a behaviour rather than
 * setting a length, where 0 would be a real, different value (end at once).
 */
export const optionalDurationMs: ValueKind<number | null> = {
  form: `${DURATION_FORM}, at most 24h, or "off" (or empty) for none`,
  parse: (raw) => (OFF_WORDS.has(raw.trim().toLowerCase()) ? null : durationMs.parse(raw)),
  format: (value) => (value === null ? 'off' : durationMs.format(value)),
  problem: (raw) => (/^\d+(?:\.\d+)?$/.test(raw.trim()) && raw.trim() !== '0' ? 'a number alone has no unit: write 30s or 5m, say' : undefined),
};

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

/**
 * node:net as CommonJS loads it (the http client loads it anyway), not by an ESM import that would read every
 * export: see src/envoy/admin-client.ts on what that cost the sidecar's memory with node:http.
 */
const { isIP } = process.getBuiltinModule('node:net');

/** A DNS host name (RFC 1123 labels, optional final dot); a last label of digits only is an IPv4 look-alike. */
const HOST_NAME = /^(?=.{1,253}\.?$)(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.?$/;
const DIGITS_LAST_LABEL = /(?:^|\.)\d+\.?$/;
const HOST_AND_PORT = /^[^:]*:(\d+)$/;

/**
 * The longest Unix socket path Linux connects to: `sun_path` holds 108 bytes with the final NUL (unix(7)).
 * Node passes a longer one to the kernel, which refuses it with an error that does not name the path.
 */
export const MAX_SOCKET_PATH_BYTES = 107;

/** The prefix of a Unix socket admin address, in its canonical spelling `unix:/admin/admin.sock`. */
export const UNIX_ADDRESS_PREFIX = 'unix:';

/**
 * The socket path of `raw` when it is written as one (`unix:/p`, `unix:///p`, or a bare `/p` as Contour's
 * `contour bootstrap --admin-address` writes it); undefined when it is not written as a path at all.
 */
function writtenSocketPath(raw: string): string | undefined {
  if (raw.startsWith('/')) return raw;
  if (!raw.toLowerCase().startsWith(UNIX_ADDRESS_PREFIX)) return undefined;
  const rest = raw.slice(UNIX_ADDRESS_PREFIX.length);
  return rest.startsWith('///') ? rest.slice(2) : rest;
}

/** Why `path` (as written after `unix:`) is not a socket path the sidecar can connect to. */
function socketPathProblem(path: string): string | undefined {
  if (path.startsWith('//')) return 'it names a host after "unix://": write unix:/path/to/admin.sock (or unix:///path/to/admin.sock)';
  if (path.startsWith('@')) return 'it is an abstract socket name, which the sidecar does not support: give Envoy a socket file (admin.address.pipe.path) in a volume both containers mount';
  if (!path.startsWith('/')) return 'a socket path must be absolute (relative to what? each container has its own working directory): write unix:/path/to/admin.sock';
  // eslint-disable-next-line no-control-regex -- control characters are what it looks for
  if (/[\s\u0000-\u001f]/.test(path)) return 'the socket path contains whitespace or a control character';
  if (path.endsWith('/')) return 'the socket path ends with "/": name the socket file itself';
  if (path.split('/').some((segment) => segment === '.' || segment === '..')) return 'the socket path has "." or ".." segments: write it as Envoy names it, without them';
  if (Buffer.byteLength(path) > MAX_SOCKET_PATH_BYTES) return `the socket path is ${Buffer.byteLength(path)} bytes long, and Linux connects only to paths of at most ${MAX_SOCKET_PATH_BYTES}`;
  return undefined;
}

/** Why `raw` is not an admin address, or undefined when it is one. Most specific first: a URL says "URL". */
function adminAddressProblem(raw: string): string | undefined {
  const address = raw.trim();
  if (address === '') return 'it is empty';
  const path = writtenSocketPath(address);
  if (path !== undefined) return socketPathProblem(path);
  if (address.includes('://')) return 'it is a URL: give the host alone here and the port in --admin-port (or unix:/path for a Unix socket)';
  if (/\s/.test(address)) return 'it contains whitespace';
  if (address.includes('[') || address.includes(']')) return 'brackets are for URLs: write an IPv6 address without them (e.g. ::1) and the port in --admin-port';
  if (isIP(address) !== 0) return undefined;
  const withPort = HOST_AND_PORT.exec(address);
  if (withPort !== null) return `it has a port (":${withPort[1] ?? ''}"): give the host alone here and the port in --admin-port`;
  if (address.includes(':')) return 'it contains ":" but is not a valid IPv6 address';
  if (!HOST_NAME.test(address)) return 'it is neither an IP address nor a valid DNS name (letters, digits, hyphens and dots)';
  if (DIGITS_LAST_LABEL.test(address)) return 'it is not a valid IPv4 address';
  return undefined;
}

/** The canonical spelling of a valid address: a socket as `unix:/path`, a host as written (trimmed). */
function canonicalAdminAddress(raw: string): string {
  const address = raw.trim();
  const path = writtenSocketPath(address);
  return path === undefined ? address : `${UNIX_ADDRESS_PREFIX}${path}`;
}

/**
 * Where Envoy's admin API is: a host reached over TCP at the admin port (an IPv4 or IPv6 literal or a DNS
 * name, which may resolve to both families), or a Unix socket, `unix:/admin/admin.sock` (Contour's: its
 * admin API is on a socket only). One string all the way from flag or annotation to the client, which
 * connects by `adminSocketPath`. URLs, `host:port`, bracketed IPv6, relative or abstract socket names are
 * refused with what to write instead: the client would otherwise fail on every call with an error that
 * hides the mistake.
 */
export const adminAddress: ValueKind<string> = {
  form: 'an IPv4 or IPv6 address or a DNS name without port or brackets (127.0.0.1, ::1, localhost), or a Unix socket as unix:/absolute/path',
  parse: (raw) => (adminAddressProblem(raw) === undefined ? canonicalAdminAddress(raw) : undefined),
  format: (value) => value,
  problem: adminAddressProblem,
};

/** The socket path of a (valid, canonical) admin address, or undefined when it is a host reached over TCP. */
export function adminSocketPath(address: string): string | undefined {
  return address.startsWith(UNIX_ADDRESS_PREFIX) ? address.slice(UNIX_ADDRESS_PREFIX.length) : undefined;
}

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

/**
 * shutdown-manager.io/inject, with the same words on a pod (annotation) as on a namespace (label): `enabled`
 * or `disabled`, or `true` or `false`.
 */
export const injectSwitch: ValueKind<boolean> = {
  form: '"enabled" or "disabled" (or "true" or "false", as on the namespace label)',
  parse: (raw) => ({ true: true, enabled: true, false: false, disabled: false })[raw.trim().toLowerCase() as 'true' | 'false' | 'enabled' | 'disabled'],
  format: (value) => (value ? 'enabled' : 'disabled'),
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

/** A comma-separated list of port numbers (1-65535), each once; empty means "none". */
/**
 * A probe of the kubelet on one of Envoy's ports, with its period: the kubelet runs readiness and liveness probes
 * every periodSeconds for as long as the container runs, through its termination too, so a probe on a traffic
 * listener adds at most one connection (and one request) per period to what clients send there.
 */
export interface ProbeSchedule {
  readonly port: number;
  readonly periodMs: number;
}

/** Kubernetes' default periodSeconds (k8s.io/api core/v1 Probe): what a port given alone stands for. */
export const DEFAULT_PROBE_PERIOD_MS = 10_000;

const probePeriod = durationBetween(1_000, `${DURATION_FORM}, from 1s to 24h`);

/**
 * `8080/10s,8080/5s`: one entry per schedule (two on one port are two entries); `8080` alone: every `aloneMs`.
 * `alone` names that default in the form.
 */
function scheduleList(what: string, aloneMs: number, alone: string): ValueKind<readonly ProbeSchedule[]> {
  return {
    form: `a comma-separated list of PORT or PORT/PERIOD (a port number from 1 to 65535; PERIOD a duration from 1s to 24h, ${what}; PORT alone: every ${formatDuration(aloneMs)}, ${alone})`,
    parse: (raw) => {
      const schedules: ProbeSchedule[] = [];
      for (const item of raw.split(',').map((entry) => entry.trim()).filter((entry) => entry !== '')) {
        const [portText = '', periodText, extra] = item.split('/');
        const number = port.parse(portText);
        const periodMs = periodText === undefined ? aloneMs : probePeriod.parse(periodText);
        if (number === undefined || periodMs === undefined || extra !== undefined) return undefined;
        schedules.push({ port: number, periodMs });
      }
      return schedules.sort((a, b) => a.port - b.port || a.periodMs - b.periodMs);
    },
    format: (schedules) => schedules.map(({ port: number, periodMs }) => `${number}/${formatDuration(periodMs)}`).join(','),
  };
}

export const probeList = scheduleList("the probe's periodSeconds", DEFAULT_PROBE_PERIOD_MS, "the kubelet's default");

/**
 * Steady pollers of a traffic port (a load balancer's check of a routed path, an uptime monitor, a scrape through
 * Envoy): what no load balancer's letting go stops. PORT alone: every 10 s (a common check interval).
 */
export const pollerList = scheduleList('how often it comes', DEFAULT_PROBE_PERIOD_MS, 'a common check interval');

export function oneOf<T extends string>(...choices: T[]): ValueKind<T> {
  return {
    form: `one of ${choices.join(', ')}`,
    parse: (raw) => choices.find((choice) => choice === raw.trim()),
    format: (value) => value,
  };
}

/** A Kubernetes label selector (see label-selector.ts), as a webhook objectSelector could hold it. */
export const labelSelector: ValueKind<LabelSelector> = {
  form: LABEL_SELECTOR_FORM,
  parse: (raw) => (labelSelectorProblem(raw) === undefined ? parseLabelSelector(raw) : undefined),
  format: formatLabelSelector,
  problem: labelSelectorProblem,
};

/**
 * A Kubernetes quantity of a resource. `per` is the resolution the value must be a whole multiple of
 * (1000 for CPU: whole millicores; 1 for memory: whole bytes), `what` names it in messages.
 */
function quantityOf(what: string, examples: string, per: bigint, unit: string): ValueKind<Quantity> {
  const check = (raw: string): { quantity?: Quantity; problem?: string } => {
    let quantity: Quantity;
    try {
      quantity = parseQuantity(raw);
    } catch (error) {
      if (error instanceof QuantityError) return { problem: error.message };
      throw error;
    }
    if (!isMultipleOf(quantity, per)) return { problem: `it is not a whole number of ${unit}` };
    return { quantity };
  };
  return {
    form: `a Kubernetes ${what} quantity such as ${examples}`,
    parse: (raw) => check(raw).quantity,
    format: (quantity) => quantity.text,
    problem: (raw) => check(raw).problem,
  };
}

export const cpuQuantity = quantityOf('CPU', '10m, 250m, 0.5 or 2', 1000n, 'millicores (1m)');
export const memoryQuantity = quantityOf('memory', '64Mi, 128Mi, 1Gi or 500M', 1n, 'bytes');

/**
 * A limit: a quantity above zero, or empty for no limit at all (null). Zero is refused: Kubernetes would
 * read a limit of 0 as no limit, which is better written as empty.
 */
export function optionalLimit(kind: ValueKind<Quantity>): ValueKind<Quantity | null> {
  const problem = (raw: string): string | undefined => {
    if (raw.trim() === '') return undefined;
    const own = kind.problem?.(raw);
    if (own !== undefined) return own;
    const quantity = kind.parse(raw);
    return quantity !== undefined && isZero(quantity) ? 'it is zero (leave it empty for no limit)' : undefined;
  };
  return {
    form: `${kind.form}, greater than zero, or empty for no limit`,
    parse: (raw) => (raw.trim() === '' ? null : problem(raw) === undefined ? kind.parse(raw) : undefined),
    format: (quantity) => quantity?.text ?? '',
    problem,
  };
}
