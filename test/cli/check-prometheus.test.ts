/**
 * `check --prometheus-url` against a real Prometheus (issue 35): the `prometheus` server of Debian's package (the
 * one CI installs for promtool) scrapes real sidecars (`node dist/entry.cjs mode=sidecar`, each in front of an
 * Envoy emulator), every target labelled as the sidecars' PodMonitor of manifests/monitoring labels it, and the
 * built CLI's `check` reads its drains from that Prometheus. test/cli/check.test.ts covers the same findings against
 * a fake Prometheus that answers what it is told; here the series are what the sidecars exported and the queries are
 * evaluated by Prometheus itself, so a query real PromQL rejects, or one that does not match the series as exported
 * and labelled, fails.
 *
 * Four workloads in namespace edge, each one pod with a sidecar:
 * - Deployment envoy: drained while a load balancer keeps sending new clients for 2.5 s (a lag to report);
 * - StatefulSet polled: drained while a poller never stops, held to its deadline (held-by-traffic);
 * - DaemonSet trimmed: an Envoy whose stats_matcher trims downstream_cx_total (stats missing, drains unobserved);
 * - Deployment idle: never drained.
 * First check runs before any drain (the negative control: nothing observed, no default figure), then the drains,
 * then check again. `npm run build` first; skipped, with the reason, where the prometheus server is missing.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { stringify } from 'yaml';
import { lagQuery, seconds, SIDE_QUERIES, type WorkloadDrain } from '../../src/check/drains.js';
import type { CheckReport, Finding } from '../../src/check/report.js';
import { SIDECAR_CONTAINER_NAME } from '../../src/config/endpoints.js';
import { EnvoyEmulator, type EnvoyEmulatorOptions } from '../../src/emulator/envoy-emulator.js';
import type { DrainOutcome } from '../../src/sidecar/drain.js';
import { LAG_BUCKETS_SECONDS } from '../../src/sidecar/lag-buckets.js';
import { addNamespace, addPod, installWebhook, kubeconfigYaml, startCheckCluster, type CheckCluster } from '../support/check-cluster.js';
import { httpRequest } from '../support/connections.js';
import { runsAlone } from '../support/exclusive.js';
import { serviceProxyFront, type ServiceProxyFront } from '../support/fake-prometheus.js';
import { findOne, getArray, getObject, getString, isObject, loadYamlFile, MANIFESTS_DIR, type ManifestDoc } from '../support/manifests.js';
import { runBuiltEntry, type Finished } from '../support/process.js';
import { prometheusUnavailable, startPrometheus, type PrometheusServer } from '../support/prometheus-server.js';
import { spawnSidecar, type SidecarProcess } from '../support/sidecar-process.js';

// Four sidecars, four emulators, Prometheus and the CLI, with drains timed by their quiet periods: never beside
// another such file (see test/support/exclusive.ts).
runsAlone();

const skip = prometheusUnavailable() ?? false;

const NAMESPACE = 'edge';
const WINDOW = '7d';
/** Fast drains: the sidecar polls Envoy every 100 ms, from 300 ms after the health checks failed. */
// A generous admin timeout: the emulators answer from this test's process, busy with the rest on a loaded machine.
const FAST = ['--check-interval=100ms', '--check-delay=300ms', '--admin-timeout=5s'];

/** One workload's pod: its controller (what the PodMonitor's relabelings put on its series), its Envoy and sidecar. */
interface WorkloadSpec {
  /** addPod's owner: `Deployment/envoy` is a pod of ReplicaSet envoy-7d9f. */
  readonly owner: string;
  readonly pod: string;
  /** The pod's controller as Kubernetes service discovery reports it (__meta_kubernetes_pod_controller_*). */
  readonly controller: { readonly kind: string; readonly name: string };
  readonly emulator: EnvoyEmulatorOptions;
  /** The sidecar's drain flags: the real sidecar runs with them, and the pod spec check reads carries them. */
  readonly drainFlags: readonly string[];
  readonly drainTimeoutMs: number;
  readonly graceSeconds: number;
}

/** Envoy's listener stats that tell new clients from the rest, trimmed by a stats_matcher (the admin listener's kept). */
const NEW_CONNECTIONS_TRIMMED = ['^listener\\.(?!admin\\.).*\\.downstream_cx_total$'];

