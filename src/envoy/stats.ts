/**
 * Envoy's /stats output, parsed, and the count of open downstream connections derived from it. Pure functions only:
 * the admin client fetches, this module decides what the numbers mean. The count is
 * `listener.<name>.downstream_cx_active` summed over every listener but admin (our own polling connections), the
 * per-worker copies and Envoy-internal listeners; `http.<prefix>.downstream_cx_active` is never added (those are
 * listener connections too), only read to split the total into drainable and long-lived (splitLongLived). Only JSON is
 * read: a text or HTML answer is an error, never "0 connections".
 *
 * Why: docs/design.md#what-the-drain-promises (how connections are counted), docs/design.md#long-lived-connections.
 */
import { isJsonObject, jsonDepthExceeds } from '../json.js';
import { blindReasonOf, portOfListener, type ArrivalTally, type BlindSpot, type ProbeRate } from './arrivals.js';
import type { ProbeSchedule } from '../config/values.js';


/** One counter or gauge. Histograms and text readouts carry no connection count and are dropped. */
export interface StatSample {
  readonly name: string;
  readonly value: number;
}

/** The admin output could not be read as stats: Envoy answered, but not with what we asked for. */
export class StatsParseError extends Error {
  override readonly name: string = 'StatsParseError';

  constructor(
    reason: string,
    readonly excerpt: string,
    message = `Envoy admin /stats output is not understood (${reason}); it begins ${JSON.stringify(excerpt)}`,
  ) {
    super(message);
  }
}

/**
 * A connection gauge whose value cannot be a number of open connections (negative, fractional, beyond
 * any process's file descriptors, or not a number): a broken or foreign source. Summing it would report
 * nonsense such as "Infinity connections", and dropping it would report 0: the count is unreadable.
 */
export class ImplausibleStatError extends StatsParseError {
  override readonly name = 'ImplausibleStatError';

  constructor(
    readonly stat: string,
    readonly value: unknown,
    why: string,
  ) {
    const shown = typeof value === 'number' ? String(value) : JSON.stringify(value);
    super(why, `${JSON.stringify(stat)}: ${shown}`, `Envoy admin /stats reports ${stat} = ${shown}, which is no count of open connections (${why})`);
  }
}

/**
 * Linux caps a process's open files below 2^31 (the ceiling of fs.nr_open): a gauge above it is broken,
 * e.g. an unsigned gauge decremented below zero, which reads 2^64 - 1.
 */
export const MAX_PLAUSIBLE_CONNECTIONS = 2 ** 31;

function notANumber(stat: string, value: unknown): ImplausibleStatError {
  return new ImplausibleStatError(stat, value, `${value === null ? 'null' : `a ${typeof value}`} where a number was expected`);
}

/** The value of a counted `downstream_cx_active` gauge, or an ImplausibleStatError. */
function connectionCountOf(stat: string, value: number): number {
  if (value < 0) throw new ImplausibleStatError(stat, value, 'negative, and Envoy\'s gauges are unsigned');
  if (value > MAX_PLAUSIBLE_CONNECTIONS) throw new ImplausibleStatError(stat, value, `more than 2^31, above any process's open-file limit`);
  if (!Number.isInteger(value)) throw new ImplausibleStatError(stat, value, 'not a whole number');
  return value;
}

/**
 * RE2 (and ECMAScript) for one segment of a stat name (no dot) other than `worker_<digits>` and `main_thread`: the
 * segment before `.downstream_cx_active` or `.downstream_cx_total` of a listener's per-thread copies
 * (`listener.<L>.worker_3.downstream_cx_active`). Envoy reports one copy per worker and listener, so that on a
 * 16-worker Envoy they are 16 of every 17 names the drain would read; a filter without lookahead (RE2 has none)
 * leaves them out by spelling "any other segment": one that differs from each word at some character, or is a
 * shorter prefix of it, or (worker_) goes on with something other than digits. test/envoy/stats.test.ts checks it
 * against isPerThreadCopy on generated segments.
 */
export const NOT_PER_THREAD_SEGMENT = notPerThreadSegment();

