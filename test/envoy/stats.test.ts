import assert from 'node:assert/strict';
import fc from 'fast-check';
import { jsonDepthExceeds } from '../../src/json.js';
import { readFileSync } from 'node:fs';
import { describe, test } from 'node:test';
import {
  countDownstreamConnections,
  CONNECTION_STATS_FILTER,
  isPerThreadCopy,
  ImplausibleStatError,
  listenerOfActiveConnections,
  MAX_JSON_DEPTH,
  MAX_PLAUSIBLE_CONNECTIONS,
  parseJsonStats,
  StatsParseError,
} from '../../src/envoy/stats.js';

const fixture = (name: string): string => readFileSync(new URL(`../fixtures/envoy/${name}`, import.meta.url), 'utf8');

/** 697 + 120 + 15 + 4: see test/fixtures/envoy/README.md. */
const FIXTURE_OPEN_CONNECTIONS = 836;

describe('parsing /stats?format=json output', () => {
  test('keeps numeric values, skips text readouts and the histograms element', () => {
    const samples = parseJsonStats(fixture('stats.json'));
    const byName = new Map(samples.map((sample) => [sample.name, sample.value]));
    assert.equal(byName.get('listener.[__]_8080.downstream_cx_active'), 4);
    assert.equal(byName.has('cluster.xds_cluster.version_text'), false);
    assert.equal(samples.some((sample) => sample.name.endsWith('downstream_cx_length_ms')), false);
  });

  test('a filter matching nothing is zero samples; an empty body is an error, never "0 connections"', () => {
    assert.deepEqual(parseJsonStats(fixture('stats-empty.json')), []);
    assert.throws(() => parseJsonStats(''), /an empty answer where JSON was asked for/);
  });

  test('text, HTML, truncated JSON or JSON of another shape is rejected with an excerpt', () => {
    const text = 'listener.0.0.0.0_8080.downstream_cx_active: 0\n';
    for (const body of [text, '<html><body>upstream connect error</body></html>', '{"stats":[{"name":"a","val', '{"histograms":{}}', '[1,2]']) {
      assert.throws(() => parseJsonStats(body), (error: unknown) => {
        assert.ok(error instanceof StatsParseError, `for ${body}`);
        assert.match(error.message, /not understood/);
        assert.ok(error.excerpt.length > 0, 'the error carries an excerpt of the body');
        return true;
      });
    }
  });
});

describe('the JSON nesting bound, checked before JSON.parse', () => {
  test('counts arrays and objects, not brackets inside strings (escaped quotes included); refuses past the bound', () => {
    assert.equal(jsonDepthExceeds(`${'['.repeat(32)}${']'.repeat(32)}`, MAX_JSON_DEPTH), false);
    assert.equal(jsonDepthExceeds(`${'['.repeat(33)}${']'.repeat(33)}`, MAX_JSON_DEPTH), true);
    assert.equal(jsonDepthExceeds(`[{"a":[{"b":"]]]]"}]}]`, 4), false, 'balanced: 4 deep');
    assert.equal(jsonDepthExceeds(`["[[[[[[", "\\"[[[[[[[["]`, 1), false, 'brackets in strings, after an escaped quote too');
    assert.equal(jsonDepthExceeds(`[{"a":[{"b":[]}]}]`, 4), true);
  });

  test("Envoy's own answers pass; a deep answer is a StatsParseError, never a parse", () => {
    for (const name of ['stats.json', 'stats-filtered.json', 'stats-empty.json']) assert.equal(jsonDepthExceeds(fixture(name), MAX_JSON_DEPTH), false, name);
    const deep = `{"stats":${'['.repeat(1_000_000)}${']'.repeat(1_000_000)}}`;
    const started = performance.now();
    assert.throws(() => parseJsonStats(deep), (error: unknown) => error instanceof StatsParseError && /JSON nested deeper than 32 levels/.test(error.message));
    assert.ok(performance.now() - started < 500, 'stops at level 33');
  });
});