const WORKLOADS = {
  balanced: {
    owner: 'Deployment/envoy',
    pod: 'envoy-7d9f-a',
    controller: { kind: 'ReplicaSet', name: 'envoy-7d9f' },
    emulator: {},
    drainFlags: [...FAST, '--quiet-period=1s'],
    drainTimeoutMs: 15_000,
    graceSeconds: 20,
  },
  polled: {
    owner: 'StatefulSet/polled',
    pod: 'polled-0',
    controller: { kind: 'StatefulSet', name: 'polled' },
    emulator: {},
    drainFlags: [...FAST, '--quiet-period=1s'],
    drainTimeoutMs: 4_000,
    graceSeconds: 10,
  },
  trimmed: {
    owner: 'DaemonSet/trimmed',
    pod: 'trimmed-x2k4p',
    controller: { kind: 'DaemonSet', name: 'trimmed' },
    emulator: { statsExclusion: NEW_CONNECTIONS_TRIMMED },
    drainFlags: [...FAST, '--quiet-period=500ms'],
    drainTimeoutMs: 10_000,
    graceSeconds: 15,
  },
  idle: {
    owner: 'Deployment/idle',
    pod: 'idle-7d9f-a',
    controller: { kind: 'ReplicaSet', name: 'idle-7d9f' },
    emulator: {},
    drainFlags: [...FAST, '--quiet-period=1s'],
    drainTimeoutMs: 15_000,
    graceSeconds: 20,
  },
} as const satisfies Record<string, WorkloadSpec>;

type WorkloadName = keyof typeof WORKLOADS;

interface Running {
  readonly spec: WorkloadSpec;
  readonly emulator: EnvoyEmulator;
  readonly sidecar: SidecarProcess;
}

/** The job's relabel_configs: what the Prometheus Operator generates for every PodMonitor, then the PodMonitor's own. */
async function podMonitorRelabelConfigs(): Promise<Record<string, unknown>[]> {
  const file = join(MANIFESTS_DIR, 'monitoring', 'podmonitors.yaml');
  const docs: ManifestDoc[] = (await loadYamlFile(file)).filter(isObject).map((value) => ({ file, value }));
  const monitor = findOne(docs, 'PodMonitor', 'envoy-shutdown-manager-sidecars');
  const endpoint = getObject(monitor, ['spec', 'podMetricsEndpoints', 0]);
  // The Operator's own, on every PodMonitor target: the pod's namespace, name and container as labels.
  const operator = [
    { source_labels: ['__meta_kubernetes_namespace'], target_label: 'namespace' },
    { source_labels: ['__meta_kubernetes_pod_container_name'], target_label: 'container' },
    { source_labels: ['__meta_kubernetes_pod_name'], target_label: 'pod' },
    { target_label: 'endpoint', replacement: getString(endpoint, ['port']) },
  ];
  // The PodMonitor's, as written (the Operator's camelCase fields are Prometheus's snake_case ones).
  const own = getArray(endpoint, ['relabelings']).filter(isObject).map((relabeling) =>
    Object.fromEntries(Object.entries(relabeling).map(([field, value]) => [field.replace(/[A-Z]/g, (letter) => `_${letter.toLowerCase()}`), value])),
  );
  assert.ok(own.length > 0, 'the sidecars\' PodMonitor relabels its targets with their controller');
  return [...operator, ...own];
}

/** prometheus.yml: one job scraping every sidecar's /metrics each second, each target with its pod's discovery labels. */
async function prometheusConfig(running: readonly Running[]): Promise<string> {
  return stringify({
    global: { scrape_interval: '1s', scrape_timeout: '1s' },
    scrape_configs: [
      {
        job_name: 'podMonitor/envoy-shutdown-manager/envoy-shutdown-manager-sidecars/0',
        metrics_path: '/metrics',
        scheme: 'http',
        // Service discovery's labels, as Kubernetes SD would give each pod's port: the relabelings below read them.
        static_configs: running.map(({ spec, sidecar }) => ({
          targets: [`127.0.0.1:${sidecar.port}`],
          labels: {
            __meta_kubernetes_namespace: NAMESPACE,
            __meta_kubernetes_pod_name: spec.pod,
            __meta_kubernetes_pod_container_name: SIDECAR_CONTAINER_NAME,
            __meta_kubernetes_pod_controller_kind: spec.controller.kind,
            __meta_kubernetes_pod_controller_name: spec.controller.name,
          },
        })),
        relabel_configs: await podMonitorRelabelConfigs(),
      },
    ],
  });
}

