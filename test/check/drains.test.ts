/** check's drains and the load balancer's lag, without a cluster: sidecar flags read, lags attributed, verdicts at their edges, Prometheus answers read. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { NamespacePods, V1OwnerReference, V1Pod } from '../../src/check/cluster.js';
import { drainFindings, graceClearing, lagQuery, podTiming, replicaSetWorkload, seconds, type LagReading } from '../../src/check/drains.js';
import { expectationsOf } from '../../src/check/expectations.js';
import { sidecarOf } from '../../src/check/pod-state.js';
import { parsePrometheusUrl, parseServiceRef, PrometheusError, queryPath, readAnswer } from '../../src/check/prometheus.js';
import { renderText } from '../../src/check/render.js';
import { makeReport } from '../../src/check/report.js';
import { PROJECT_VERSION, DEFAULT_SIDECAR_IMAGE } from '../../src/version.js';

const STATUS = JSON.stringify({ version: PROJECT_VERSION });

function pod(name: string, args: string[], options: { grace?: number; owner?: V1OwnerReference; env?: Record<string, string> } = {}): V1Pod {
  return {
    metadata: { name, namespace: 'edge', annotations: { 'shutdown-manager.io/status': STATUS }, ownerReferences: options.owner === undefined ? [] : [options.owner] },
    spec: {
      containers: [
        { name: 'envoy' },
        { name: 'shutdown-manager', image: DEFAULT_SIDECAR_IMAGE, args: ['mode=sidecar', ...args], env: Object.entries(options.env ?? {}).map(([key, value]) => ({ name: key, value })) },
      ],
      ...(options.grace === undefined ? {} : { terminationGracePeriodSeconds: options.grace }),
    },
    status: { phase: 'Running' },
  };
}

const daemonSet = (name: string): V1OwnerReference => ({ apiVersion: 'apps/v1', kind: 'DaemonSet', name, uid: name, controller: true });

function timing(p: V1Pod): ReturnType<typeof podTiming> {
  return podTiming(p, sidecarOf(p) as NonNullable<ReturnType<typeof sidecarOf>>);
}

describe("a pod's drain, from its sidecar's flags", () => {
  test("the injector's flags; the defaults where a flag is absent (Kubernetes' 30 s grace, the sidecar's defaults, the rule on)", () => {
    assert.deepEqual(timing(pod('a', ['--check-delay=45s', '--drain-delay=5s', '--check-interval=2s', '--drain-timeout=4m50s', '--quiet-period=10s'], { grace: 300 })), {
      graceMs: 300_000,
      checkDelayMs: 45_000,
      deadlineMs: 290_000,
      drainDelayMs: 5_000,
      checkIntervalMs: 2_000,
      quietPeriod: true,
      quietPeriodMs: 10_000,
    });
    assert.deepEqual(timing(pod('b', [])), { graceMs: 30_000, checkDelayMs: 60_000, deadlineMs: 27_000, drainDelayMs: 0, checkIntervalMs: 5_000, quietPeriod: true, quietPeriodMs: 10_000 });
    assert.equal(timing(pod('c', ['--quiet-period=0s'])).quietPeriodMs, 0, 'off: no quiet period');
  });

  test('--name value, and the environment, are read too; the quiet-period rule is off at 0s or off only', () => {
    assert.equal(timing(pod('a', ['--check-delay', '20s'])).checkDelayMs, 20_000);
    assert.equal(timing(pod('a', [], { env: { SHUTDOWN_MANAGER_CHECK_DELAY: '15s' } })).checkDelayMs, 15_000);
    assert.equal(timing(pod('a', ['--quiet-period=0s'])).quietPeriod, false);
    assert.equal(timing(pod('a', ['--quiet-period', '0'])).quietPeriod, false);
    assert.equal(timing(pod('a', ['--quiet-period=off'])).quietPeriod, false);
    assert.equal(timing(pod('a', [], { env: { SHUTDOWN_MANAGER_QUIET_PERIOD: '0s' } })).quietPeriod, false);
    assert.equal(timing(pod('a', ['--quiet-period=5s'])).quietPeriod, true);
    assert.equal(timing(pod('a', ['--quiet-period=nonsense'])).quietPeriod, true, 'not ours to guess');
  });

  test('the deadline: --drain-timeout, or the grace period when someone shortened it below that', () => {
    assert.equal(timing(pod('a', ['--drain-timeout=1m50s'], { grace: 60 })).deadlineMs, 60_000);
    assert.equal(timing(pod('a', ['--drain-timeout=1m50s'], { grace: 600 })).deadlineMs, 110_000, 'the sidecar stops waiting at its own deadline');
    assert.equal(timing(pod('a', [], { grace: 120 })).deadlineMs, 110_000, 'no flag: what the injector would derive');
  });
});

describe('lags attributed to workloads', () => {
  const rows = new Map([['x', { workload: { kind: 'Deployment', name: 'edge-proxy', namespace: 'edge' } }], ['y', { workload: { kind: 'Deployment', name: 'edge', namespace: 'edge' } }]]);

  test("a ReplicaSet read from the API is its owner's; a deleted one is the Deployment whose name and a pod-template-hash make it", () => {
    const owners = new Map<string, V1OwnerReference | undefined>([['edge/old-x', { apiVersion: 'apps/v1', kind: 'Deployment', name: 'other', uid: 'u' }]]);
    assert.deepEqual(replicaSetWorkload('edge', 'old-x', owners, rows), { kind: 'Deployment', name: 'other', namespace: 'edge' });
    assert.deepEqual(replicaSetWorkload('edge', 'edge-proxy-5c8bd9f7', new Map(), rows), { kind: 'Deployment', name: 'edge-proxy', namespace: 'edge' }, 'the longest name that fits');
    assert.deepEqual(replicaSetWorkload('edge', 'edge-5c8bd', new Map(), rows), { kind: 'Deployment', name: 'edge', namespace: 'edge' });
    assert.deepEqual(replicaSetWorkload('edge', 'edge-proxy-aeiou', new Map(), rows), { kind: 'ReplicaSet', name: 'edge-proxy-aeiou', namespace: 'edge' }, 'vowels are never in a hash');
    assert.deepEqual(replicaSetWorkload('other', 'edge-5c8bd', new Map(), rows), { kind: 'ReplicaSet', name: 'edge-5c8bd', namespace: 'other' });
  });
});

describe('the verdicts, at their edges', () => {
  const expected = expectationsOf(undefined, undefined);
  /** One DaemonSet pod: grace 120 s (deadline 110 s), check-delay 30 s, check-interval 5 s. */
  function verdicts(lag: number, args: string[] = []): string[] {
    const namespaces: NamespacePods[] = [{ namespace: 'edge', optedIn: true, pods: [pod('ds-1', ['--drain-timeout=1m50s', '--check-delay=30s', ...args], { grace: 120, owner: daemonSet('ds') })] }];
    const reading: LagReading = {
      status: 'read',
      source: 'http://prometheus',
      window: '7d',
      query: lagQuery('7d'),
      samples: [{ labels: { namespace: 'edge', controller_kind: 'DaemonSet', controller_name: 'ds' }, value: lag }],
    };
    return drainFindings({ namespaces, replicaSetOwners: new Map(), expected, lag: reading })
      .findings.filter((finding) => finding.status === 'warning')
      .map((finding) => finding.check);
  }

  test('near the deadline: from 80 % of it (drain-delay counted), whatever the quiet-period rule', () => {
    assert.deepEqual(verdicts(87.9), []);
    assert.deepEqual(verdicts(88), ['drains.lag-near-deadline']);
    assert.deepEqual(verdicts(78, ['--drain-delay=10s']), ['drains.lag-near-deadline']);
  });

  test('past the check-delay: more than check-delay + check-interval, and only with the quiet-period rule off', () => {
    assert.deepEqual(verdicts(35, ['--quiet-period=0s']), []);
    assert.deepEqual(verdicts(35.1, ['--quiet-period=0s']), ['drains.lag-beyond-check-delay']);
    assert.deepEqual(verdicts(60), []);
    assert.deepEqual(verdicts(100, ['--quiet-period=0s']), ['drains.lag-near-deadline', 'drains.lag-beyond-check-delay']);
  });

  test('the grace period suggested puts the arrival below 80 % of its deadline, and no shorter one does', () => {
    for (const arrival of [1, 20, 88, 95, 240, 1000]) {
      const grace = graceClearing(arrival);
      const deadline = (g: number): number => Math.min(g * 1000 - Math.min(10_000, Math.max(1_000, Math.round(g * 100))), g * 1000);
      assert.ok(0.8 * deadline(grace) > arrival * 1000, `${arrival}: ${grace}`);
      assert.ok(0.8 * deadline(grace - 1) <= arrival * 1000, `${arrival}: ${grace - 1} would do`);
    }
  });

  test('the text report: a row per workload, the lag as people read it', () => {
    const namespaces: NamespacePods[] = [{ namespace: 'edge', optedIn: true, pods: [pod('ds-1', ['--drain-timeout=1m50s'], { grace: 120, owner: daemonSet('ds') })] }];
    const { findings, report } = drainFindings({ namespaces, replicaSetOwners: new Map(), expected, lag: { status: 'unknown' } });
    const text = renderText(makeReport(findings, report), false);
    assert.ok(
      text.startsWith(
        [
          "Drains and the load balancer's lag",
          '  WORKLOAD           PODS  GRACE  DEADLINE  CHECK-DELAY  QUIET-PERIOD  LB LAG',
          '  DaemonSet edge/ds     1  2m     1m50s     1m           on            unknown',
          '',
        ].join('\n'),
      ),
      text,
    );
    assert.deepEqual([seconds(4.25), seconds(45), seconds(59.96), seconds(90), seconds(3600)], ['4.3s', '45s', '60s', '1m30s', '1h']);
  });
});