describe('counting open downstream connections', () => {
  test('sums whole listeners, HTTP and TCP proxy alike, filtered by Envoy or not', () => {
    for (const name of ['stats.json', 'stats-filtered.json']) {
      const count = countDownstreamConnections(parseJsonStats(fixture(name)));
      assert.equal(count.total, FIXTURE_OPEN_CONNECTIONS, name);
      assert.deepEqual(count.byListener, {
        '0.0.0.0_5432': 15,
        '0.0.0.0_8080': 697,
        '0.0.0.0_8443': 120,
        '[__]_8080': 4,
      });
    }
  });

  test('excludes admin, per-worker copies and internal listeners; never adds the http.* family', () => {
    const count = countDownstreamConnections([
      { name: 'listener.admin.downstream_cx_active', value: 5 },
      { name: 'listener.admin.main_thread.downstream_cx_active', value: 5 },
      { name: 'listener.0.0.0.0_80.worker_0.downstream_cx_active', value: 2 },
      { name: 'listener.0.0.0.0_80.worker_11.downstream_cx_active', value: 1 },
      { name: 'listener.envoy_internal_x.downstream_cx_active', value: 7 },
      { name: 'http.ingress_http.downstream_cx_active', value: 3 },
      { name: 'listener.0.0.0.0_80.downstream_cx_total', value: 100 },
      { name: 'listener.0.0.0.0_80.downstream_cx_active', value: 3 },
    ]);
    assert.equal(count.total, 3);
    assert.deepEqual(count.byListener, { '0.0.0.0_80': 3 });
  });

  test('named listeners: only those are counted, and absent ones are reported', () => {
    const count = countDownstreamConnections(parseJsonStats(fixture('stats.json')), { listeners: ['0.0.0.0_5432', '0.0.0.0_9999'] });
    assert.equal(count.total, 15);
    assert.deepEqual(count.byListener, { '0.0.0.0_5432': 15 });
    assert.deepEqual(count.missingListeners, ['0.0.0.0_9999']);
  });

  test('a listener with a custom stat_prefix containing dots is still one listener', () => {
    assert.equal(listenerOfActiveConnections('listener.public.edge.downstream_cx_active'), 'public.edge');
    assert.equal(listenerOfActiveConnections('listener.public.edge.worker_0.downstream_cx_active'), undefined);
    assert.equal(listenerOfActiveConnections('http.public.downstream_cx_active'), undefined);
  });

  test('no listener stats at all means no open connection', () => {
    assert.deepEqual(countDownstreamConnections([]), {
      total: 0,
      byListener: {},
      missingListeners: [],
      availableListeners: [],
      adminConnectionsTotal: null,
      drainable: 0,
      longLived: 0,
      arrivals: { connections: {}, responses: {}, healthChecks: {}, connectionListeners: [], watched: [], probeRates: {}, blindSpots: [] },
      hotRestart: { epoch: null, parentConnections: null, uptime: null },
    });
  });

  test("reads the hot restart gauges: the restart epoch and a parent's open connections", () => {
    const count = countDownstreamConnections([
      { name: 'server.hot_restart_epoch', value: 3 },
      { name: 'server.parent_connections', value: 7 },
      { name: 'server.uptime', value: 86_400 },
      { name: 'listener.0.0.0.0_8080.downstream_cx_active', value: 9 },
    ]);
    assert.deepEqual(count.hotRestart, { epoch: 3, parentConnections: 7, uptime: 86_400 });
    assert.equal(count.total, 9, 'they are no listener count');
  });

  test('a counted gauge that is no count (huge, negative, fractional, not a number) makes the count unreadable, naming the stat and value', () => {
    const stat = 'listener.0.0.0.0_8080.downstream_cx_active';
    const cases: Array<[string, RegExp]> = [
      ['1e308', /= 1e\+308, which is no count of open connections \(more than 2\^31/],
      ['1e999', /= Infinity, which is no count of open connections \(more than 2\^31/],
      ['18446744073709551615', /= 18446744073709552000, .*more than 2\^31/], // an unsigned gauge wrapped below zero
      [String(MAX_PLAUSIBLE_CONNECTIONS + 1), /more than 2\^31/],
      ['-1', /= -1, .*\(negative/],
      ['2.5', /= 2\.5, .*\(not a whole number\)/],
      ['"12"', /= "12", .*\(a string where a number was expected\)/],
      ['null', /= null, .*\(null where a number was expected\)/],
    ];
    for (const [value, message] of cases) {
      const body = `{"stats":[{"name":"listener.0.0.0.0_9090.downstream_cx_active","value":3},{"name":"${stat}","value":${value}}]}`;
      assert.throws(
        () => countDownstreamConnections(parseJsonStats(body)),
        (error: unknown) => {
          assert.ok(error instanceof ImplausibleStatError, `for ${value}: ${String(error)}`);
          assert.ok(error instanceof StatsParseError, 'callers that catch StatsParseError catch it too');
          assert.equal(error.stat, stat);
          assert.match(error.message, new RegExp(`^Envoy admin /stats reports ${stat.replaceAll('.', '\\.')} `));
          assert.match(error.message, message, `for ${value}`);
          return true;
        },
      );
    }
  });

  test('plausible extremes are counts; absurd values of stats that are not counted are ignored', () => {
    const count = countDownstreamConnections([
      { name: 'listener.0.0.0.0_80.downstream_cx_active', value: MAX_PLAUSIBLE_CONNECTIONS },
      { name: 'listener.0.0.0.0_81.downstream_cx_active', value: 0 },
      { name: 'listener.0.0.0.0_80.worker_0.downstream_cx_active', value: -1 },
      { name: 'listener.admin.downstream_cx_active', value: 1e308 },
      { name: 'listener.0.0.0.0_80.downstream_cx_total', value: 1.8e19 },
    ]);
    assert.equal(count.total, MAX_PLAUSIBLE_CONNECTIONS);
    // A listener not named is not counted, so not judged either.
    const named = countDownstreamConnections([{ name: 'listener.a.downstream_cx_active', value: 1 }, { name: 'listener.b.downstream_cx_active', value: -5 }], { listeners: ['a'] });
    assert.equal(named.total, 1);
  });

  test("the filter sent to Envoy selects exactly the listener gauges, the admin listener's connection counter and the HCM gauges of the split", () => {
    const filter = new RegExp(CONNECTION_STATS_FILTER);
    const selected = parseJsonStats(fixture('stats.json')).filter((sample) => filter.test(sample.name));
    // stats-filtered.json is Envoy's answer to the listener part of the filter alone (see its README).
    // Less the per-thread copies, which the filter leaves out (NOT_PER_THREAD_SEGMENT).
    const listenerPart = parseJsonStats(fixture('stats-filtered.json')).filter((sample) => !isPerThreadCopy(sample.name));
    const isGaugeOrMark = (name: string): boolean => name.endsWith('.downstream_cx_active') || name === 'listener.admin.downstream_cx_total';
    assert.deepEqual(
      selected.filter((sample) => sample.name.startsWith('listener.') && isGaugeOrMark(sample.name)),
      listenerPart,
    );
    // The arrival counters (src/envoy/arrivals.ts): every listener's connections, and its HCMs' responses.
    assert.deepEqual(
      selected.filter((sample) => sample.name.startsWith('listener.') && !isGaugeOrMark(sample.name)).every((sample) => /\.downstream_(cx_total|rq_completed)$/.test(sample.name)),
      true,
    );
    for (const name of ['listener.0.0.0.0_80.downstream_cx_total', 'listener.0.0.0.0_80.http.ingress_http.downstream_rq_completed', 'http.ingress_http.health_check.request_total']) {
      assert.ok(filter.test(name), name);
    }
    for (const name of ['listener.0.0.0.0_80.http.ingress_http.downstream_rq_2xx', 'http.ingress_http.health_check.ok', 'http.ingress_http.downstream_rq_total']) assert.equal(filter.test(name), false, name);
    assert.deepEqual(
      selected.filter((sample) => sample.name.startsWith('http.')).map((sample) => sample.name),
      ['http.admin.downstream_cx_active', 'http.ingress_http.downstream_cx_active', 'http.ingress_https.downstream_cx_active'],
      'not downstream_rq_active, nor any counter',
    );
    for (const name of ['http.p.downstream_cx_upgrades_active', 'http.a.b.downstream_cx_http2_active', 'http.p.downstream_cx_http3_active']) assert.ok(filter.test(name), name);
    for (const name of ['http.p.downstream_cx_http1_active', 'http.p.downstream_cx_upgrades_total', 'http.p.user_agent.ios.downstream_cx_total', 'tcp.p.downstream_cx_total']) {
      assert.equal(filter.test(name), false, name);
    }
  });
});

describe("the filter leaves out listeners' per-thread copies (worker_<n>, main_thread), nothing else", () => {
  test('on generated segments: a name is selected exactly when it is no per-thread copy', () => {
    const filter = new RegExp(CONNECTION_STATS_FILTER);
    const letters = fc.constantFrom(...'worke_main_thd0129x[].'.split(''));
    const segment = fc.oneof(
      fc.string({ unit: letters, minLength: 1, maxLength: 14 }),
      fc.integer({ min: 0, max: 999 }).map((worker) => `worker_${worker}`),
      fc.constantFrom('main_thread', 'main_threads', 'worker_', 'worker', 'main', 'w', 'm', 'admin', '0_8080'),
    );
    fc.assert(
      fc.property(segment, fc.constantFrom('active', 'total'), (name, kind) => {
        fc.pre(!name.includes('.'));
        const stat = `listener.0.0.0.0_8080.${name}.downstream_cx_${kind}`;
        return filter.test(stat) === !isPerThreadCopy(stat);
      }),
      { numRuns: 2_000 },
    );
    assert.equal(filter.test('listener.0.0.0.0_8080.worker_3.downstream_cx_active'), false);
    assert.equal(filter.test('listener.admin.downstream_cx_total'), true, 'the process mark');
  });
});

/** Samples of one Envoy whose admin HCM is reported (as it always is, unless a stats_matcher hides it). */
function withAdmin(samples: { name: string; value: number }[]): { name: string; value: number }[] {
  return [{ name: 'http.admin.downstream_cx_active', value: 1 }, { name: 'listener.admin.downstream_cx_active', value: 1 }, ...samples];
}

describe('splitting the count: drainable and long-lived connections', () => {
  test('the fixture: HTTP connections of the HCMs are drainable, the TCP proxy and the HCM-less IPv6 listener are long-lived', () => {
    const count = countDownstreamConnections(parseJsonStats(fixture('stats.json')).filter((sample) => new RegExp(CONNECTION_STATS_FILTER).test(sample.name)));
    // ingress_http 697 + ingress_https 120; the rest of 836 is postgres' 15 and the 4 of [__]_8080, whose HCM the hand-written sample leaves out.
    assert.deepEqual([count.total, count.drainable, count.longLived], [FIXTURE_OPEN_CONNECTIONS, 817, 19]);
  });

  test('TCP-proxy connections (no gauge of their own) and HTTP/1.1 upgrades are long-lived; admin polls are not counted', () => {
    const count = countDownstreamConnections(withAdmin([
      { name: 'listener.0.0.0.0_80.downstream_cx_active', value: 10 },
      { name: 'listener.0.0.0.0_5432.downstream_cx_active', value: 4 },
      { name: 'http.web.downstream_cx_active', value: 10 },
      { name: 'http.web.downstream_cx_upgrades_active', value: 3 },
      { name: 'http.web.downstream_cx_http2_active', value: 0 },
      { name: 'http.web.downstream_cx_http3_active', value: 0 },
    ]));
    assert.deepEqual([count.total, count.drainable, count.longLived], [14, 7, 7]);
  });

  test('all drainable: no long-lived ones, and nothing below zero when the gauges disagree for a moment', () => {
    const plain = countDownstreamConnections(withAdmin([
      { name: 'listener.0.0.0.0_80.downstream_cx_active', value: 5 },
      { name: 'http.web.downstream_cx_active', value: 5 },
      { name: 'http.web.downstream_cx_upgrades_active', value: 0 },
    ]));
    assert.deepEqual([plain.drainable, plain.longLived], [5, 0]);
    // The HCM read a connection the listener gauge has already let go: drainable is capped by the total.
    const skewed = countDownstreamConnections(withAdmin([
      { name: 'listener.0.0.0.0_80.downstream_cx_active', value: 4 },
      { name: 'http.web.downstream_cx_active', value: 5 },
    ]));
    assert.deepEqual([skewed.total, skewed.drainable, skewed.longLived], [4, 4, 0]);
  });

  test('HTTP/2 or HTTP/3 on the HCM (or their gauges absent): upgrades are streams that may share one connection, so they prove one long-lived connection', () => {
    const base = [
      { name: 'listener.0.0.0.0_80.downstream_cx_active', value: 6 },
      { name: 'http.web.downstream_cx_active', value: 6 },
      { name: 'http.web.downstream_cx_upgrades_active', value: 4 },
    ];
    const h2 = countDownstreamConnections(withAdmin([...base, { name: 'http.web.downstream_cx_http2_active', value: 2 }, { name: 'http.web.downstream_cx_http3_active', value: 0 }]));
    assert.deepEqual([h2.drainable, h2.longLived], [5, 1]);
    const unknown = countDownstreamConnections(withAdmin(base));
    assert.deepEqual([unknown.drainable, unknown.longLived], [5, 1]);
    // More upgrades than connections (streams again): never more long-lived than the HCM's connections.
    const h1 = countDownstreamConnections(withAdmin([
      { name: 'listener.0.0.0.0_80.downstream_cx_active', value: 2 },
      { name: 'http.web.downstream_cx_active', value: 2 },
      { name: 'http.web.downstream_cx_upgrades_active', value: 9 },
      { name: 'http.web.downstream_cx_http2_active', value: 0 },
      { name: 'http.web.downstream_cx_http3_active', value: 0 },
    ]));
    assert.deepEqual([h1.drainable, h1.longLived], [0, 2]);
  });

  test('--listeners: every HCM is summed (they cannot be mapped to listeners), which can only raise drainable, capped by the total', () => {
    const samples = withAdmin([
      { name: 'listener.0.0.0.0_80.downstream_cx_active', value: 3 },
      { name: 'listener.0.0.0.0_5432.downstream_cx_active', value: 4 },
      { name: 'http.web.downstream_cx_active', value: 3 },
    ]);
    const tcpOnly = countDownstreamConnections(samples, { listeners: ['0.0.0.0_5432'] });
    // Truly 4 long-lived on the counted listener; the uncounted HTTP listener's 3 count as drainable: the drain waits for them.
    assert.deepEqual([tcpOnly.total, tcpOnly.drainable, tcpOnly.longLived], [4, 3, 1]);
  });

  test('HCM stats that cannot be trusted make every connection drainable (the setting then changes nothing)', () => {
    const listenerOnly = [{ name: 'listener.0.0.0.0_80.downstream_cx_active', value: 5 }];
    const cases: Array<[string, { name: string; value: number }[]]> = [
      ['no http.admin gauge: a stats_matcher may hide every HCM', [...listenerOnly, { name: 'http.web.downstream_cx_active', value: 1 }]],
      ['an HCM with upgrades but no active gauge', withAdmin([...listenerOnly, { name: 'http.web.downstream_cx_upgrades_active', value: 1 }])],
      ['a negative HCM gauge', withAdmin([...listenerOnly, { name: 'http.web.downstream_cx_active', value: -1 }])],
      ['a fractional HCM gauge', withAdmin([...listenerOnly, { name: 'http.web.downstream_cx_active', value: 0.5 }])],
    ];
    for (const [why, samples] of cases) {
      const count = countDownstreamConnections(samples);
      assert.deepEqual([count.total, count.drainable, count.longLived], [5, 5, 0], why);
    }
    // A gauge that is no number at all is kept as NaN by the parser: dropped, its connections would pass for long-lived.
    const body = JSON.stringify({ stats: [...withAdmin(listenerOnly), { name: 'http.web.downstream_cx_active', value: 'x' }] });
    const parsed = countDownstreamConnections(parseJsonStats(body));
    assert.deepEqual([parsed.drainable, parsed.longLived], [5, 0]);
  });
});
