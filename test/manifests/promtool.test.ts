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
import { MANIFESTS_DIR, findOne, getArray, getObject, resolveKustomization, type JsonObject } from '../support/manifests.js';

const promtool = spawnSync('promtool', ['--version'], { encoding: 'utf8' });
const available = promtool.status === 0;
// In CI, .ci/run installs it, and says why when it could not (PROMTOOL_UNAVAILABLE): missing otherwise is a bug.
const unavailable = process.env['PROMTOOL_UNAVAILABLE'];
if (!available && process.env['CI'] === 'true' && unavailable === undefined) throw new Error('promtool is missing: .ci/run installs it (Debian package prometheus)');
const skip = available ? false : `promtool is not installed (${unavailable ?? 'apt-get install prometheus'}); CI runs these`;

/** An alert expected to fire: its labels, and its summary as rendered. */
interface Firing {
  readonly labels: Readonly<Record<string, string>>;
  readonly summary: string;
  /** `$value` as a description that shows it renders it. */
  readonly descriptionValue?: string;
}

/** One `promtool test rules` case: the series, and what the alert must be at each time. */
interface AlertCase {
  readonly alert: string;
  readonly series: Readonly<Record<string, string>>;
  /** At each time, the alerts firing; every case has a series that must not fire beside one that must. */
  readonly expect: readonly { readonly at: string; readonly firing: readonly Firing[] }[];
}

const POD = { namespace: 'edge', pod: 'envoy-0' };
const WEBHOOK_POD = { namespace: 'envoy-shutdown-manager', pod: 'webhook-0' };
/** The webhook's name in manifests/base/mutatingwebhookconfiguration.yaml: the API server's `name` label. */
const WEBHOOK_NAME = 'inject.shutdown-manager.io';
/** Labels the API server's series carry when kube-prometheus-stack scrapes it. */
const API_SERVER = 'instance="10.0.0.1:6443",job="apiserver"';
const DAY = 86_400;
/** The series of one webhook replica's certificate expiry (promtool's clock starts at the epoch). */
const expiry = (pod: string): string => `shutdown_manager_webhook_certificate_expiry_timestamp_seconds{namespace="envoy-shutdown-manager",pod="${pod}"}`;

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
  {
    alert: 'ShutdownManagerWebhookErrors',
    series: {
      // Three 5xx at 3m, none since.
      'shutdown_manager_webhook_reviews_total{namespace="envoy-shutdown-manager",pod="webhook-0",result="error"}': '0 0 0 3x20',
      // Reviews answered fine all along.
      'shutdown_manager_webhook_reviews_total{namespace="envoy-shutdown-manager",pod="webhook-0",result="injected"}': '0+5x23',
    },
    expect: [
      { at: '4m', firing: [] },
      { at: '6m', firing: [{ labels: { severity: 'warning' }, summary: 'The webhook answered about 3 AdmissionReviews with a 5xx in 10 minutes.' }] },
      // Out of the 10-minute window.
      { at: '20m', firing: [] },
    ],
  },
  {
    alert: 'ShutdownManagerPodsDenied',
    series: {
      'shutdown_manager_webhook_denials_total{namespace="envoy-shutdown-manager",pod="webhook-0",reason="check-delay"}': '0 0 2x10',
      // Denied once, long before: no increase in the window.
      'shutdown_manager_webhook_denials_total{namespace="envoy-shutdown-manager",pod="webhook-0",reason="drain-timeout"}': '1x12',
    },
    expect: [
      {
        at: '6m',
        firing: [
          {
            labels: { reason: 'check-delay', severity: 'warning' },
            summary: 'Envoy pods denied for a bad shutdown-manager.io/check-delay annotation.',
            descriptionValue: '2',
          },
        ],
      },
    ],
  },
  {
    alert: 'ShutdownManagerWebhookCertificateExpiresSoon',
    series: {
      // Expires 10 days after promtool's epoch: within 14 days.
      [expiry('webhook-0')]: `${10 * DAY}x200`,
      // 40 days: fine. 0: unknown, not 1970.
      [expiry('webhook-1')]: `${40 * DAY}x200`,
      [expiry('webhook-2')]: '0x200',
    },
    expect: [
      // Pending for an hour first.
      { at: '30m', firing: [] },
      { at: '2h', firing: [{ labels: { ...WEBHOOK_POD, severity: 'warning' }, summary: 'envoy-shutdown-manager/webhook-0 serves a certificate that expires on 1970-01-11 00:00:00 +0000 UTC.' }] },
    ],
  },
  {
    alert: 'ShutdownManagerWebhookCertificateNearlyExpired',
    series: {
      [expiry('webhook-0')]: `${2 * DAY}x30`,
      // 10 days: the warning's, not this one's.
      [expiry('webhook-1')]: `${10 * DAY}x30`,
      [expiry('webhook-2')]: '0x30',
    },
    expect: [
      { at: '5m', firing: [] },
      {
        at: '15m',
        firing: [
          {
            labels: { ...WEBHOOK_POD, severity: 'critical' },
            summary: 'envoy-shutdown-manager/webhook-0 serves a certificate that expires on 1970-01-03 00:00:00 +0000 UTC: in less than 3 days, or already.',
          },
        ],
      },
    ],
  },
  {
    alert: 'ShutdownManagerWebhookFailOpen',
    series: {
      // Two pods admitted without calling our webhook at 3m.
      [`apiserver_admission_webhook_fail_open_count{${API_SERVER},name="${WEBHOOK_NAME}",type="admit"}`]: '0 0 0 2x20',
      // Another webhook failing open: not ours.
      [`apiserver_admission_webhook_fail_open_count{${API_SERVER},name="other.example.com",type="admit"}`]: '0 0 0 5x20',
    },
    expect: [
      { at: '3m', firing: [] },
      {
        at: '5m',
        firing: [
          {
            labels: { name: WEBHOOK_NAME, severity: 'warning' },
            summary: `The API server could not call the webhook ${WEBHOOK_NAME} and admitted about 2 pods without the sidecar in 10 minutes (failurePolicy Ignore).`,
          },
        ],
      },
      { at: '20m', firing: [] },
    ],
  },
  {
    alert: 'ShutdownManagerWebhookCallsRejected',
    series: {
      [`apiserver_admission_webhook_rejection_count{${API_SERVER},name="${WEBHOOK_NAME}",type="admit",operation="CREATE",error_type="calling_webhook_error",rejection_code="500"}`]:
        '0 0 0 4x20',
      // The webhook's own refusals (a bad annotation): ShutdownManagerPodsDenied's, not this alert's.
      [`apiserver_admission_webhook_rejection_count{${API_SERVER},name="${WEBHOOK_NAME}",type="admit",operation="CREATE",error_type="no_error",rejection_code="400"}`]:
        '0 0 0 7x20',
    },
    expect: [
      { at: '3m', firing: [] },
      {
        at: '5m',
        firing: [
          {
            labels: { name: WEBHOOK_NAME, severity: 'critical' },
            summary: `The API server could not call the webhook ${WEBHOOK_NAME} and refused about 4 pod creations in 10 minutes (failurePolicy Fail).`,
          },
        ],
      },
    ],
  },
];

