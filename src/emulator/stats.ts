/**
 * Envoy's stats as the emulator keeps and prints them: a listener's counters and gauges with their per-worker copies,
 * an HTTP connection manager's gauge/counter pairs and response counters (charged as chargeStats charges them),
 * listener stat names (`listenerStatName`), and the /stats formats: plain text, JSON, and Prometheus text format
 * 0.0.4 with Envoy's default tag extraction (`prometheusSeries`).
 *
 * The stats and the Envoy source each follows: docs/emulator.md#stats and docs/emulator.md#arrival-counters.
 */

/** One stat as /stats lists it; `used` is what `usedonly` keeps (a counter above 0, a gauge ever set). */
export interface StatValue {
  readonly name: string;
  readonly type: 'counter' | 'gauge';
  readonly value: number;
  readonly used: boolean;
}

const HISTOGRAM_QUANTILES = [0, 25, 50, 75, 90, 95, 99, 99.5, 99.9, 100];
const PROMETHEUS_BUCKETS = [0.5, 1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000, 600000, 1800000, 3600000];


/**
 * `POST /reset_counters` (StatsHandler::handlerResetCounters, source/server/admin/stats_handler.cc): every counter
 * of the process set to 0, gauges untouched; each counter then counts on from 0. Modelled as the value each
 * counter had at the reset, taken off what /stats shows. A counter found below its base started again on its own
 * (a new process): its base is dropped.
 */
export class CounterResets {
  private readonly base = new Map<string, number>();

  reset(stats: readonly StatValue[]): void {
    for (const stat of stats) if (stat.type === 'counter') this.base.set(stat.name, stat.value);
  }

  apply(stats: readonly StatValue[]): StatValue[] {
    if (this.base.size === 0) return [...stats];
    return stats.map((stat) => {
      const base = stat.type === 'counter' ? this.base.get(stat.name) : undefined;
      if (base === undefined) return stat;
      if (stat.value < base) {
        this.base.delete(stat.name);
        return stat;
      }
      return { ...stat, value: stat.value - base };
    });
  }
}

/** One listener's connection bookkeeping, split by worker as Envoy's per-worker stats are. */
export class ListenerStats {
  readonly activeByWorker: number[];
  readonly totalByWorker: number[];
  private nextWorker = 0;

  constructor(
    readonly statName: string,
    workers: number,
  ) {
    this.activeByWorker = new Array<number>(workers).fill(0);
    this.totalByWorker = new Array<number>(workers).fill(0);
  }

  /** Assigns a new connection to a worker (round robin, like the kernel's balancing) and returns a release function. */
  accept(): () => void {
    const worker = this.nextWorker;
    this.nextWorker = (this.nextWorker + 1) % this.activeByWorker.length;
    this.activeByWorker[worker] = (this.activeByWorker[worker] ?? 0) + 1;
    this.totalByWorker[worker] = (this.totalByWorker[worker] ?? 0) + 1;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.activeByWorker[worker] = (this.activeByWorker[worker] ?? 1) - 1;
    };
  }

  get active(): number {
    return sum(this.activeByWorker);
  }

  get total(): number {
    return sum(this.totalByWorker);
  }

  stats(): StatValue[] {
    const prefix = `listener.${this.statName}`;
    const values: StatValue[] = [
      gauge(`${prefix}.downstream_cx_active`, this.active, this.total > 0),
      counter(`${prefix}.downstream_cx_total`, this.total),
    ];
    this.activeByWorker.forEach((active, worker) => {
      const used = (this.totalByWorker[worker] ?? 0) > 0;
      values.push(gauge(`${prefix}.worker_${worker}.downstream_cx_active`, active, used));
      values.push(counter(`${prefix}.worker_${worker}.downstream_cx_total`, this.totalByWorker[worker] ?? 0));
    });
    return values;
  }
}

/** An HTTP connection manager gauge and its counter (`downstream_cx_<kind>_active` / `_total`). */
export class ConnectionGauge {
  active = 0;
  total = 0;

  /** Counts one more and returns the function that uncounts it, once. */
  open(): () => void {
    this.active += 1;
    this.total += 1;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.active -= 1;
    };
  }
}