/** New clients (one request each, on a new connection) every `everyMs` for `forMs`; resolves when done. */
async function clientsEvery(port: number, everyMs: number, forMs: number): Promise<void> {
  const until = Date.now() + forMs;
  // Bounded by forMs, and by a count in case the clock misbehaves.
  for (let sent = 0; sent < 10_000 && Date.now() < until; sent += 1) {
    await httpRequest(`http://127.0.0.1:${port}/`, { timeoutMs: 2_000 }).catch(() => undefined);
    await sleep(everyMs);
  }
}

/** Envoy's preStop hook: GET /shutdown, answered once the drain is over with its outcome (503 for one cut at its deadline). */
async function shutdown(sidecar: SidecarProcess): Promise<DrainOutcome> {
  const answer = await httpRequest(sidecar.url('/shutdown'), { headers: { accept: 'application/json' }, timeoutMs: 30_000 });
  assert.ok(answer.status === 200 || answer.status === 503, `${answer.status}: ${answer.body}`);
  return JSON.parse(answer.body) as DrainOutcome;
}

function findings(report: CheckReport, check: string): Finding[] {
  return report.findings.filter((finding) => finding.check === check);
}

function row(report: CheckReport, name: string): WorkloadDrain | undefined {
  return report.drains.workloads.find((workload) => workload.name === name);
}

function who(name: WorkloadName): string {
  const { owner } = WORKLOADS[name];
  return `${owner.split('/')[0]} ${NAMESPACE}/${owner.split('/')[1]}`;
}