/** Alerts whose promtool case lives elsewhere: monitoring.test.ts runs the lag alert with check's query. */
const TESTED_ELSEWHERE = new Set(['ShutdownManagerLoadBalancerLagNearDeadline']);

describe('promtool: the alerts of manifests/monitoring', { skip }, () => {
  let directory = '';
  let rulesFile = '';

  before(async () => {
    const rule = findOne(await resolveKustomization(join(MANIFESTS_DIR, 'monitoring')), 'PrometheusRule');
    const groups = getArray(rule, ['spec', 'groups']) as JsonObject[];
    for (const entry of groups.flatMap((group) => getArray(group, ['rules']) as JsonObject[])) {
      annotations.set(String(entry['alert']), getObject(entry, ['annotations']) as Record<string, string>);
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

  test('every alert has a case', () => {
    const covered = new Set([...CASES.map((alertCase) => alertCase.alert), ...TESTED_ELSEWHERE]);
    assert.deepEqual([...annotations.keys()].filter((alert) => !covered.has(alert)), []);
    for (const alertCase of CASES) assert.ok(annotations.has(alertCase.alert), `${alertCase.alert}: no such alert`);
  });

  test('a negative control: a case that expects the wrong alert fails', async () => {
    const base = CASES[0] as AlertCase;
    const wrong: AlertCase = { ...base, expect: [{ at: '6m', firing: [{ labels: { namespace: 'edge', pod: 'envoy-1', severity: 'warning' }, summary: '' }] }] };
    const testFile = join(directory, 'wrong.test.yaml');
    await writeFile(testFile, stringify(unitTest(wrong, rulesFile)));
    const result = spawnSync('promtool', ['test', 'rules', testFile], { encoding: 'utf8', timeout: 30_000 });
    assert.notEqual(result.status, 0, 'promtool must catch an alert that fires for another pod');
  });
});

/** Each alert's annotations as written: promtool compares every one. */
const annotations = new Map<string, Readonly<Record<string, string>>>();

/**
 * The annotations an alert fires with: the summary as the case gives it, the others as written, but for a
 * description's `$value`, rendered as the case gives it (any other template would fail promtool's comparison).
 */
function expectedAnnotations(alert: string, firing: Firing): Record<string, string> {
  const written = { ...(annotations.get(alert) ?? {}) };
  if (firing.descriptionValue !== undefined) {
    written['description'] = (written['description'] ?? '').replace(/\{\{ \$value \| printf "%\.0f" \}\}/, firing.descriptionValue);
  }
  return { ...written, summary: firing.summary };
}

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
          exp_alerts: firing.map((one) => ({
            exp_labels: one.labels,
            exp_annotations: expectedAnnotations(alertCase.alert, one),
          })),
        })),
      },
    ],
  };
}