function notPerThreadSegment(): string {
  const rest = '[^.]*';
  /** A segment that starts like `word` for i characters, then differs (or ends there: the group is optional). */
  const divergences = (word: string): string[] =>
    Array.from({ length: word.length - 1 }, (_, index) => index + 1).map((index) => `${word.slice(0, index)}(?:[^${word[index]}.]${rest})?`);
  return [
    `[^mw.]${rest}`,
    ...divergences('worker_'),
    `worker_(?:[0-9]*[^0-9.]${rest})?`,
    ...divergences('main_thread'),
    `main_thread[^.]+`,
  ].join('|');
}

/**
 * The regex sent as `/stats?filter=`: keeps the answer small. Envoy evaluates it with RE2, partial match. It
 * takes every listener's `downstream_cx_active` gauge (not its per-thread copies: NOT_PER_THREAD_SEGMENT), the
 * admin listener's `downstream_cx_total` counter, which tells one Envoy process from the next (see
 * ConnectionCount.adminConnectionsTotal), the HTTP connection managers' gauges that tell drainable connections from
 * long-lived ones (see splitLongLived), the counters new client traffic is told from (every listener's
 * `downstream_cx_total`, the per-listener `http.<prefix>.downstream_rq_completed`, the health-check filter's
 * `request_total`: see arrivals.ts), and the hot restart gauges (`server.hot_restart_epoch`,
 * `server.parent_connections`: see HotRestartState): one request, so that all of them describe the same moment.
 */
export const CONNECTION_STATS_FILTER =
  `^(listener\\.((?:.*\\.)?(?:${NOT_PER_THREAD_SEGMENT})\\.downstream_cx_(active|total)|.*\\.http\\..*\\.downstream_rq_completed)` +
  '|http\\..*\\.(downstream_cx_(active|upgrades_active|http2_active|http3_active)|health_check\\.request_total)|server\\.(hot_restart_epoch|parent_connections|uptime))$';

/**
 * What a read says of Envoy's hot restart (docs/root/intro/arch_overview/operations/hot_restart.rst; server.cc
 * updateServerStats): `server.hot_restart_epoch`, the process's `--restart-epoch` (a hot restart child's is its
 * parent's + 1), and `server.parent_connections`, the open connections of a parent still alive (merged at the
 * child's stats flushes, 0 once the parent is gone), and `server.uptime`, 0 in a hot restart child until its first
 * merge of its parent's stats (updateServerStats sets both, and the child's gauges lack the parent's connections
 * until then). Null when Envoy did not report them (a stats_matcher).
 */
export interface HotRestartState {
  readonly epoch: number | null;
  readonly parentConnections: number | null;
  readonly uptime?: number | null;
}

const HOT_RESTART_EPOCH = 'server.hot_restart_epoch';
const PARENT_CONNECTIONS = 'server.parent_connections';
const UPTIME = 'server.uptime';

/** The admin listener's connection counter: every admin call opens a connection, so it grows with each of ours. */
export const ADMIN_CONNECTIONS_TOTAL = 'listener.admin.downstream_cx_total';

const EXCERPT_LENGTH = 120;

function excerptOf(body: string): string {
  return body.length > EXCERPT_LENGTH ? `${body.slice(0, EXCERPT_LENGTH)}…` : body;
}

/**
 * Deepest JSON nesting accepted from Envoy's admin API. Its stats are 3 levels deep (6 in the histograms
 * element), /server_info about 4 plus the node metadata's own; 32 leaves room and refuses what would make
 * JSON.parse build a million nested arrays (about 300 MB of memory for a 2 MB answer).
 */
export const MAX_JSON_DEPTH = 32;


/**
 * `GET /stats?format=json`: `{"stats":[{"name":"a","value":1}, {"name":"t","value":"text"}, {"histograms":{…}}]}`.
 * Only numeric values are kept (text readouts have string values; histograms have no `name`), including
 * non-finite ones (JSON's 1e999): countDownstreamConnections judges the values it counts. A listener's
 * connection gauge without a numeric value is an ImplausibleStatError: dropping it would count 0.
 */
