/**
 * The sidecar's metrics (src/sidecar/metrics.ts), read from the drain's snapshot at each scrape: which series each
 * snapshot gives, their labels and values, the cap on listener series, one snapshot per scrape, and the
 * exposition against the table of docs/reference/metrics.md. The snapshots are a real idle supervisor's with
 * fields set, and a real drain's (Envoy scripted: test/support/scripted-envoy.ts); the process tests scrape a
 * running sidecar (test/sidecar/sidecar-process.test.ts).
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { systemClock } from '../../src/clock.js';
import { ADMIN_FAILURE_KINDS, noFailures } from '../../src/envoy/admin-errors.js';
import type { AdminCallCounts } from '../../src/sidecar/admin-calls.js';
import { openJournal } from '../../src/sidecar/journal.js';
import { LAG_BUCKETS_SECONDS } from '../../src/sidecar/lag-buckets.js';
import { MAX_LISTENER_SERIES, OTHER_LISTENERS, sidecarMetrics } from '../../src/sidecar/metrics.js';
import { NEEDED_STATS, type NeededStat } from '../../src/sidecar/needed-stats.js';
import { DrainSupervisor, type SupervisorSnapshot } from '../../src/sidecar/supervisor.js';
import { MemoryLog } from '../support/memory-log.js';
import { REPO_ROOT } from '../support/process.js';
import { exposedFamilies, type ExposedSample } from '../support/prometheus.js';
import { ScriptedEnvoy } from '../support/scripted-envoy.js';

type ServerCounters = ReturnType<Parameters<typeof sidecarMetrics>[2]>;

const DRAIN = { 'drain-delay': 0, 'check-delay': 0, 'check-interval': 10, 'min-open-connections': 0, 'drain-timeout': 5_000, 'admin-refusals': 3 };

function supervisor(envoy = new ScriptedEnvoy()): DrainSupervisor {
  return new DrainSupervisor(envoy, { drain: DRAIN, recoverEnvoy: true, watchIntervalMs: 60_000, readTimeoutMs: 500 }, openJournal(''), new MemoryLog(), systemClock);
}

/** A real supervisor's snapshot before any drain: the shape every case below starts from. */
const IDLE: SupervisorSnapshot = (() => {
  const idle = supervisor();
  const snapshot = idle.snapshot();
  idle.stop();
  return snapshot;
})();

const NO_CLOSES: ServerCounters['connectionsClosed'] = { shed: 0, timedOut: 0, refused: 0, tooManyInFlight: 0, slowReader: 0, writeTimedOut: 0 };

/** The metrics over a snapshot that the test may change, and what they were asked for. */
function scraped(snapshot: SupervisorSnapshot = IDLE, options: { ready?: boolean; admin?: AdminCallCounts; server?: ServerCounters } = {}) {
  const state = { snapshot, snapshots: 0 };
  const metrics = sidecarMetrics(
    {
      snapshot: () => {
        state.snapshots += 1;
        return state.snapshot;
      },
      readiness: () => ({ ready: options.ready ?? false, detail: '' }),
    },
    () => options.admin ?? { up: null, failures: noFailures() },
    () => options.server ?? { unauthorized: 0, connectionsClosed: NO_CLOSES },
  );
  /** The samples of each family of one scrape, by family name. */
  const scrape = async (): Promise<Map<string, readonly ExposedSample[]>> => new Map(exposedFamilies(await metrics.metrics()).map((family) => [family.name, family.samples]));
  return { state, metrics, scrape };
}

/** `{label: value}` of every sample, written `name{label="value"}` as in PromQL, with its value. */
function values(samples: readonly ExposedSample[] | undefined): Record<string, number> {
  return Object.fromEntries(
    (samples ?? []).map(({ name, labels, value }) => {
      const written = Object.entries(labels).map(([label, text]) => `${label}="${text}"`);
      return [written.length === 0 ? name : `${name}{${written.join(',')}}`, value];
    }),
  );
}

function listenerCounts(count: number, connections: (index: number) => number): Record<string, number> {
  return Object.fromEntries(Array.from({ length: count }, (_, index) => [`listener_${String(index).padStart(3, '0')}`, connections(index)]));
}