/** The sidecar's own /metrics: the stats it reported missing (value 1), by name. */
async function statsReportedMissing(sidecar: SidecarProcess): Promise<string[]> {
  const text = await httpRequest(sidecar.url('/metrics')).then((answer) => answer.body);
  return [...text.matchAll(/^shutdown_manager_envoy_stats_missing\{stat="([^"]+)"\} 1$/gm)].map((match) => match[1] as string).sort();
}

/**
 * Until `query` (a count) evaluates to `expected`, polled every 250 ms (each poll is a query: gentle on 2 cores),
 * failing after a minute: scrapes come each second, so that is dozens of them.
 */
async function untilCounted(prometheus: PrometheusServer, query: string, expected: number, what: string): Promise<void> {
  const deadline = Date.now() + 60_000;
  let last = 'no answer';
  while (Date.now() < deadline) {
    const answer = await prometheus.query(query);
    last = JSON.stringify(answer.data?.result ?? answer);
    if (answer.data?.result[0]?.value[1] === String(expected)) return;
    await sleep(250);
  }
  throw new Error(`timed out after 60 s waiting for ${what}: ${query} is ${last}, not ${expected}\n${prometheus.log()}`);
}

describe('check --prometheus-url against a real Prometheus scraping real sidecars', { skip }, () => {
  let dir: string | undefined;
  let cluster: CheckCluster;
  let prometheus: PrometheusServer | undefined;
  let front: ServiceProxyFront | undefined;
  const running = new Map<WorkloadName, Running>();

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'check-prometheus-'));
    cluster = await startCheckCluster();
    await installWebhook(cluster.fake);
    addNamespace(cluster.fake, NAMESPACE);
    for (const [name, spec] of Object.entries(WORKLOADS) as [WorkloadName, WorkloadSpec][]) {
      addPod(cluster.fake, NAMESPACE, spec.pod, { owner: spec.owner, drainTimeoutMs: spec.drainTimeoutMs, graceSeconds: spec.graceSeconds, sidecarArgs: spec.drainFlags });
      const emulator = await EnvoyEmulator.start({ healthCheckPath: '/healthz', ...spec.emulator });
      const sidecar = await spawnSidecar([`--admin-port=${emulator.ports.admin}`, `--drain-timeout=${spec.drainTimeoutMs}ms`, ...spec.drainFlags]).catch(async (error: unknown) => {
        await emulator.close();
        throw error;
      });
      running.set(name, { spec, emulator, sidecar });
      await sidecar.waitForLog((line) => line['event'] === 'envoy_admin_reachable', 10_000);
    }
    const started = await startPrometheus(dir, await prometheusConfig([...running.values()]));
    prometheus = started;
    // Every sidecar scraped once it had read Envoy (its stats check is the first read): the state before any drain.
    await untilCounted(started, 'count(count by (pod) (shutdown_manager_envoy_stats_missing))', running.size, 'the sidecars scraped after their first read of Envoy');
  });

  after(async () => {
    await front?.close();
    await prometheus?.stop();
    await Promise.all([...running.values()].map(async ({ emulator, sidecar }) => Promise.all([sidecar.kill(), emulator.close()])));
    await cluster?.close();
    if (dir !== undefined) await rm(dir, { recursive: true, force: true });
  });

  function check(...args: string[]): Promise<Finished> {
    return runBuiltEntry(['check', '--kubeconfig', cluster.kubeconfig, ...args], { timeoutMs: 60_000 });
  }

  async function checkJson(...args: string[]): Promise<CheckReport> {
    const run = await check('--output', 'json', '--prometheus-url', prometheus!.url, ...args);
    // stderr names a Prometheus that could not be read; exit 0: warnings only, no check failed.
    assert.equal(run.stderr, '', 'nothing on stderr: Prometheus was read');
    assert.equal(run.code, 0, run.stdout);
    return JSON.parse(run.stdout) as CheckReport;
  }

  /** Every query check sends, sent to Prometheus here: each must be valid PromQL that evaluates to a vector. */
  async function assertQueriesEvaluate(): Promise<Map<string, number>> {
    const sizes = new Map<string, number>();
    for (const query of [lagQuery(WINDOW), ...Object.values(SIDE_QUERIES).map((side) => side(WINDOW))]) {
      const answer = await prometheus!.query(query);
      assert.deepEqual([answer.httpStatus, answer.status, answer.error], [200, 'success', undefined], query);
      assert.equal(answer.data?.resultType, 'vector', query);
      sizes.set(query, answer.data.result.length);
    }
    return sizes;
  }

  test('before any drain: every query evaluates, and check says no drain was seen, with no lag figure for any workload', async () => {
    const sizes = await assertQueriesEvaluate();
    assert.equal(sizes.get(lagQuery(WINDOW)), 0, 'no lag series: no drain yet');

    const report = await checkJson();
    assert.deepEqual(report.drains.lag, { status: 'read', source: prometheus!.url, window: WINDOW, query: lagQuery(WINDOW) });
    const [read] = findings(report, 'drains.prometheus');
    assert.equal(read?.status, 'info');
    assert.match(read?.message ?? '', new RegExp(`^the load balancer's lag read from ${prometheus!.url.replace(/\./g, '\\.')} over 7d: no drain seen \\(no shutdown_manager_load_balancer_lag_seconds sample in 7d\\)$`));
    assert.deepEqual(
      report.drains.workloads.map(({ kind, name, loadBalancerLagSeconds }) => [kind, name, loadBalancerLagSeconds]),
      [
        ['Deployment', 'envoy', null],
        ['StatefulSet', 'polled', null],
        ['DaemonSet', 'trimmed', null],
        ['Deployment', 'idle', null],
      ],
      'a row per workload, followed from the pod to its controller, and no lag figure',
    );
    for (const name of ['drains.lag-near-deadline', 'drains.lag-beyond-check-delay', 'drains.held-by-traffic', 'drains.unobserved', 'drains.check-delay']) {
      assert.deepEqual(findings(report, name), [], `${name}: nothing drained, nothing to say`);
    }
    // Control of the control: what the sidecars report at start is read all the same. The trimmed Envoy's sidecar
    // said so before any drain, and the query found it, by its workload.
    const missing = findings(report, 'drains.envoy-stats-missing');
    assert.deepEqual(missing.map((finding) => finding.message.split(':')[0]), [who('trimmed')]);

    const text = await check('--prometheus-url', prometheus!.url);
    for (const name of Object.keys(WORKLOADS) as WorkloadName[]) {
      assert.match(text.stdout, new RegExp(`\\n  ${who(name).replace('/', '\\/')} .* no drain seen\\n`), `${who(name)}: said, not a default figure`);
    }
  });

  describe('after real drains', () => {
    let balancedOutcome: DrainOutcome;
    let polledOutcome: DrainOutcome;
    let trimmedOutcome: DrainOutcome;

    // The drains, and the scrapes after them, before both tests: neither depends on the other passing.
    before(async () => {
      const balanced = running.get('balanced')!;
      const polled = running.get('polled')!;
      const trimmed = running.get('trimmed')!;
      // The three at once, each with its traffic: a load balancer that lets go after 2.5 s, a poller that never stops
      // (past the 4 s deadline), and a few clients on the trimmed Envoy.
      [balancedOutcome, polledOutcome, trimmedOutcome] = await Promise.all([
        Promise.all([shutdown(balanced.sidecar), clientsEvery(balanced.emulator.ports.http, 100, 2_500)]).then(([outcome]) => outcome),
        Promise.all([shutdown(polled.sidecar), clientsEvery(polled.emulator.ports.http, 100, 6_000)]).then(([outcome]) => outcome),
        Promise.all([shutdown(trimmed.sidecar), clientsEvery(trimmed.emulator.ports.http, 100, 1_000)]).then(([outcome]) => outcome),
      ]);
      const drainsOver = Date.now() / 1000;
      // Every target scraped after every drain was over: Prometheus holds the sidecars' final series.
      await untilCounted(prometheus!, `count(timestamp(up == 1) > ${drainsOver})`, running.size, 'the sidecars scraped after the drains');
    });

    test('the lag the sidecar measured, the poller, the blind listeners and the check-delay, each named by its workload, from the scraped series', async (t) => {
      const trimmed = running.get('trimmed')!;
      for (const [name, outcome] of [['balanced', balancedOutcome], ['polled', polledOutcome], ['trimmed', trimmedOutcome]] as const) {
        t.diagnostic(`${name}: ${outcome.reason}, lag ${outcome.loadBalancer.lagMs} ms, sight ${outcome.loadBalancer.sight}: ${(outcome as DrainOutcome & { description?: string }).description ?? ''}`);
      }
      // What the sidecars measured, which check must report: the facts the assertions below derive from.
      const lagMs = balancedOutcome.loadBalancer.lagMs;
      assert.ok(lagMs !== null && lagMs >= 2_000, `the balancer's lag measured: ${lagMs} ms`);
      assert.equal(balancedOutcome.reason, 'connections-closed');
      assert.equal(polledOutcome.reason, 'deadline', 'the poller held the drain to its deadline');
      assert.equal(trimmedOutcome.loadBalancer.lagMs, null, 'the trimmed Envoy hid new clients: no lag, never 0');
      const blindSpots = trimmedOutcome.loadBalancer.blindSpots;
      assert.ok(blindSpots.length > 0, 'blind listeners named');

      const sizes = await assertQueriesEvaluate();
      for (const [query, size] of sizes) assert.ok(size > 0, `${query} finds the drains' series`);

      const report = await checkJson();
      // What check read, for a failure below to be understood from the log.
      t.diagnostic(`check's drains: ${JSON.stringify(report.drains.workloads.map(({ name, loadBalancerLagSeconds }) => [name, loadBalancerLagSeconds]))}`);
      for (const finding of report.findings.filter((entry) => entry.section === 'drains')) t.diagnostic(`${finding.check} ${finding.status}: ${finding.message}`);
      const [read] = findings(report, 'drains.prometheus');
      assert.deepEqual([read?.status, read?.message.replace(/^.* over 7d: /, '')], ['ok', 'drains seen for 2 of 4 workloads']);

      // The lag: exactly the sidecar's figure (a float through prom-client's text, Prometheus and its JSON), on the
      // row of the Deployment its ReplicaSet was followed to; the poller's time is reported as what it was too.
      assert.equal(row(report, 'envoy')?.loadBalancerLagSeconds, lagMs / 1000);
      const polledLag = polledOutcome.loadBalancer.lagMs;
      assert.equal(row(report, 'polled')?.loadBalancerLagSeconds, polledLag === null ? null : polledLag / 1000);
      assert.deepEqual([row(report, 'trimmed')?.loadBalancerLagSeconds, row(report, 'idle')?.loadBalancerLagSeconds], [null, null], 'not observed, not drained: no figure');
      const text = await check('--prometheus-url', prometheus!.url);
      assert.match(text.stdout, new RegExp(`\\n  Deployment edge\\/envoy .* ${seconds(lagMs / 1000).replace('.', '\\.')}\\n`), 'the LB LAG column shows it');
      assert.match(text.stdout, /\n {2}Deployment edge\/idle .* no drain seen\n/);

      // The poller: held-by-traffic from its gauge, and the near-deadline warning blames it rather than asking for a
      // longer grace period.
      const held = findings(report, 'drains.held-by-traffic');
      assert.deepEqual(held.map((finding) => [finding.status, finding.message.split(':')[0]]), [['warning', who('polled')]]);
      const near = findings(report, 'drains.lag-near-deadline');
      assert.deepEqual(near.map((finding) => finding.message.split(':')[0]), [who('polled')], 'only the polled workload came near its deadline');
      assert.match(near[0]?.message ?? '', /a poller, which never stops \(drains\.held-by-traffic\); a longer grace period cannot help/);

      // The trimmed Envoy: each blind listener's reason and count as its sidecar reported them.
      const unobserved = findings(report, 'drains.unobserved');
      assert.deepEqual(unobserved.map((finding) => [finding.status, finding.message.split(':')[0]]), [['warning', who('trimmed')]]);
      // How check words each reason the sidecar gives (the start of its explanation).
      const worded: Record<string, string> = {
        'new-connections-missing': 'no listener.<listener>.downstream_cx_total',
        'arrival-counters-missing': 'neither listener.<listener>.downstream_cx_total',
      };
      for (const { reason, count } of blindSpots) {
        assert.ok(reason in worded, `a reason this test knows: ${reason}`);
        const listeners = `${count} listener${count === 1 ? '' : 's'}`;
        assert.ok(unobserved[0]?.message.includes(`${listeners}, ${worded[reason]}`), `${reason}: ${unobserved[0]?.message}`);
      }
      const missing = findings(report, 'drains.envoy-stats-missing');
      assert.deepEqual(missing.map((finding) => finding.message.split(':')[0]), [who('trimmed')]);
      const reported = await statsReportedMissing(trimmed.sidecar);
      assert.ok(reported.length > 0, 'the trimmed Envoy\'s sidecar exports the stats it lacks');
      for (const stat of reported) assert.ok(missing[0]?.message.includes(`${stat}: `), `${stat} named: ${missing[0]?.message}`);

      // The check-delay, from the histogram of settled lags (increase() over real scrapes): the bucket the measured
      // lag fell in. Only the balanced drain settled one: the poller's never did, and the trimmed one saw none.
      const bound = LAG_BUCKETS_SECONDS.find((upper) => upper >= lagMs / 1000);
      assert.notEqual(bound, undefined);
      const delays = findings(report, 'drains.check-delay');
      assert.deepEqual(delays.map((finding) => finding.message.split(':')[0]), [who('balanced')]);
      assert.match(delays[0]?.message ?? '', new RegExp(`99 % of its drains saw the load balancer let go within ${seconds(bound!)} of the health-check failure`));
    });

    // The same series, read the other way check reaches Prometheus.
    test('--prometheus: the same Prometheus through the API server\'s service proxy gives the same drains', async () => {
      front = await serviceProxyFront(cluster.fake, { port: Number(new URL(prometheus!.url).port) }, { namespace: 'monitoring', name: 'prometheus-operated', port: '9090' });
      const kubeconfig = `${cluster.kubeconfig}-front`;
      await writeFile(kubeconfig, kubeconfigYaml(front.url, front.caPem, cluster.fake.token));
      const [direct, proxied] = await Promise.all([
        checkJson(),
        runBuiltEntry(['check', '--kubeconfig', kubeconfig, '--output', 'json', '--prometheus', 'monitoring/prometheus-operated:9090'], { timeoutMs: 60_000 }),
      ]);
      assert.equal(proxied.stderr, '', 'read through the proxy');
      const report = JSON.parse(proxied.stdout) as CheckReport;
      assert.match(report.drains.lag.source ?? '', /^Service monitoring\/prometheus-operated:9090 \(through the API server https:\/\/127\.0\.0\.1:\d+\)$/);
      assert.equal(front.proxied.length, 1 + Object.keys(SIDE_QUERIES).length, 'every query went through the proxy');
      const drains = (of: CheckReport): Finding[] => of.findings.filter((finding) => finding.section === 'drains' && finding.check !== 'drains.prometheus');
      assert.deepEqual(report.drains.workloads, direct.drains.workloads);
      assert.deepEqual(drains(report), drains(direct));
      // Not two empty lists: the findings the drains above gave, each query's.
      assert.deepEqual(
        [...new Set(drains(report).map((finding) => finding.check))].sort(),
        ['drains.check-delay', 'drains.envoy-stats-missing', 'drains.held-by-traffic', 'drains.lag-near-deadline', 'drains.unobserved'],
      );
    });
  });
});