/**
 * One HTTP connection manager's response counters, as ConnectionManagerImpl::ActiveStream::chargeStats
 * (source/common/http/conn_manager_impl.cc) charges them when a response's headers are encoded (not when
 * its body ends): `downstream_rq_completed` and the status class `downstream_rq_<N>xx`, both in the
 * manager's scope `http.<prefix>.` (ConnectionManagerNamedStats) and in its listener's
 * `listener.<L>.http.<prefix>.` (ConnectionManagerListenerStats, docs/root/configuration/http/http_conn_man/
 * stats.rst "Per listener statistics"). Every manager here sits on one listener, so both scopes hold the same
 * values. A request answered by the health-check filter is not charged (see `chargeStats`); a request with no
 * response (the client or Envoy's exit cut it first) neither.
 */
export class ResponseCounters {
  completed = 0;
  /** 1xx to 5xx. */
  private readonly byClass = [0, 0, 0, 0, 0];

  charge(status: number): void {
    this.completed += 1;
    const index = Math.floor(status / 100) - 1;
    if (index >= 0 && index < this.byClass.length) this.byClass[index] = (this.byClass[index] ?? 0) + 1;
  }

  /** The counters under `scope` (`http.<prefix>` or `listener.<L>.http.<prefix>`). */
  stats(scope: string): StatValue[] {
    return [
      counter(`${scope}.downstream_rq_completed`, this.completed),
      ...this.byClass.map((count, index) => counter(`${scope}.downstream_rq_${index + 1}xx`, count)),
    ];
  }
}

/**
 * ConnectionManagerImpl::ActiveStream::chargeStats (source/common/http/conn_manager_impl.cc), run from
 * encodeHeaders for every response, local replies included: it records the response code, then returns
 * early for a request the health-check filter marked (`if (filter_manager_.streamInfo().healthCheck())
 * return;`, as the author remembers the source: not checked against a copy here), else charges
 * `downstream_rq_completed` and the status class, in the manager's and its listener's scopes.
 */
export function chargeStats(counters: ResponseCounters, status: number, healthCheck: boolean): void {
  if (healthCheck) return;
  counters.charge(status);
}

/**
 * The name Envoy gives a listener in stats, `listener.<name>.…`, for one bound to `address`:`port`.
 * ListenerImpl's scope is `listener.<address->asString()>.` (source/common/listener_manager/listener_impl.cc
 * listenerStatsScope) and Stats::Utility::sanitizeStatsName (source/common/stats/utility.cc), applied by
 * createScope, turns ':' (and '/') into '_'. Ipv4Instance::asString is "127.0.0.1:10000", so
 * "127.0.0.1_10000"; Ipv6Instance::asString is "[<inet_ntop form>]:<port>" (source/common/network/
 * address_impl.cc), so "[::1]:10000" becomes "[__1]_10000" and "[::]:443" "[__]_443", the shape the
 * listener address tag extractor expects (source/common/config/well_known_names.cc `<ADDRESS>`:
 * `\[[a-fA-F_\d]+\]_\d+`). The WHATWG URL serializer gives the same compressed lower-case form as inet_ntop
 * except for IPv4-mapped addresses (inet_ntop "::ffff:1.2.3.4", URL "::ffff:102:304").
 */
export function listenerStatName(address: string, port: number): string {
  const ip = address.includes(':') ? new URL(`http://[${address}]/`).hostname : address;
  return `${ip}:${port}`.replaceAll(':', '_').replaceAll('/', '_');
}

/** `name: value` lines: text readouts (quoted), then counters and gauges, then histograms. */
export function renderText(textReadouts: string[][], stats: StatValue[], histograms: string[]): string {
  const lines = [
    ...textReadouts.map(([name, value]) => `${name}: ${JSON.stringify(value)}`),
    ...stats.map((stat) => `${stat.name}: ${stat.value}`),
    ...histograms.map((name) => `${name}: No recorded values`),
  ];
  return lines.map((line) => `${line}\n`).join('');
}

export function renderJson(textReadouts: string[][], stats: StatValue[], histograms: string[]): string {
  const entries: unknown[] = [
    ...textReadouts.map(([name, value]) => ({ name, value })),
    ...stats.map(({ name, value }) => ({ name, value })),
  ];
  if (histograms.length > 0) {
    entries.push({
      histograms: {
        supported_quantiles: HISTOGRAM_QUANTILES,
        computed_quantiles: histograms.map((name) => ({
          name,
          values: HISTOGRAM_QUANTILES.map(() => ({ interval: null, cumulative: null })),
        })),
      },
    });
  }
  return JSON.stringify({ stats: entries }, null, 1);
}