describe('sidecarMetrics: what each snapshot gives', () => {
  test('before any drain: idle, no connection series, +Inf left, the histogram at zero, every counter at 0', async () => {
    const families = await scraped().scrape();
    assert.deepEqual(
      values(families.get('shutdown_manager_drain_state')),
      {
        'shutdown_manager_drain_state{state="idle"}': 1,
        'shutdown_manager_drain_state{state="draining"}': 0,
        'shutdown_manager_drain_state{state="drained"}': 0,
        'shutdown_manager_drain_state{state="timed-out"}': 0,
        'shutdown_manager_drain_state{state="interrupted"}': 0,
      },
      'one series per state, 1 for idle',
    );
    for (const absent of ['shutdown_manager_open_connections', 'shutdown_manager_load_balancer_lag_seconds', 'shutdown_manager_load_balancer_unobserved_listeners', 'shutdown_manager_envoy_stats_missing']) {
      assert.deepEqual(families.get(absent), [], `${absent}: no series before there is something to say`);
    }
    assert.equal(families.get('shutdown_manager_drain_remaining_seconds')?.[0]?.value, Infinity, 'no deadline yet: +Inf');
    const histogram = values(families.get('shutdown_manager_drain_load_balancer_lag_seconds'));
    assert.equal(Object.keys(histogram).length, LAG_BUCKETS_SECONDS.length + 3, 'every bucket, +Inf, the sum and the count');
    assert.ok(
      Object.values(histogram).every((value) => value === 0),
      'zeros before the first observation, so that increase() sees the first one',
    );
    for (const zero of ['shutdown_manager_long_lived_connections', 'shutdown_manager_drain_duration_seconds', 'shutdown_manager_drain_held_by_traffic', 'shutdown_manager_drain_polls_total', 'shutdown_manager_envoy_admin_up', 'shutdown_manager_envoy_admin_answered', 'shutdown_manager_drain_rearms_total', 'shutdown_manager_unauthorized_requests_total']) {
      assert.deepEqual(values(families.get(zero)), { [zero]: 0 }, `${zero}: one series, 0`);
    }
    assert.deepEqual(values(families.get('shutdown_manager_envoy_recoveries_total')), { 'shutdown_manager_envoy_recoveries_total{action="pass-health-checks"}': 0, 'shutdown_manager_envoy_recoveries_total{action="restart-envoy"}': 0 }, 'both actions, 0');
    assert.equal(families.get('shutdown_manager_envoy_admin_failures_total')?.length, ADMIN_FAILURE_KINDS.length, 'one failure series per kind');
    assert.equal(families.get('shutdown_manager_connections_closed_total')?.length, Object.keys(NO_CLOSES).length, 'one close series per reason');
  });

  test('a real drain, Envoy scripted: drained, the last poll by listener, its polls, duration and time left', async (t) => {
    const envoy = new ScriptedEnvoy();
    envoy.answers.count = [{ total: 3, byListener: { ingress_http: 2, ingress_tcp: 1 } }, { total: 0, byListener: { ingress_http: 0, ingress_tcp: 0 } }];
    const drain = supervisor(envoy);
    t.after(() => drain.stop());
    assert.equal((await drain.shutdown()).state, 'drained', 'the drain ended drained');
    const families = await scraped(drain.snapshot()).scrape();
    const drainState = values(families.get('shutdown_manager_drain_state'));
    assert.equal(drainState['shutdown_manager_drain_state{state="drained"}'], 1, 'drained');
    assert.equal(Object.values(drainState).reduce((sum, value) => sum + value, 0), 1, 'one state at a time');
    assert.deepEqual(
      values(families.get('shutdown_manager_open_connections')),
      { 'shutdown_manager_open_connections{listener="ingress_http"}': 0, 'shutdown_manager_open_connections{listener="ingress_tcp"}': 0 },
      'the last poll, by listener',
    );
    const [polls, duration, remaining] = ['shutdown_manager_drain_polls_total', 'shutdown_manager_drain_duration_seconds', 'shutdown_manager_drain_remaining_seconds'].map((name) => families.get(name)?.[0]?.value ?? NaN) as [number, number, number];
    assert.equal(polls, drain.snapshot().pollsTotal, "the supervisor's polls");
    assert.ok(polls >= 2, `both scripted polls counted, got ${polls}`);
    assert.ok(duration > 0, `the drain lasted, ${duration} s`);
    // Both from the drain's end: to the float's rounding, they add up to its timeout.
    assert.ok(Math.abs(duration + remaining - DRAIN['drain-timeout'] / 1000) < 1e-6, `time spent (${duration} s) and left (${remaining} s) make the drain timeout`);
  });

  test(`open connections: every listener up to ${MAX_LISTENER_SERIES}; past that the largest (ties by name) and "${OTHER_LISTENERS}", summing to the total`, async () => {
    const at = async (counts: Record<string, number>): Promise<Record<string, number>> => {
      const series = (await scraped({ ...IDLE, openConnectionsByListener: counts }).scrape()).get('shutdown_manager_open_connections') ?? [];
      return Object.fromEntries(series.map(({ labels, value }) => [labels['listener'], value]));
    };
    const exactly = listenerCounts(MAX_LISTENER_SERIES, (index) => index);
    assert.deepEqual(await at(exactly), exactly, `${MAX_LISTENER_SERIES} listeners: each its own series`);

    // 150 listeners: listener_i has i % 7 connections, so ties are many; 101 series, the sum kept.
    const many = listenerCounts(150, (index) => index % 7);
    const series = await at(many);
    assert.equal(Object.keys(series).length, MAX_LISTENER_SERIES + 1, `${MAX_LISTENER_SERIES} listeners and ${OTHER_LISTENERS}`);
    const total = (counts: Record<string, number>): number => Object.values(counts).reduce((sum, value) => sum + value, 0);
    assert.equal(total(series), total(many), 'the series sum to the total, as sum() in PromQL reads it');
    const ranked = Object.entries(many).sort(([a, x], [b, y]) => y - x || (a < b ? -1 : 1));
    const kept = ranked.slice(0, MAX_LISTENER_SERIES);
    assert.deepEqual({ ...series, [OTHER_LISTENERS]: undefined }, { ...Object.fromEntries(kept), [OTHER_LISTENERS]: undefined }, 'the largest kept, ties by name');
    assert.equal(series[OTHER_LISTENERS], total(Object.fromEntries(ranked.slice(MAX_LISTENER_SERIES))), 'the rest summed');
    assert.equal(series['listener_006'], 6, 'a largest one is kept');
    assert.equal(series['listener_149'], undefined, 'a small one late in the order is summed');
  });

  test(`a listener named "${OTHER_LISTENERS}" is counted into "${OTHER_LISTENERS}" past the cap, never a second series of that name`, async () => {
    const at = async (counts: Record<string, number>) => (await scraped({ ...IDLE, openConnectionsByListener: counts }).scrape()).get('shutdown_manager_open_connections') ?? [];
    const smallOther = { ...listenerCounts(MAX_LISTENER_SERIES, () => 5), [OTHER_LISTENERS]: 1, tiny: 2 };
    const first = await at(smallOther);
    assert.equal(first.length, MAX_LISTENER_SERIES + 1, 'the cap and one for the rest');
    assert.deepEqual(first.filter(({ labels }) => labels['listener'] === OTHER_LISTENERS).map(({ value }) => value), [3], `"${OTHER_LISTENERS}" (1) and tiny (2), once`);
    const largeOther = { ...listenerCounts(MAX_LISTENER_SERIES, () => 5), [OTHER_LISTENERS]: 50 };
    const second = await at(largeOther);
    assert.equal(second.length, MAX_LISTENER_SERIES, `"${OTHER_LISTENERS}" is among the largest: the rest is added to it`);
    assert.deepEqual(second.filter(({ labels }) => labels['listener'] === OTHER_LISTENERS).map(({ value }) => value), [55], `its 50 and the one listener past the cap`);
  });

  test('stats missing: one series per needed stat, 1 for those missing; absent until the first read checked them', async () => {
    const missing = NEEDED_STATS[1] as NeededStat;
    const series = values((await scraped({ ...IDLE, envoyStats: { missing: [missing], detail: 'no admin counter' } }).scrape()).get('shutdown_manager_envoy_stats_missing'));
    assert.deepEqual(series, Object.fromEntries(NEEDED_STATS.map((stat) => [`shutdown_manager_envoy_stats_missing{stat="${stat}"}`, stat === missing ? 1 : 0])), `each of the ${NEEDED_STATS.length} stats the drain needs`);
    const none = values((await scraped({ ...IDLE, envoyStats: { missing: [], detail: '' } }).scrape()).get('shutdown_manager_envoy_stats_missing'));
    assert.deepEqual(Object.values(none), NEEDED_STATS.map(() => 0), 'none missing: all 0, still there');
  });

  test("the load balancer's lag: by its rule, only when the drain saw every listener; the blind spots by reason", async () => {
    const lag = async (loadBalancer: Partial<SupervisorSnapshot['loadBalancer']>) => {
      const families = await scraped({ ...IDLE, loadBalancer: { ...IDLE.loadBalancer, ...loadBalancer } }).scrape();
      return { lag: values(families.get('shutdown_manager_load_balancer_lag_seconds')), unobserved: values(families.get('shutdown_manager_load_balancer_unobserved_listeners')) };
    };
    const seen = { lagMs: 2_500, observable: true, sight: 'whole' as const };
    assert.deepEqual((await lag({ ...seen, quietPeriodMs: 10_000 })).lag, { 'shutdown_manager_load_balancer_lag_seconds{rule="observed"}': 2.5 }, 'with a quiet period: observed');
    assert.deepEqual((await lag({ ...seen, quietPeriodMs: null })).lag, { 'shutdown_manager_load_balancer_lag_seconds{rule="check-delay"}': 2.5 }, 'without: check-delay');
    assert.deepEqual((await lag({ ...seen, lagMs: null, quietPeriodMs: 10_000 })).lag, {}, 'no lag yet: absent, not 0');
    assert.deepEqual((await lag({ ...seen, sight: 'partial', quietPeriodMs: 10_000 })).lag, {}, 'a partial sight reports no lag');
    assert.deepEqual((await lag({ ...seen, observable: false, quietPeriodMs: 10_000 })).lag, {}, 'an unobservable balancer reports no lag');

    const blindSpots = [
      { reason: 'arrival-counters-missing' as const, count: 2, listeners: ['a', 'b'] },
      { reason: 'new-connections-missing' as const, count: 1, listeners: ['c'] },
    ];
    assert.deepEqual(
      (await lag({ ...seen, sight: 'partial', quietPeriodMs: 10_000, blindSpots })).unobserved,
      {
        'shutdown_manager_load_balancer_unobserved_listeners{reason="arrival-counters-missing"}': 2,
        'shutdown_manager_load_balancer_unobserved_listeners{reason="new-connections-missing"}': 1,
      },
      'the blind listeners, by reason',
    );
    assert.deepEqual((await lag({ ...seen, quietPeriodMs: null, blindSpots })).unobserved, {}, 'none without a quiet period: nothing waits on what is seen');
  });

  test('settled lags are observed into the histogram, in seconds', async () => {
    const series = values((await scraped({ ...IDLE, settledLoadBalancerLagsMs: [500, 2_000, 700_000] }).scrape()).get('shutdown_manager_drain_load_balancer_lag_seconds'));
    const name = 'shutdown_manager_drain_load_balancer_lag_seconds';
    assert.equal(series[`${name}_count`], 3, 'three drains');
    assert.equal(series[`${name}_sum`], 702.5, 'their lags summed, in seconds');
    assert.equal(series[`${name}_bucket{le="1"}`], 1, 'half a second');
    assert.equal(series[`${name}_bucket{le="2"}`], 2, 'two seconds, inclusive');
    assert.equal(series[`${name}_bucket{le="600"}`], 2, 'past the last bucket...');
    assert.equal(series[`${name}_bucket{le="+Inf"}`], 3, '...only +Inf counts it');
  });

  test('admin calls, readiness, recovery, re-arms and the serve port: each from its source', async () => {
    const failures = { ...noFailures(), refused: 4, timeout: 1 };
    const closes = { ...NO_CLOSES, shed: 2, slowReader: 5 };
    const recovery = { action: 'pass-health-checks' as const, listenersDrained: true, why: 'left draining', at: '', envoyState: 'DRAINING', envoyUptimeSeconds: 60, disabled: false, error: null };
    const families = await scraped({ ...IDLE, rearms: 2, recovery }, { ready: true, admin: { up: true, failures }, server: { unauthorized: 7, connectionsClosed: closes } }).scrape();
    assert.equal(families.get('shutdown_manager_envoy_admin_up')?.[0]?.value, 1, 'the last call answered');
    assert.equal(families.get('shutdown_manager_envoy_admin_answered')?.[0]?.value, 1, 'ready');
    assert.deepEqual(values(families.get('shutdown_manager_envoy_admin_failures_total')), Object.fromEntries(ADMIN_FAILURE_KINDS.map((kind) => [`shutdown_manager_envoy_admin_failures_total{kind="${kind}"}`, failures[kind]])), 'failures by kind');
    assert.deepEqual(values(families.get('shutdown_manager_connections_closed_total')), Object.fromEntries(Object.entries(closes).map(([reason, count]) => [`shutdown_manager_connections_closed_total{reason="${reason}"}`, count])), 'closes by reason');
    assert.equal(families.get('shutdown_manager_unauthorized_requests_total')?.[0]?.value, 7, 'refused for want of the token');
    assert.equal(families.get('shutdown_manager_drain_rearms_total')?.[0]?.value, 2, 're-arms');
    assert.deepEqual(values(families.get('shutdown_manager_envoy_recoveries_total')), { 'shutdown_manager_envoy_recoveries_total{action="pass-health-checks"}': 1, 'shutdown_manager_envoy_recoveries_total{action="restart-envoy"}': 0 }, 'the action taken');

    const failed = await scraped({ ...IDLE, recovery: { ...recovery, error: 'POST /healthcheck/ok: refused' } }, { admin: { up: false, failures } }).scrape();
    assert.equal(failed.get('shutdown_manager_envoy_admin_up')?.[0]?.value, 0, 'the last call failed');
    assert.equal(failed.get('shutdown_manager_envoy_recoveries_total')?.[0]?.value, 0, 'an action that failed is not counted');
    const disabled = await scraped({ ...IDLE, recovery: { ...recovery, disabled: true } }).scrape();
    assert.equal(disabled.get('shutdown_manager_envoy_recoveries_total')?.[0]?.value, 0, 'an action --recover-envoy=false left undone is not counted');
  });
});

