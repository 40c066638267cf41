/**
 * The alerts of manifests/monitoring, checked by Prometheus's own tool: `promtool check rules` parses every
 * expression and template, and `promtool test rules` evaluates each alert on series shaped as the webhook and
 * the sidecar export them (monitoring.test.ts checks those names against running processes), with a series
 * that must not fire beside each one that must. CI installs promtool (Debian's prometheus package, .ci/run);
 * elsewhere the tests are skipped when it is missing.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { stringify } from 'yaml';
import { MANIFESTS_DIR, findOne, getArray, getString, resolveKustomization, type JsonObject } from '../support/manifests.js';

const promtool = spawnSync('promtool', ['--version'], { encoding: 'utf8' });
const available = promtool.status === 0;
// In CI, .ci/run installs it, and says why when it could not (PROMTOOL_UNAVAILABLE): missing otherwise is a bug.
const unavailable = process.env['PROMTOOL_UNAVAILABLE'];
if (!available && process.env['CI'] === 'true' && unavailable === undefined) throw new Error('promtool is missing: .ci/run installs it (Debian package prometheus)');
const skip = available ? false : `promtool is not installed (${unavailable ?? 'apt-get install prometheus'}); CI runs these`;

/** One `promtool test rules` case: the series, and what the alert must be at each time. */
interface AlertCase {
  readonly alert: string;
  readonly series: Readonly<Record<string, string>>;
  /** At each time, the alerts firing: their labels, and their summary as its template renders it. */
  readonly expect: readonly { readonly at: string; readonly firing: readonly { readonly labels: Readonly<Record<string, string>>; readonly summary: string }[] }[];
}

const POD = { namespace: 'edge', pod: 'envoy-0' };

const CASES: readonly AlertCase[] = [
  {
    alert: 'ShutdownManagerEnvoyAdminUnreachable',
    series: {
      // A wrong admin port: never up.
      'shutdown_manager_envoy_admin_up{namespace="edge",pod="envoy-0"}': '0x10',
      // A healthy pod.
      'shutdown_manager_envoy_admin_up{namespace="edge",pod="envoy-1"}': '1x10',
      // A pod being deleted: its Envoy exits two minutes before the pod is gone.
      'shutdown_manager_envoy_admin_up{namespace="edge",pod="envoy-2"}': '1 1 1 0 0 _ _ _ _ _ _',
    },
    expect: [
      { at: '4m', firing: [] },
      { at: '6m', firing: [{ labels: { ...POD, severity: 'warning' }, summary: "edge/envoy-0: the shutdown manager cannot reach Envoy's admin API." }] },
    ],
  },
  {
    alert: 'ShutdownManagerDrainAtDeadline',
    series: {
      // 20 s left of a 300 s drain, 3 connections open: they will be cut.
      'shutdown_manager_drain_remaining_seconds{namespace="edge",pod="envoy-0"}': '20x3',
      'shutdown_manager_drain_duration_seconds{namespace="edge",pod="envoy-0"}': '280x3',
      'shutdown_manager_drain_state{namespace="edge",pod="envoy-0",state="draining"}': '1x3',
      'shutdown_manager_open_connections{namespace="edge",pod="envoy-0",listener="ingress"}': '3x3',
      // Early in its drain: fine.
      'shutdown_manager_drain_remaining_seconds{namespace="edge",pod="envoy-1"}': '250x3',
      'shutdown_manager_drain_duration_seconds{namespace="edge",pod="envoy-1"}': '50x3',
      'shutdown_manager_drain_state{namespace="edge",pod="envoy-1",state="draining"}': '1x3',
      'shutdown_manager_open_connections{namespace="edge",pod="envoy-1",listener="ingress"}': '3x3',
    },
    expect: [{ at: '1m', firing: [{ labels: { ...POD, severity: 'warning' }, summary: 'edge/envoy-0 is draining with 20s left and connections still open: they will be cut.' }] }],
  },
  {
    alert: 'ShutdownManagerWebhookDown',
    // Scraped until 1m, then gone: absent once the last sample is 5 minutes stale (6m), firing 5 minutes later.
    series: { 'shutdown_manager_webhook_injections_total{namespace="envoy-shutdown-manager",pod="webhook-0"}': '5 5' },
    expect: [
      { at: '9m', firing: [] },
      { at: '12m', firing: [{ labels: { severity: 'warning' }, summary: 'No envoy-shutdown-manager webhook replica is being scraped.' }] },
    ],
  },
];

describe('promtool: the alerts of manifests/monitoring', { skip }, () => {
  let directory = '';
  let rulesFile = '';

  before(async () => {
    const rule = findOne(await resolveKustomization(join(MANIFESTS_DIR, 'monitoring')), 'PrometheusRule');
    const groups = getArray(rule, ['spec', 'groups']) as JsonObject[];
    for (const entry of groups.flatMap((group) => getArray(group, ['rules']) as JsonObject[])) {
      descriptions.set(String(entry['alert']), getString(entry, ['annotations', 'description']));
    }
    directory = await mkdtemp(join(tmpdir(), 'esm-promtool-'));
    rulesFile = join(directory, 'rules.yaml');
    await writeFile(rulesFile, stringify({ groups }));
  });
  after(() => rm(directory, { recursive: true, force: true }));

  test('promtool check rules accepts every rule', () => {
    const result = spawnSync('promtool', ['check', 'rules', rulesFile], { encoding: 'utf8', timeout: 30_000 });
    assert.equal(result.status, 0, `${result.stdout}${result.stderr}`);
    assert.match(result.stdout, /SUCCESS: \d+ rules found/);
  });

  for (const alertCase of CASES) {
    test(`promtool test rules: ${alertCase.alert} fires for what it must and only that`, async () => {
      const testFile = join(directory, `${alertCase.alert}.test.yaml`);
      await writeFile(testFile, stringify(unitTest(alertCase, rulesFile)));
      const result = spawnSync('promtool', ['test', 'rules', testFile], { encoding: 'utf8', timeout: 30_000 });
      assert.equal(result.status, 0, `${result.stdout}${result.stderr}`);
    });
  }

  test('a negative control: a case that expects the wrong alert fails', async () => {
    const base = CASES[0] as AlertCase;
    const wrong: AlertCase = { ...base, expect: [{ at: '6m', firing: [{ labels: { namespace: 'edge', pod: 'envoy-1', severity: 'warning' }, summary: '' }] }] };
    const testFile = join(directory, 'wrong.test.yaml');
    await writeFile(testFile, stringify(unitTest(wrong, rulesFile)));
    const result = spawnSync('promtool', ['test', 'rules', testFile], { encoding: 'utf8', timeout: 30_000 });
    assert.notEqual(result.status, 0, 'promtool must catch an alert that fires for another pod');
  });
});

/** Each alert's description, as written (none has a template): promtool compares every annotation. */
const descriptions = new Map<string, string>();

/** The unit-test file of `promtool test rules`. */
function unitTest(alertCase: AlertCase, rulesFile: string): JsonObject {
  return {
    rule_files: [rulesFile],
    evaluation_interval: '1m',
    tests: [
      {
        interval: '1m',
        input_series: Object.entries(alertCase.series).map(([series, values]) => ({ series, values })),
        alert_rule_test: alertCase.expect.map(({ at, firing }) => ({
          eval_time: at,
          alertname: alertCase.alert,
          exp_alerts: firing.map(({ labels, summary }) => ({
            exp_labels: labels,
            exp_annotations: { summary, description: descriptions.get(alertCase.alert) ?? '' },
          })),
        })),
      },
    ],
  };
}