export function parseJsonStats(body: string): StatSample[] {
  // Envoy answers `{"stats":[]}` when nothing matches: an empty body is something else failing.
  if (body.trim() === '') throw new StatsParseError('an empty answer where JSON was asked for', body);
  if (jsonDepthExceeds(body, MAX_JSON_DEPTH)) throw new StatsParseError(`JSON nested deeper than ${MAX_JSON_DEPTH} levels`, excerptOf(body));
  let document: unknown;
  try {
    document = JSON.parse(body);
  } catch (error) {
    throw new StatsParseError(`invalid JSON: ${(error as Error).message}`, excerptOf(body));
  }
  const entries = isJsonObject(document) ? document['stats'] : undefined;
  if (!Array.isArray(entries)) throw new StatsParseError('JSON without a "stats" array', excerptOf(body));
  const samples: StatSample[] = [];
  for (const entry of entries) {
    if (!isJsonObject(entry)) continue;
    const { name, value } = entry;
    if (typeof name !== 'string') continue;
    if (typeof value === 'number') samples.push({ name, value });
    else if (listenerOfActiveConnections(name) !== undefined) throw notANumber(name, value);
    // Kept as no number, so that the split distrusts it: dropped, its connections would pass for long-lived.
    else if (connectionManagerGauge(name) !== undefined) samples.push({ name, value: NaN });
  }
  return samples;
}

export interface ConnectionCountOptions {
  /** Count only these listener names (e.g. "0.0.0.0_8080"); empty means every listener but admin and internal. */
  readonly listeners?: readonly string[];
  /**
   * The kubelet's probes of Envoy: on a listener bound to a probe's port (matched by the port its stat name ends
   * with), up to one new connection and request per period are the probe's, not a client's (see arrivals.ts).
   */
  readonly probes?: readonly ProbeSchedule[];
  /** Steady pollers of traffic ports (--pollers): their requests are not clients (see arrivals.ts). */
  readonly pollers?: readonly ProbeSchedule[];
}

export interface ConnectionCount {
  /** Open downstream connections over the counted listeners. */
  readonly total: number;
  /** The count of each listener that was counted, by stat name. */
  readonly byListener: Readonly<Record<string, number>>;
  /** Listeners asked for by name that Envoy does not have (a typo, or a listener not added yet). */
  readonly missingListeners: readonly string[];
  /** Every listener Envoy reported but the admin and internal ones: named when some asked for are missing. */
  readonly availableListeners: readonly string[];
  /**
   * `listener.admin.downstream_cx_total` in the same answer; null when absent. A counter only grows within
   * one Envoy process, and every admin call of ours opens a connection (no keep-alive), so between two of our
   * reads of one process it grows strictly: a value not above the last one seen is another process.
   */
  readonly adminConnectionsTotal: number | null;
  /**
   * Of `total`, at most this many are connections Envoy can drain (HTTP ones not upgraded): an upper bound,
   * so that a drain that waits for it never ends while one is open. `total` when the HTTP connection
   * managers' stats cannot be trusted (see splitLongLived).
   */
  readonly drainable: number;
  /**
   * `total - drainable`: connections Envoy gives no drain signal to (upgraded ones such as WebSocket, and
   * TCP-proxy ones), which close only when their client or Envoy's exit closes them. A lower bound.
   */
  readonly longLived: number;
  /** The counters new client traffic is told from (see arrivals.ts), of the counted listeners not serving probes. */
  readonly arrivals: ArrivalTally;
  /** Undefined from a source that does not read them (the tests' fakes). */
  readonly hotRestart?: HotRestartState;
}

const LISTENER_ACTIVE = /^listener\.(.+)\.downstream_cx_active$/;
/** `listener.<name>.worker_3` and the admin listener's `listener.admin.main_thread`: per-thread copies. */
const PER_THREAD_SUFFIX = /\.(?:worker_\d+|main_thread)$/;

const LISTENER_TOTAL = /^listener\.(.+)\.downstream_cx_total$/;
/** Non-greedy: a listener's stat name is its address (`0.0.0.0_8080`), a prefix may be anything. */
const LISTENER_RESPONSES = /^listener\.(.+?)\.http\.(.+)\.downstream_rq_completed$/;
const HEALTH_CHECK_REQUESTS = /^http\.(.+)\.health_check\.request_total$/;

/** The counters arrivals are computed from, as read, before the watched listeners are known. */
interface ArrivalCounters {
  readonly connections: Map<string, number>;
  /** Per listener (any, watched or not), its HTTP connection managers' responses, by prefix. */
  readonly responses: Map<string, Map<string, number>>;
  readonly healthChecks: Map<string, number>;
}

/** A counter's value, or undefined when it is no counter value (a text, a negative): then it is left out. */
function counterValue(value: number): number | undefined {
  return Number.isSafeInteger(value) && value >= 0 ? value : undefined;
}