describe("Prometheus's answers and addresses", () => {
  const transport = { describe: 'Prometheus at http://p', throughApiServer: false };

  test('a vector is read; every other answer is a PrometheusError naming what it was', () => {
    const body = JSON.stringify({ status: 'success', data: { resultType: 'vector', result: [{ metric: { namespace: 'edge' }, value: [1, '4.5'] }] } });
    assert.deepEqual(readAnswer(200, body, 'application/json', transport), [{ labels: { namespace: 'edge' }, value: 4.5 }]);
    const special = JSON.stringify({ status: 'success', data: { resultType: 'vector', result: ['1e+02', '+Inf', 'NaN'].map((v) => ({ metric: {}, value: [1, v] })) } });
    assert.deepEqual(readAnswer(200, special, 'application/json', transport).map((sample) => sample.value), [100, Infinity, Number.NaN]);
    const cases: [number, string, RegExp][] = [
      [200, '', /answered 200 with application\/json that is not JSON: an empty answer/],
      [502, '<html>Bad Gateway</html>', /answered 502 with application\/json that is not JSON: "<html>Bad Gateway<\/html>"/],
      [400, JSON.stringify({ status: 'error', errorType: 'bad_data', error: 'parse error' }), /answered 400, the query failed \(bad_data: parse error\)/],
      [200, JSON.stringify({ hello: 'world' }), /answered 200 with JSON that is not a query result/],
      [200, JSON.stringify({ status: 'success', data: { resultType: 'vector', result: [{ metric: { a: 1 }, value: [1, '2'] }] } }), /sample 0 is not/],
      [200, JSON.stringify({ status: 'success', data: { resultType: 'vector', result: [{ metric: {}, value: [1, 'many'] }] } }), /sample 0 is not/],
      [200, JSON.stringify({ status: 'success', data: { resultType: 'scalar', result: [1, '2'] } }), /answered a scalar where the query makes a vector/],
      [200, 'null', /JSON that is not a query result/],
    ];
    for (const [status, text, message] of cases) {
      assert.throws(() => readAnswer(status, text, 'application/json', transport), (error: unknown) => error instanceof PrometheusError && message.test(error.message), text);
    }
    const status = JSON.stringify({ kind: 'Status', message: 'forbidden', code: 403 });
    assert.throws(() => readAnswer(403, status, 'application/json', { describe: 'x', throughApiServer: true }), /the API server answered 403 to the service proxy for x: forbidden \(the proxy needs RBAC verb "get" on resource "services\/proxy"/);
  });

  test('--prometheus-url and --prometheus: the forms taken, the paths asked', () => {
    const url = parsePrometheusUrl('https://user:secret@prometheus.example:9443/prom/');
    assert.equal(url?.kind, 'url');
    for (const bad of ['localhost:9090', 'ftp://x', 'http://x/?query=up', 'http://x/#a', '']) assert.equal(parsePrometheusUrl(bad), undefined, bad);
    assert.deepEqual(parseServiceRef('monitoring/prometheus-operated:9090'), { kind: 'service', namespace: 'monitoring', service: 'prometheus-operated', port: '9090' });
    assert.deepEqual(parseServiceRef('monitoring/https:prometheus:web'), { kind: 'service', namespace: 'monitoring', service: 'https:prometheus', port: 'web' });
    for (const bad of ['prometheus:9090', 'monitoring/prometheus', 'Monitoring/p:1', 'monitoring/p:1/x', 'a/b:c:d']) assert.equal(parseServiceRef(bad), undefined, bad);
    assert.equal(queryPath(parseServiceRef('monitoring/p:9090') as NonNullable<ReturnType<typeof parseServiceRef>>), '/api/v1/namespaces/monitoring/services/p:9090/proxy/api/v1/query');
  });
});
