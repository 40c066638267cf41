import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, test } from 'node:test';
import {
  countDownstreamConnections,
  CONNECTION_STATS_FILTER,
  ImplausibleStatError,
  jsonDepthExceeds,
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
        assert.ok(error.excerpt.length > 0);
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
    assert.deepEqual(countDownstreamConnections([]), { total: 0, byListener: {}, missingListeners: [], availableListeners: [], adminConnectionsTotal: null });
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

  test("the filter sent to Envoy selects exactly the listener gauges and the admin listener's connection counter", () => {
    const filter = new RegExp(CONNECTION_STATS_FILTER);
    const selected = parseJsonStats(fixture('stats.json')).filter((sample) => filter.test(sample.name));
    assert.deepEqual(selected, parseJsonStats(fixture('stats-filtered.json')));
  });
});