/**
 * Whether `name` is a per-thread copy of a listener's connection stat (`listener.<L>.worker_3.downstream_cx_active`,
 * `listener.admin.main_thread.downstream_cx_total`): most of a listener-heavy Envoy's answer (one per worker and
 * listener), so they are told by string operations, before any regex (issue 28, item 5: bench/listener-flood.ts).
 */
export function isPerThreadCopy(name: string): boolean {
  if (!name.startsWith('listener.') || !(name.endsWith('.downstream_cx_active') || name.endsWith('.downstream_cx_total'))) return false;
  // The name less its last segment ends with the per-thread segment, as a listener's name does (PER_THREAD_SUFFIX).
  return PER_THREAD_SUFFIX.test(name.slice(0, name.lastIndexOf('.')));
}

/** Notes `name` if it is one of the arrival counters; whether it was. */
function noteArrivalCounter(counters: ArrivalCounters, name: string, value: number): boolean {
  // The regexes below only on names of the right ending: most names are no arrival counter.
  if (!name.endsWith('_total') && !name.endsWith('_completed')) return false;
  const responses = name.endsWith('.downstream_rq_completed') ? LISTENER_RESPONSES.exec(name) : null;
  if (responses !== null) {
    const [, listener = '', prefix = ''] = responses;
    const count = counterValue(value);
    if (count !== undefined && !PER_THREAD_SUFFIX.test(listener)) {
      const byPrefix = counters.responses.get(listener) ?? new Map<string, number>();
      byPrefix.set(prefix, count);
      counters.responses.set(listener, byPrefix);
    }
    return true;
  }
  const total = name.endsWith('.downstream_cx_total') ? LISTENER_TOTAL.exec(name) : null;
  if (total !== null) {
    const [, listener = ''] = total;
    const count = counterValue(value);
    if (count !== undefined && !PER_THREAD_SUFFIX.test(listener)) counters.connections.set(listener, count);
    return true;
  }
  const checks = name.endsWith('.health_check.request_total') ? HEALTH_CHECK_REQUESTS.exec(name) : null;
  if (checks !== null) {
    const count = counterValue(value);
    if (count !== undefined) counters.healthChecks.set(checks[1] ?? '', count);
    return true;
  }
  return false;
}

/**
 * The arrival tally of the counted listeners (see arrivals.ts): their counters, the probe rates of those the kubelet
 * probes, and the ones whose counters cannot show clients (blindSpots).
 */
function arrivalTally(counters: ArrivalCounters, counted: readonly string[], probes: readonly ProbeSchedule[], pollers: readonly ProbeSchedule[]): ArrivalTally {
  const watched = counted;
  const connections: Record<string, number> = {};
  const responses: Record<string, number> = {};
  const connectionListeners: string[] = [];
  const probeRates: Record<string, ProbeRate> = {};
  const pollerRates: Record<string, ProbeRate> = {};
  const blind: BlindSpot[] = [];
  for (const listener of watched) {
    const total = counters.connections.get(listener);
    if (total !== undefined) connections[listener] = total;
    const byPrefix = counters.responses.get(listener);
    if (byPrefix === undefined || byPrefix.size === 0) connectionListeners.push(listener);
    else for (const [prefix, count] of byPrefix) responses[`${listener} ${prefix}`] = count;
    const rate = probeRateOf(listener, probes);
    if (rate !== undefined) probeRates[listener] = rate;
    const polled = probeRateOf(listener, pollers);
    if (polled !== undefined) pollerRates[listener] = polled;
    const reason = blindReasonOf(total !== undefined, byPrefix !== undefined && byPrefix.size > 0);
    if (reason !== undefined) blind.push({ listener, reason });
  }
  // For the report only: health checks are never in the responses (see arrivals.ts).
  const healthChecks: Record<string, number> = {};
  for (const [prefix, count] of counters.healthChecks) {
    if (watched.some((listener) => counters.responses.get(listener)?.has(prefix) === true)) healthChecks[prefix] = count;
  }
  return { connections, responses, healthChecks, connectionListeners: connectionListeners.sort(), watched: [...watched].sort(), probeRates, ...(pollers.length > 0 ? { pollerRates } : {}), blindSpots: blind.sort((a, b) => (a.listener < b.listener ? -1 : 1)) };
}