describe('sidecarMetrics: one snapshot per scrape', () => {
  test('every series of a scrape comes from one snapshot; the next scrape takes a new one', async () => {
    const { state, scrape } = scraped();
    await scrape();
    assert.equal(state.snapshots, 1, 'one snapshot for the whole scrape');
    state.snapshot = { ...IDLE, state: 'draining', openConnectionsByListener: { ingress: 4 } };
    const next = await scrape();
    assert.equal(state.snapshots, 2, 'a new snapshot for the next scrape');
    assert.equal(values(next.get('shutdown_manager_drain_state'))['shutdown_manager_drain_state{state="draining"}'], 1, 'the new state');
  });

  test('the open connections are rendered once per poll: the same counts give the same text, new ones a new text', async () => {
    const counts: Record<string, number> = { ingress: 4 };
    const { state, scrape } = scraped({ ...IDLE, openConnectionsByListener: counts });
    assert.equal((await scrape()).get('shutdown_manager_open_connections')?.[0]?.value, 4, 'the first poll');
    counts['ingress'] = 9; // the drain never changes a poll's counts: were it to, the rendering kept would show
    assert.equal((await scrape()).get('shutdown_manager_open_connections')?.[0]?.value, 4, 'the same poll: the text rendered for it');
    state.snapshot = { ...IDLE, openConnectionsByListener: { ...counts } };
    assert.equal((await scrape()).get('shutdown_manager_open_connections')?.[0]?.value, 9, 'a new poll: rendered again');
  });
});