/**
 * Envoy's default tag extraction (source/common/config/well_known_names.cc TagNameValues) for the stats
 * emulated here: a prefix becomes a label, and `_rq_<N>xx` becomes `_rq_xx` with `envoy_response_code_class`
 * (`*_rq_(<response_code_class>)xx`). Labels are listed in the order the extractors run, the most specific
 * first: response code class, connection manager prefix, worker id, listener address. The per-listener HTTP
 * stats `listener.<L>.http.<prefix>.*` take both the prefix (`listener.[<address>.]http.(<stat_prefix>.)*`)
 * and, for a numeric address only, the listener address, so `listener.admin.http.admin.*` stays
 * `envoy_listener_admin_http_*` with only the prefix label.
 */
function prometheusSeries(name: string): { metric: string; labels: string } {
  const codeClass = /^(.+_rq_)(\d)xx$/.exec(name);
  const series = prefixSeries(codeClass === null ? name : `${codeClass[1]}xx`);
  if (codeClass === null) return series;
  const label = `envoy_response_code_class="${codeClass[2]}"`;
  return { metric: series.metric, labels: series.labels === '' ? label : `${label},${series.labels}` };
}

function prefixSeries(name: string): { metric: string; labels: string } {
  const patterns: [RegExp, (match: RegExpExecArray) => { metric: string; labels: string }][] = [
    [/^http\.([^.]+)\.(.+)$/, (m) => ({ metric: `envoy_http_${m[2]}`, labels: `envoy_http_conn_manager_prefix="${m[1]}"` })],
    [/^listener\.admin\.http\.([^.]+)\.(.+)$/, (m) => ({ metric: `envoy_listener_admin_http_${m[2]}`, labels: `envoy_http_conn_manager_prefix="${m[1]}"` })],
    [
      /^listener\.(.+?)\.http\.([^.]+)\.(.+)$/,
      (m) => ({ metric: `envoy_listener_http_${m[3]}`, labels: `envoy_http_conn_manager_prefix="${m[2]}",envoy_listener_address="${m[1]}"` }),
    ],
    [/^tcp\.([^.]+)\.(.+)$/, (m) => ({ metric: `envoy_tcp_${m[2]}`, labels: `envoy_tcp_prefix="${m[1]}"` })],
    [/^listener\.admin\.(.+)$/, (m) => ({ metric: `envoy_listener_admin_${m[1]}`, labels: '' })],
    [
      /^listener\.(.+)\.worker_(\d+)\.(.+)$/,
      (m) => ({ metric: `envoy_listener_worker_${m[3]}`, labels: `envoy_worker_id="${m[2]}",envoy_listener_address="${m[1]}"` }),
    ],
    [/^listener\.(.+)\.([^.]+)$/, (m) => ({ metric: `envoy_listener_${m[2]}`, labels: `envoy_listener_address="${m[1]}"` })],
  ];
  for (const [pattern, toSeries] of patterns) {
    const match = pattern.exec(name);
    if (match !== null) {
      const series = toSeries(match);
      return { metric: series.metric.replaceAll('.', '_'), labels: series.labels };
    }
  }
  return { metric: `envoy_${name.replaceAll('.', '_')}`, labels: '' };
}

export function renderPrometheus(stats: StatValue[], histograms: string[]): string {
  const families = new Map<string, { type: string; lines: string[] }>();
  const add = (metric: string, type: string, line: string): void => {
    const family = families.get(metric) ?? { type, lines: [] };
    family.lines.push(line);
    families.set(metric, family);
  };
  for (const stat of stats) {
    const { metric, labels } = prometheusSeries(stat.name);
    add(metric, stat.type, `${metric}{${labels}} ${stat.value}`);
  }
  for (const name of histograms) {
    const { metric, labels } = prometheusSeries(name);
    const separator = labels === '' ? '' : ',';
    for (const bound of PROMETHEUS_BUCKETS) add(metric, 'histogram', `${metric}_bucket{${labels}${separator}le="${bound}"} 0`);
    add(metric, 'histogram', `${metric}_bucket{${labels}${separator}le="+Inf"} 0`);
    add(metric, 'histogram', `${metric}_sum{${labels}} 0`);
    add(metric, 'histogram', `${metric}_count{${labels}} 0`);
  }
  let output = '';
  for (const [metric, family] of [...families].sort(([a], [b]) => (a < b ? -1 : 1))) {
    output += `# TYPE ${metric} ${family.type}\n${family.lines.join('\n')}\n`;
  }
  return output;
}

export function gauge(name: string, value: number, used: boolean): StatValue {
  return { name, type: 'gauge', value, used };
}

export function counter(name: string, value: number): StatValue {
  return { name, type: 'counter', value, used: value > 0 };
}

function sum(values: readonly number[]): number {
  return values.reduce((total, value) => total + value, 0);
}