/** The kubelet's probes (or steady pollers) on a listener's port, as a rate and a burst; undefined when none comes to it. */
function probeRateOf(listener: string, probes: readonly ProbeSchedule[]): ProbeRate | undefined {
  const port = portOfListener(listener);
  const on = probes.filter((probe) => probe.port === port);
  if (port === undefined || on.length === 0) return undefined;
  // One probe of each may come a period early or late (the kubelet's probe workers tick on their own): one more.
  return { perMs: on.reduce((sum, probe) => sum + 1 / probe.periodMs, 0), burst: on.length + 1 };
}

/** The listener a stat belongs to, when it is a whole-listener `downstream_cx_active` gauge; undefined otherwise. */
export function listenerOfActiveConnections(statName: string): string | undefined {
  const match = LISTENER_ACTIVE.exec(statName);
  const listener = match?.[1];
  if (listener === undefined || PER_THREAD_SUFFIX.test(listener)) return undefined;
  return listener;
}

function isExcludedListener(listener: string): boolean {
  return listener === 'admin' || listener.startsWith('admin.') || listener.startsWith('envoy_internal');
}

/**
 * The HTTP connection manager gauges read, of docs/root/configuration/http/http_conn_man/stats.rst (every
 * HCM has them under `http.<stat_prefix>.`): `downstream_cx_active` ("Total active connections"),
 * `downstream_cx_upgrades_active` ("Total active upgraded connections. These are also counted as active
 * http1/http2 connections."), `downstream_cx_http2_active`, `downstream_cx_http3_active`.
 */
const CONNECTION_MANAGER_GAUGE = /^http\.(.+)\.downstream_cx_(active|upgrades_active|http2_active|http3_active)$/;

type ManagerGaugeKind = 'active' | 'upgrades_active' | 'http2_active' | 'http3_active';

/** Envoy's admin HCM (`http.admin.*`): our own polls. Its presence says the HCM stats are reported at all. */
const ADMIN_MANAGER_PREFIX = 'admin';

/** The stat prefix and gauge of an HTTP connection manager gauge the split reads; undefined for any other stat. */
export function connectionManagerGauge(statName: string): { readonly prefix: string; readonly kind: ManagerGaugeKind } | undefined {
  if (!statName.startsWith('http.')) return undefined;
  const match = CONNECTION_MANAGER_GAUGE.exec(statName);
  const [, prefix, kind] = match ?? [];
  return prefix === undefined || kind === undefined ? undefined : { prefix, kind: kind as ManagerGaugeKind };
}

type ManagerGauges = Partial<Record<ManagerGaugeKind, number>>;

/** What the HTTP connection managers report, by stat prefix; `trusted` false when a value is no count. */
interface ManagerReadings {
  readonly byPrefix: Map<string, ManagerGauges>;
  adminSeen: boolean;
  trusted: boolean;
}

function isPlausibleCount(value: number): boolean {
  return Number.isInteger(value) && value >= 0 && value <= MAX_PLAUSIBLE_CONNECTIONS;
}

function noteManagerGauge(readings: ManagerReadings, gauge: { prefix: string; kind: ManagerGaugeKind }, value: number): void {
  if (gauge.prefix === ADMIN_MANAGER_PREFIX) {
    readings.adminSeen = true;
    return;
  }
  if (!isPlausibleCount(value)) readings.trusted = false;
  const gauges = readings.byPrefix.get(gauge.prefix) ?? {};
  gauges[gauge.kind] = value;
  readings.byPrefix.set(gauge.prefix, gauges);
}

/**
 * The connections of one HCM that are surely long-lived: a lower bound. On HTTP/1.1 an upgrade takes its
 * connection, one each. On HTTP/2 and HTTP/3 an upgrade (extended CONNECT) is a stream, and several may share
 * one connection, so once the HCM has (or may have: gauge absent) such connections, its upgrades prove only
 * one long-lived connection.
 */
function longLivedOfManager(gauges: ManagerGauges): number {
  const active = gauges.active ?? 0;
  const upgrades = Math.min(gauges.upgrades_active ?? 0, active);
  const multiplexed = gauges.http2_active === undefined || gauges.http3_active === undefined || gauges.http2_active + gauges.http3_active > 0;
  return upgrades > 0 && multiplexed ? 1 : upgrades;
}