/** The sidecar's rows of docs/reference/metrics.md: name, label names and type, in order. */
function referenceRows(): { name: string; labels: string[]; type: string }[] {
  const markdown = readFileSync(join(REPO_ROOT, 'docs/reference/metrics.md'), 'utf8');
  const section = markdown.slice(markdown.indexOf('## Sidecar'), markdown.indexOf('## Webhook'));
  return [...section.matchAll(/^\| `(\w+)(?:\{([\w,]+)\})?` \| (\w+) \|/gm)].map(([, name, labels, type]) => ({ name: name as string, labels: labels === undefined ? [] : labels.split(','), type: type as string }));
}

test('the exposition is the table of docs/reference/metrics.md: every metric in its order, its type, and its labels', async () => {
  const rows = referenceRows();
  assert.ok(rows.length >= 18, `the sidecar's table read, ${rows.length} rows`);
  // A snapshot where every series shows: a lag, blind spots, stats checked, a count per listener.
  const everything: SupervisorSnapshot = {
    ...IDLE,
    openConnectionsByListener: { ingress: 1 },
    envoyStats: { missing: [], detail: '' },
    loadBalancer: { ...IDLE.loadBalancer, lagMs: 1_000, quietPeriodMs: 10_000, observable: true, sight: 'whole', blindSpots: [{ reason: 'new-connections-missing', count: 1, listeners: ['x'] }] },
  };
  const families = exposedFamilies(await scraped(everything).metrics.metrics());
  assert.deepEqual(
    families.map(({ name, type }) => `${name} ${type}`),
    rows.map(({ name, type }) => `${name} ${type}`),
    'the same metrics, in the same order, of the same types',
  );
  for (const [index, family] of families.entries()) {
    const labels = [...new Set(family.samples.flatMap(({ labels }) => Object.keys(labels).filter((label) => family.type !== 'histogram' || label !== 'le')))];
    assert.deepEqual(labels, rows[index]?.labels, `${family.name}: the labels the table names`);
  }
});