/**
 * Splits the counted `total` into drainable and long-lived connections. Envoy's tcp_proxy has no active
 * connection gauge (docs/root/configuration/listeners/network_filters/tcp_proxy_filter.rst lists
 * `downstream_cx_total` and others, no `_active`), so its connections are found as the rest:
 *
 *   drainable = min(total, Σ over HCM prefixes but admin of (downstream_cx_active − long-lived of that HCM))
 *   longLived = total − drainable
 *
 * Every doubt errs towards drainable, which only makes a drain wait longer, never end early:
 * - HCM prefixes cannot be mapped to listeners from stats, so every HCM is summed, also those of listeners
 *   not counted (--listeners, internal ones): their connections can only raise drainable, and `total` caps it.
 * - No `http.admin.*` gauge (a stats_matcher may exclude HCM stats), an HCM with upgrades but no
 *   `downstream_cx_active`, or a value that is no count: the HCM stats cannot be trusted, drainable = total.
 * What remains unseen: an HCM whose stats alone a stats_matcher excludes while admin's stay; its
 * connections would count as long-lived.
 */
function splitLongLived(total: number, readings: ManagerReadings): { drainable: number; longLived: number } {
  let drainable = 0;
  let trusted = readings.trusted && readings.adminSeen;
  for (const gauges of readings.byPrefix.values()) {
    if (gauges.active === undefined && (gauges.upgrades_active ?? 0) > 0) trusted = false;
    drainable += (gauges.active ?? 0) - longLivedOfManager(gauges);
  }
  const bounded = trusted ? Math.min(total, drainable) : total;
  return { drainable: bounded, longLived: total - bounded };
}

/** Sums the open downstream connections of the counted listeners; a value that is no count is an ImplausibleStatError. */
export function countDownstreamConnections(
  samples: Iterable<StatSample>,
  options: ConnectionCountOptions = {},
): ConnectionCount {
  const wanted = options.listeners !== undefined && options.listeners.length > 0 ? new Set(options.listeners) : undefined;
  // A Map while counting (thousands of listeners: an object grown key by key is much slower), an object once.
  const byListener = new Map<string, number>();
  /** Only when listeners are named: otherwise the listeners available are the ones counted. */
  const available = new Set<string>();
  let adminConnectionsTotal: number | null = null;
  const hotRestart = { epoch: null as number | null, parentConnections: null as number | null, uptime: null as number | null };
  let total = 0;
  const managers: ManagerReadings = { byPrefix: new Map(), adminSeen: false, trusted: true };
  const arrivals: ArrivalCounters = { connections: new Map(), responses: new Map(), healthChecks: new Map() };
  for (const { name, value } of samples) {
    if (isPerThreadCopy(name)) continue;
    if (name === ADMIN_CONNECTIONS_TOTAL) {
      adminConnectionsTotal = Number.isSafeInteger(value) && value >= 0 ? value : null;
      continue;
    }
    if (name === HOT_RESTART_EPOCH || name === PARENT_CONNECTIONS || name === UPTIME) {
      const gaugeValue = Number.isSafeInteger(value) && value >= 0 ? value : null;
      if (name === HOT_RESTART_EPOCH) hotRestart.epoch = gaugeValue;
      else if (name === PARENT_CONNECTIONS) hotRestart.parentConnections = gaugeValue;
      else hotRestart.uptime = gaugeValue;
      continue;
    }
    if (noteArrivalCounter(arrivals, name, value)) continue;
    const managerGauge = connectionManagerGauge(name);
    if (managerGauge !== undefined) {
      noteManagerGauge(managers, managerGauge, value);
      continue;
    }
    const listener = listenerOfActiveConnections(name);
    if (listener === undefined) continue;
    if (wanted !== undefined && !isExcludedListener(listener)) available.add(listener);
    if (wanted === undefined ? isExcludedListener(listener) : !wanted.has(listener)) continue;
    const open = connectionCountOf(name, value);
    byListener.set(listener, (byListener.get(listener) ?? 0) + open);
    total += open;
  }
  const missingListeners = wanted === undefined ? [] : [...wanted].filter((listener) => !byListener.has(listener));
  const counted = [...byListener.keys()];
  return {
    total,
    byListener: Object.fromEntries(byListener),
    missingListeners,
    availableListeners: wanted === undefined ? [...counted].sort() : [...available].sort(),
    adminConnectionsTotal,
    ...splitLongLived(total, managers),
    arrivals: arrivalTally(arrivals, counted, options.probes ?? [], options.pollers ?? []),
    hotRestart,
  };
}
