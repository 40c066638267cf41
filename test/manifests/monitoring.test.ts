/**
 * manifests/monitoring: the PodMonitors scrape what the webhook and the injected sidecar serve, and every
 * query of the dashboard and the alerts names only metrics, labels and label values that a running webhook
 * and sidecar export (scraped here after real reviews and real drains), so that no panel or alert is silently
 * empty. docs/operations/monitoring.md documents every metric exported and every alert.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { before, describe, test } from 'node:test';
import { parseAllDocuments, stringify } from 'yaml';
import { closeAll, httpRequest, openTcpConnections } from '../support/connections.js';
import { CONTROLLER_KIND_LABEL, CONTROLLER_NAME_LABEL, heldByTrafficQuery, lagQuantileQuery, lagQuery, LAG_HISTOGRAM, LAG_METRIC, unobservedQuery } from '../../src/check/drains.js';
import { EnvoyEmulator } from '../../src/emulator/envoy-emulator.js';
import { sampleOf } from '../support/prometheus.js';
import { REPO_ROOT, runBuiltEntry, startWebhook, type WebhookProcess } from '../support/process.js';
import { spawnSidecar, type SidecarProcess } from '../support/sidecar-process.js';
import { FIXTURES, httpsRequest } from '../support/webhook.js';
import {
  MANIFESTS_DIR,
  findOne,
  getArray,
  getObject,
  getString,
  loadKustomization,
  resolveKustomization,
  selects,
  type JsonObject,
} from '../support/manifests.js';

const DIR = join(MANIFESTS_DIR, 'monitoring');
const install = await resolveKustomization(DIR);
const dashboard = JSON.parse(await readFile(join(DIR, 'dashboard.json'), 'utf8')) as JsonObject;
const rule = findOne(install, 'PrometheusRule');
const rules = (getArray(rule, ['spec', 'groups']) as JsonObject[]).flatMap((group) => getArray(group, ['rules']) as JsonObject[]);
const panels = (getArray(dashboard, ['panels']) as JsonObject[]).filter((panel) => panel.type !== 'row');

/** Every PromQL expression, named for messages. */
const queries: { where: string; expr: string }[] = [
  ...panels.flatMap((panel) =>
    (getArray(panel, ['targets']) as JsonObject[]).map((target) => ({ where: `panel "${String(panel.title)}"`, expr: getString(target, ['expr']) })),
  ),
  ...rules.map((entry) => ({ where: `alert ${String(entry.alert)}`, expr: getString(entry, ['expr']) })),
];

/** Labels Prometheus puts on every series of a target (PodMonitor or plain pod discovery), not the program. */
const TARGET_LABELS = new Set(['namespace', 'pod', 'container', 'instance', 'job', 'endpoint', 'le', CONTROLLER_KIND_LABEL, CONTROLLER_NAME_LABEL]);
const KEYWORDS = new Set(['and', 'or', 'unless', 'bool', 'offset', 'by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'Inf', 'NaN', 'inf', 'nan']);

interface Matcher {
  readonly metric: string;
  readonly label: string;
  readonly op: string;
  readonly value: string;
}

/**
 * The metric names and label matchers of a PromQL expression. Enough of PromQL for what dashboards and
 * alerts are written with: selectors with matchers, ranges, functions, aggregations with by/without,
 * vector matching with on/ignoring, Grafana's $variables; anything else fails the balance check.
 */
function readPromql(expr: string): { metrics: string[]; matchers: Matcher[] } {
  let depth = 0;
  for (const char of expr.replace(/"[^"]*"/g, '""')) {
    depth += char === '(' ? 1 : char === ')' ? -1 : 0;
    assert.ok(depth >= 0, `unbalanced parentheses in ${expr}`);
  }
  assert.equal(depth, 0, `unbalanced parentheses in ${expr}`);
  const matchers: Matcher[] = [];
  const metrics: string[] = [];
  let rest = expr.replace(/([A-Za-z_:][\w:]*)?\s*\{([^}]*)\}/g, (_, metric: string | undefined, body: string) => {
    assert.ok(metric !== undefined, `a selector without a metric name in ${expr}`);
    for (const part of body.split(',').filter((text) => text.trim() !== '')) {
      const match = /^\s*([A-Za-z_]\w*)\s*(=~|!~|!=|=)\s*"([^"]*)"\s*$/.exec(part);
      assert.ok(match, `cannot read matcher "${part}" in ${expr}`);
      matchers.push({ metric, label: match[1] as string, op: match[2] as string, value: match[3] as string });
    }
    return ` ${metric} `;
  });
  rest = rest
    .replace(/\[[^\]]*\]/g, ' ')
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ')
    .replace(/\$\w+/g, ' ')
    .replace(/\b\d+(\.\d+)?(e[+-]?\d+)?\b/gi, ' ');
  for (const match of rest.matchAll(/([A-Za-z_:][\w:]*)(\s*\()?/g)) {
    const [, name, call] = match;
    if (call === undefined && !KEYWORDS.has(name as string)) metrics.push(name as string);
  }
  return { metrics: [...new Set([...metrics, ...matchers.map((matcher) => matcher.metric)])], matchers };
}

/** Metric names a /metrics text declares (histograms as their series), and the label values its samples show. */
function exposition(text: string): { names: Set<string>; labels: Map<string, Map<string, Set<string>>> } {
  const names = new Set<string>();
  const labels = new Map<string, Map<string, Set<string>>>();
  for (const line of text.split('\n')) {
    const type = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (type) {
      const [, name, kind] = type as unknown as [string, string, string];
      for (const suffix of kind === 'histogram' ? ['_bucket', '_sum', '_count'] : kind === 'summary' ? ['', '_sum', '_count'] : ['']) names.add(name + suffix);
      continue;
    }
    const sample = /^([A-Za-z_:][\w:]*)(?:\{(.*)\})? /.exec(line);
    if (!sample) continue;
    const [, name, body = ''] = sample as unknown as [string, string, string | undefined];
    names.add(name);
    const byLabel = labels.get(name) ?? new Map<string, Set<string>>();
    labels.set(name, byLabel);
    for (const pair of body.matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) {
      const values = byLabel.get(pair[1] as string) ?? new Set<string>();
      values.add(pair[2] as string);
      byLabel.set(pair[1] as string, values);
    }
  }
  return { names, labels };
}

/** Where each alert's runbook is, as its runbook_url links it. */
const RUNBOOK_FILE = 'docs/operations/alerts.md';
const RUNBOOK_BASE = `https://github.com/envoy-shutdown-manager/envoy-shutdown-manager/blob/main/${RUNBOOK_FILE}`;

/** GitHub's anchor for a heading: lower case, punctuation other than - and _ dropped, spaces as -. */
function githubAnchor(heading: string): string {
  return heading.trim().toLowerCase().replace(/[^\p{L}\p{N}\s_-]/gu, '').replace(/\s/g, '-');
}

/** The anchors of a Markdown file's ATX headings (outside code blocks). */
function markdownAnchors(markdown: string): Set<string> {
  const anchors = new Set<string>();
  let fenced = false;
  for (const line of markdown.split('\n')) {
    if (line.startsWith('```')) fenced = !fenced;
    const heading = fenced ? null : /^#{1,6}\s+(.+?)\s*#*\s*$/.exec(line);
    if (heading) anchors.add(githubAnchor(heading[1] as string));
  }
  return anchors;
}

/**
 * What the Kubernetes API server exports about its calls to admission webhooks, with its labels
 * (k8s.io/apiserver/pkg/admission/metrics/metrics.go; the fail-open count since Kubernetes 1.24). The alerts
 * that read them match `name` on the webhook's name and `type` on admit, the stepType of mutating webhooks.
 */
const API_SERVER_METRICS: Readonly<Record<string, readonly string[]>> = {
  apiserver_admission_webhook_fail_open_count: ['name', 'type'],
  apiserver_admission_webhook_rejection_count: ['name', 'type', 'operation', 'error_type', 'rejection_code'],
};
/** The values the API server gives those labels (error_type: the three WebhookRejectionErrorType constants). */
const API_SERVER_LABEL_VALUES: Readonly<Record<string, readonly string[]>> = {
  type: ['admit', 'validating'],
  error_type: ['calling_webhook_error', 'apiserver_internal_error', 'no_error'],
};

/** Where the metrics are documented. */
const MONITORING_DOC = 'docs/operations/monitoring.md';

/** The values a Metrics table row of docs/operations/monitoring.md lists in backticks for `metric`, e.g. the states of drain_state. */
function documentedValues(page: string, metric: string): Set<string> {
  const row = page.split('\n').find((line) => line.startsWith(`| \`${metric}`));
  return new Set([...(row ?? '').split('|').slice(3).join('|').matchAll(/`([^`]+)`/g)].map((match) => match[1] as string));
}

describe('manifests/monitoring', () => {
  test('is the PodMonitors, the PrometheusRule and the dashboard ConfigMap, as kubectl kustomize renders it', (t) => {
    assert.deepEqual(install.map(({ value }) => `${String(value.kind)}/${String(getObject(value, ['metadata']).name)}`).sort(), [
      'ConfigMap/envoy-shutdown-manager-dashboard',
      'PodMonitor/envoy-shutdown-manager-sidecars',
      'PodMonitor/envoy-shutdown-manager-webhook',
      'PrometheusRule/envoy-shutdown-manager',
    ]);
    const configMap = findOne(install, 'ConfigMap');
    assert.deepEqual(getObject(configMap, ['metadata', 'labels']), { grafana_dashboard: '1' });
    assert.deepEqual(JSON.parse(getString(configMap, ['data', 'dashboard.json'])), dashboard);

    const result = spawnSync('kubectl', ['kustomize', DIR], { encoding: 'utf8', timeout: 20_000 });
    if (result.error !== undefined) return t.skip(`kubectl not available: ${result.error.message}`);
    assert.equal(result.status, 0, result.stderr);
    const rendered = parseAllDocuments(result.stdout).map((doc) => doc.toJS() as JsonObject);
    const key = (value: JsonObject): string => `${String(value.kind)}/${String(getObject(value, ['metadata']).name)}`;
    assert.deepEqual(rendered.map(key).sort(), install.map(({ value }) => key(value)).sort());
    for (const { value } of install) assert.deepEqual(rendered.find((other) => key(other) === key(value)), value, key(value));
  });

  test('every file there is used', async () => {
    const { resources, configMapGenerator } = await loadKustomization(DIR);
    const used = new Set(['kustomization.yaml', ...resources, ...configMapGenerator.flatMap((generator) => generator.files)]);
    assert.deepEqual((await readdir(DIR)).filter((file) => !used.has(file)), []);
  });

  test("the sidecars' PodMonitor scrapes the port the injector gives the sidecar, in every namespace", async () => {
    const monitor = findOne(install, 'PodMonitor', 'envoy-shutdown-manager-sidecars');
    assert.deepEqual(getObject(monitor, ['spec', 'namespaceSelector']), { any: true });
    assert.deepEqual(getObject(monitor, ['spec', 'selector']), {}, 'every pod: the port name picks the injected ones');
    const [endpoint, ...others] = getArray(monitor, ['spec', 'podMetricsEndpoints']) as JsonObject[];
    assert.equal(others.length, 0);
    // The example Envoy Deployment, injected by the built CLI as a user would (the whole injection: --manual).
    const result = await runBuiltEntry(['inject', '--manual', '-f', join(MANIFESTS_DIR, 'example', 'deployment.yaml')], { timeoutMs: 15_000 });
    assert.equal(result.code, 0, result.stderr);
    const deployment = parseAllDocuments(result.stdout).map((doc) => doc.toJS() as JsonObject).find((doc) => doc.kind === 'Deployment');
    const containers = getArray(deployment, ['spec', 'template', 'spec', 'containers']) as JsonObject[];
    const sidecar = containers.find((container) => container.name === 'shutdown-manager');
    assert.ok(sidecar, 'the example is injected');
    const port = (getArray(sidecar, ['ports']) as JsonObject[]).find((candidate) => candidate.name === endpoint?.port);
    assert.ok(port, `the sidecar has a port named ${String(endpoint?.port)}`);
    assert.equal(endpoint?.path, '/metrics');
    assert.equal(endpoint?.scheme, 'http');
  });

  test("the webhook's PodMonitor selects the webhook's pods and scrapes its HTTPS port", async () => {
    const monitor = findOne(install, 'PodMonitor', 'envoy-shutdown-manager-webhook');
    const deployment = findOne(await resolveKustomization(join(MANIFESTS_DIR, 'base')), 'Deployment');
    assert.equal(getString(monitor, ['metadata', 'namespace']), getString(deployment, ['metadata', 'namespace']));
    const labels = getObject(deployment, ['spec', 'template', 'metadata', 'labels']) as Record<string, string>;
    assert.ok(selects(getObject(monitor, ['spec', 'selector']), labels), 'selects the webhook pods');
    const [endpoint] = getArray(monitor, ['spec', 'podMetricsEndpoints']) as JsonObject[];
    const container = (getArray(deployment, ['spec', 'template', 'spec', 'containers']) as JsonObject[])[0];
    assert.ok((getArray(container, ['ports']) as JsonObject[]).some((port) => port.name === endpoint?.port), `port ${String(endpoint?.port)}`);
    assert.equal(endpoint?.scheme, 'https');
    assert.equal(endpoint?.path, '/metrics');
  });

  test("the sidecars' PodMonitor puts the pod's controller on every series, under the labels check reads the lag by", () => {
    const monitor = findOne(install, 'PodMonitor', 'envoy-shutdown-manager-sidecars');
    const [endpoint] = getArray(monitor, ['spec', 'podMetricsEndpoints']) as JsonObject[];
    assert.deepEqual(getArray(endpoint, ['relabelings']), [
      { sourceLabels: ['__meta_kubernetes_pod_controller_kind'], targetLabel: CONTROLLER_KIND_LABEL },
      { sourceLabels: ['__meta_kubernetes_pod_controller_name'], targetLabel: CONTROLLER_NAME_LABEL },
    ]);
    assert.equal(lagQuery('7d'), `max by (namespace, ${CONTROLLER_KIND_LABEL}, ${CONTROLLER_NAME_LABEL}) (max_over_time(${LAG_METRIC}[7d]))`);
    assert.ok(queries.some(({ expr }) => readPromql(expr).metrics.includes(LAG_METRIC)), 'an alert reads the lag check reads');
  });

  test('the alerts: webhook down, errors, denials, certificate expiry, fail-open and refused calls, drains at their deadline, load-balancer lag near it, admin API unreachable; each with severity, summary and description', () => {
    assert.deepEqual(rules.map((entry) => entry.alert).sort(), [
      'ShutdownManagerDrainAtDeadline',
      'ShutdownManagerEnvoyAdminUnreachable',
      'ShutdownManagerLoadBalancerLagNearDeadline',
      'ShutdownManagerPodsDenied',
      'ShutdownManagerWebhookCallsRejected',
      'ShutdownManagerWebhookCertificateExpiresSoon',
      'ShutdownManagerWebhookCertificateNearlyExpired',
      'ShutdownManagerWebhookDown',
      'ShutdownManagerWebhookErrors',
      'ShutdownManagerWebhookFailOpen',
    ]);
    for (const entry of rules) {
      assert.ok(['warning', 'critical', 'info'].includes(getString(entry, ['labels', 'severity'])), String(entry.alert));
      getString(entry, ['annotations', 'summary']);
      getString(entry, ['annotations', 'description']);
    }
  });

  test('every alert has a for: (0s only where keep_firing_for holds a condition that lasts one drain)', () => {
    for (const entry of rules) {
      const wait = getString(entry, ['for'], `alert ${String(entry.alert)}: `);
      assert.match(wait, /^(\d+[smh])+$/, `alert ${String(entry.alert)}: for: ${wait}`);
      if (/^0[smh]$/.test(wait)) assert.equal(typeof entry.keep_firing_for, 'string', `alert ${String(entry.alert)}: for: 0s without keep_firing_for`);
    }
  });

  test("every alert's runbook_url is its own section of docs/operations/alerts.md on GitHub", async () => {
    const headings = markdownAnchors(await readFile(join(REPO_ROOT, RUNBOOK_FILE), 'utf8'));
    for (const entry of rules) {
      const url = getString(entry, ['annotations', 'runbook_url'], `alert ${String(entry.alert)}: `);
      assert.ok(url.startsWith(`${RUNBOOK_BASE}#`), `alert ${String(entry.alert)}: ${url} is not under ${RUNBOOK_BASE}`);
      const anchor = url.slice(RUNBOOK_BASE.length + 1);
      assert.equal(anchor, githubAnchor(String(entry.alert)), `alert ${String(entry.alert)}: links another alert's section (${anchor})`);
      assert.ok(headings.has(anchor), `alert ${String(entry.alert)}: ${RUNBOOK_FILE} has no heading for #${anchor}`);
    }
  });

  test('the runbook test can fail: a heading missing from the file is not an anchor of it', () => {
    assert.equal(markdownAnchors('# Title\n\n## ShutdownManagerWebhookDown\n\ntext ## not a heading\n').has('not-a-heading'), false);
    assert.deepEqual([...markdownAnchors('## ShutdownManagerWebhookDown\n### Two words, here\n')], ['shutdownmanagerwebhookdown', 'two-words-here']);
  });

  test('the dashboard: the panels asked for, a Prometheus data source variable, unique ids, no overlapping panels', () => {
    const titles = panels.map((panel) => String(panel.title));
    for (const title of ['Reviews by result', 'Review latency', 'Injections, skips and denials', 'Drains by outcome', 'Drain duration', 'Open connections at release']) {
      assert.ok(titles.includes(title), `a panel "${title}"`);
    }
    const variables = getArray(dashboard, ['templating', 'list']) as JsonObject[];
    assert.ok(variables.some((variable) => variable.name === 'datasource' && variable.type === 'datasource' && variable.query === 'prometheus'), 'a Prometheus data source variable named datasource');
    for (const panel of panels) {
      assert.deepEqual(panel.datasource, { type: 'prometheus', uid: '${datasource}' }, String(panel.title));
      const refIds = (getArray(panel, ['targets']) as JsonObject[]).map((target) => target.refId);
      assert.equal(new Set(refIds).size, refIds.length, `${String(panel.title)}: refIds`);
    }
    const all = getArray(dashboard, ['panels']) as JsonObject[];
    assert.equal(new Set(all.map((panel) => panel.id)).size, all.length, 'panel ids');
    const boxes = all.map((panel) => ({ title: String(panel.title), ...(getObject(panel, ['gridPos']) as { x: number; y: number; w: number; h: number }) }));
    for (const [index, a] of boxes.entries()) {
      assert.ok(a.x >= 0 && a.x + a.w <= 24, `${a.title} fits the 24 columns`);
      for (const b of boxes.slice(index + 1)) {
        const overlap = a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h;
        assert.ok(!overlap, `${a.title} overlaps ${b.title}`);
      }
    }
  });
});

describe('every query of the dashboard and the alerts, against what a running webhook and sidecar export', () => {
  let exported = '';
  let sidecarScrapes = new Map<SidecarMoment, string>();

  before(async () => {
    sidecarScrapes = await scrapeSidecars();
    exported = (await scrapeWebhook()) + [...sidecarScrapes.values()].join('');
  });

  test("names only exported metrics: the webhook's and the sidecar's, or the API server's own", () => {
    const { names } = exposition(exported);
    for (const { where, expr } of queries) {
      const { metrics } = readPromql(expr);
      assert.ok(metrics.length > 0, `${where}: no metric in ${expr}`);
      for (const metric of metrics) assert.ok(names.has(metric) || metric in API_SERVER_METRICS, `${where}: ${metric} is not exported`);
    }
  });

  test("the API server's metrics: their own labels, this webhook's name, and admit", async () => {
    const configuration = findOne(await resolveKustomization(join(MANIFESTS_DIR, 'base')), 'MutatingWebhookConfiguration');
    const webhookName = getString(configuration, ['webhooks', 0, 'name']);
    let read = 0;
    for (const { where, expr } of queries) {
      const matchers = readPromql(expr).matchers.filter(({ metric }) => metric in API_SERVER_METRICS);
      if (matchers.length === 0) continue;
      read += 1;
      for (const { metric, label, value } of matchers) {
        assert.ok(API_SERVER_METRICS[metric]?.includes(label), `${where}: ${metric} has no label ${label}`);
        const known = label === 'name' ? [webhookName] : (API_SERVER_LABEL_VALUES[label] ?? []);
        assert.ok(known.includes(value), `${where}: ${metric}{${label}="${value}"} (expected one of ${known.join(', ')})`);
      }
      const get = (label: string): string | undefined => matchers.find((matcher) => matcher.label === label)?.value;
      assert.equal(get('name'), webhookName, `${where}: matches the webhook by name`);
      assert.equal(get('type'), 'admit', `${where}: a mutating webhook's calls are type admit`);
    }
    assert.equal(read, 2, 'the fail-open and the refused-calls alerts');
  });

  test("matches only labels the metric has, on values it exports or the Metrics table of the monitoring docs lists", async () => {
    const { labels } = exposition(exported);
    const page = await readFile(join(REPO_ROOT, MONITORING_DOC), 'utf8');
    for (const { where, expr } of queries) {
      for (const { metric, label, op, value } of readPromql(expr).matchers) {
        if (TARGET_LABELS.has(label) || metric in API_SERVER_METRICS) continue;
        const values = labels.get(metric)?.get(label);
        assert.ok(values !== undefined, `${where}: ${metric} has no label ${label}`);
        const known = new Set([...values, ...documentedValues(page, metric)]);
        const wanted = op === '=' || op === '!=' ? [value] : value.split('|');
        for (const one of wanted) assert.ok(known.has(one), `${where}: ${metric}{${label}} has no value ${JSON.stringify(one)}`);
      }
    }
  });

  test("the monitoring docs' Metrics table lists every shutdown_manager metric exported, and docs/operations/alerts.md every alert", async () => {
    const page = await readFile(join(REPO_ROOT, MONITORING_DOC), 'utf8');
    const ours = [...exposition(exported).names].filter((name) => name.startsWith('shutdown_manager_')).map((name) => name.replace(/_(bucket|sum|count)$/, ''));
    for (const name of new Set(ours)) assert.ok(page.includes(`| \`${name}`), `${MONITORING_DOC} Metrics table: ${name}`);
    const runbooks = await readFile(join(REPO_ROOT, RUNBOOK_FILE), 'utf8');
    for (const entry of rules) {
      assert.ok(runbooks.includes(`\n## ${String(entry.alert)}\n`), `${RUNBOOK_FILE}: a section ## ${String(entry.alert)}`);
      assert.ok(runbooks.includes(`| [${String(entry.alert)}](#${githubAnchor(String(entry.alert))}) |`), `${RUNBOOK_FILE}: a row of the table for ${String(entry.alert)}`);
    }
  });

  test("the drain metrics behave as the deadline alert reads them: a drained sidecar has time left, a cut one none, with connections open", () => {
    const [drained = '', timedOut = ''] = [sidecarScrapes.get('drained'), sidecarScrapes.get('timed-out')];
    const remaining = (text: string): number => sampleOf(text, 'shutdown_manager_drain_remaining_seconds') ?? NaN;
    const elapsed = (text: string): number => sampleOf(text, 'shutdown_manager_drain_duration_seconds') ?? NaN;
    assert.equal(sampleOf(drained, 'shutdown_manager_drain_state{state="drained"}'), 1);
    assert.ok(remaining(drained) >= 0.2 * (remaining(drained) + elapsed(drained)), 'a drain that ended early is not near its deadline');
    assert.equal(sampleOf(timedOut, 'shutdown_manager_drain_state{state="timed-out"}'), 1);
    assert.equal(remaining(timedOut), 0);
    assert.ok(remaining(timedOut) < 0.2 * (remaining(timedOut) + elapsed(timedOut)), 'a drain cut at its deadline is');
    assert.ok(/^shutdown_manager_open_connections\{[^}]*\} [1-9]/m.test(timedOut), 'with connections open');
  });
});

/** A webhook from the built entry point, after an injection, a skip, a denial and an invalid request. */
async function scrapeWebhook(): Promise<string> {
  const directory = await mkdtemp(join(tmpdir(), 'esm-monitoring-'));
  let webhook: WebhookProcess | undefined;
  try {
    webhook = await startWebhook(['--dev-certs', '--address=127.0.0.1', '--port=0', '--shutdown-delay=0s', `--tls-cert-file=${directory}/tls.crt`, `--tls-key-file=${directory}/tls.key`]);
    const { url } = webhook;
    const ca = await readFile(join(directory, 'ca.crt'), 'utf8');
    for (const [fixture, result] of [
      ['deployment-envoy-pod.json', 'injected'],
      ['non-envoy-pod.json', 'skipped'],
      ['bad-annotations.json', 'denied'],
    ] as const) {
      const answer = await httpsRequest(`${url}/mutate`, { ca, body: await readFile(join(FIXTURES, fixture)), contentType: 'application/json' });
      assert.equal(answer.status, 200, `${fixture} (${result}): ${answer.text}`);
    }
    assert.equal((await httpsRequest(`${url}/mutate`, { ca, body: 'x', contentType: 'text/plain' })).status, 415);
    const metrics = await httpsRequest(`${url}/metrics`, { ca, method: 'GET' });
    assert.equal(metrics.status, 200);
    for (const result of ['injected', 'skipped', 'denied', 'invalid']) {
      assert.equal(sampleOf(metrics.text, `shutdown_manager_webhook_reviews_total{result="${result}"}`), 1, result);
    }
    return metrics.text;
  } finally {
    await webhook?.kill();
    await rm(directory, { recursive: true, force: true });
  }
}

type SidecarMoment = 'idle' | 'draining' | 'drained' | 'timed-out';

/**
 * Two built sidecars against the Envoy emulator, each with a held connection: one drained once it closes
 * (scraped before, while draining and after), one cut at a one-second deadline.
 */
async function scrapeSidecars(): Promise<Map<SidecarMoment, string>> {
  const emulator = await EnvoyEmulator.start({});
  const sidecars: SidecarProcess[] = [];
  const start = async (deadline: string): Promise<SidecarProcess> => {
    // The quiet-period rule off: a drain then ends once its connection closes, and a one-second deadline is a valid one.
    const sidecar = await spawnSidecar([`--admin-port=${emulator.ports.admin}`, '--check-interval=50ms', '--check-delay=0s', '--quiet-period=0s', `--drain-timeout=${deadline}`]);
    sidecars.push(sidecar);
    return sidecar;
  };
  const scrape = async (sidecar: SidecarProcess): Promise<string> => (await httpRequest(sidecar.url('/metrics'))).body;
  try {
    const texts = new Map<SidecarMoment, string>();
    const drained = await start('20s');
    texts.set('idle', await scrape(drained));
    const held = await openTcpConnections(emulator.ports.tcp, 1);
    const shutdown = httpRequest(drained.url('/shutdown'), { timeoutMs: 30_000 });
    await drained.waitForLog((line) => line.event === 'poll' && line.open_connections === 1);
    texts.set('draining', await scrape(drained));
    await closeAll(held);
    assert.equal((await shutdown).status, 200);
    texts.set('drained', await scrape(drained));

    const cut = await start('1s');
    const stuck = await openTcpConnections(emulator.ports.tcp, 1);
    try {
      assert.equal((await httpRequest(cut.url('/shutdown'), { timeoutMs: 30_000 })).status, 503);
      texts.set('timed-out', await scrape(cut));
    } finally {
      await closeAll(stuck);
    }
    return texts;
  } finally {
    await Promise.all(sidecars.map((sidecar) => sidecar.kill()));
    await emulator.close();
  }
}

/**
 * Prometheus's own tool on what this file's alert and check's query do with series shaped as the sidecars'
 * PodMonitor scrapes them (test/manifests/promtool.test.ts runs the other alerts; the same skip rules).
 */
const promtool = spawnSync('promtool', ['--version'], { encoding: 'utf8' });
const promtoolUnavailable = process.env['PROMTOOL_UNAVAILABLE'];
if (promtool.status !== 0 && process.env['CI'] === 'true' && promtoolUnavailable === undefined) throw new Error('promtool is missing: .ci/run installs it (Debian package prometheus)');
const promtoolSkip = promtool.status === 0 ? false : `promtool is not installed (${promtoolUnavailable ?? 'apt-get install prometheus'}); CI runs these`;

describe("promtool: the load-balancer lag alert, and check's query", { skip: promtoolSkip }, () => {
  /** The labels a sidecar's series carry through the PodMonitor (target labels and the controller). */
  const target = (pod: string, kind: string, name: string): string =>
    `namespace="edge",pod="${pod}",container="shutdown-manager",endpoint="shutdown-mgr",${CONTROLLER_KIND_LABEL}="${kind}",${CONTROLLER_NAME_LABEL}="${name}"`;

  async function promtoolTest(tests: JsonObject[]): Promise<ReturnType<typeof spawnSync>> {
    const directory = await mkdtemp(join(tmpdir(), 'esm-promtool-lag-'));
    try {
      const groups = getArray(rule, ['spec', 'groups']);
      await writeFile(join(directory, 'rules.yaml'), stringify({ groups }));
      await writeFile(join(directory, 'test.yaml'), stringify({ rule_files: ['rules.yaml'], evaluation_interval: '1m', tests }));
      return spawnSync('promtool', ['test', 'rules', 'test.yaml'], { cwd: directory, encoding: 'utf8', timeout: 30_000 });
    } finally {
      await rm(directory, { recursive: true, force: true });
    }
  }

  const lagRule = rules.find((entry) => entry.alert === 'ShutdownManagerLoadBalancerLagNearDeadline') as JsonObject;
  const summary = (pod: string, lag: string): string =>
    `edge/${pod}: the load balancer still sent clients ${lag} after the health checks failed, close to the drain's deadline.`;

  test('ShutdownManagerLoadBalancerLagNearDeadline fires on a lag past 80 % of the deadline, and only there; it outlives the pod', async () => {
    const near = target('envoy-7d9f-a', 'ReplicaSet', 'envoy-7d9f');
    const early = target('envoy-7d9f-b', 'ReplicaSet', 'envoy-7d9f');
    const alert = { eval_time: '', alertname: 'ShutdownManagerLoadBalancerLagNearDeadline', exp_alerts: [] as JsonObject[] };
    const firing = {
      exp_labels: { namespace: 'edge', pod: 'envoy-7d9f-a', container: 'shutdown-manager', endpoint: 'shutdown-mgr', [CONTROLLER_KIND_LABEL]: 'ReplicaSet', [CONTROLLER_NAME_LABEL]: 'envoy-7d9f', severity: 'warning' },
      exp_annotations: {
        summary: summary('envoy-7d9f-a', '4m 10s'),
        description: getString(lagRule, ['annotations', 'description']),
        runbook_url: getString(lagRule, ['annotations', 'runbook_url']),
      },
    };
    const result = await promtoolTest([
      {
        interval: '1m',
        input_series: [
          // A 300 s deadline: the last client 250 s after the failure (past 240 s), then the pod is gone.
          { series: `shutdown_manager_load_balancer_lag_seconds{${near},rule="observed"}`, values: '200 250 250 _x20' },
          { series: `shutdown_manager_drain_remaining_seconds{${near}}`, values: '100 40 0 _x20' },
          { series: `shutdown_manager_drain_duration_seconds{${near}}`, values: '200 260 300 _x20' },
          // The same deadline, the last client at 100 s: fine.
          { series: `shutdown_manager_load_balancer_lag_seconds{${early},rule="check-delay"}`, values: '100 100 100' },
          { series: `shutdown_manager_drain_remaining_seconds{${early}}`, values: '200 140 80' },
          { series: `shutdown_manager_drain_duration_seconds{${early}}`, values: '100 160 220' },
        ],
        alert_rule_test: [
          { ...alert, eval_time: '0m' },
          { ...alert, eval_time: '1m', exp_alerts: [firing] },
          { ...alert, eval_time: '10m', exp_alerts: [firing] },
          { ...alert, eval_time: '25m' },
        ],
      },
    ]);
    assert.equal(result.status, 0, `${String(result.stdout)}${String(result.stderr)}`);
  });

  test("check's query: the largest lag per namespace and controller over the window, as check reads it", async () => {
    const query = lagQuery('1h');
    const result = await promtoolTest([
      {
        interval: '1m',
        input_series: [
          // Each with the rule its drain ran (the gauge's own label), which the query takes out.
          { series: `${LAG_METRIC}{${target('envoy-7d9f-a', 'ReplicaSet', 'envoy-7d9f')},rule="observed"}`, values: '1 4.5 _x5' },
          { series: `${LAG_METRIC}{${target('envoy-7d9f-b', 'ReplicaSet', 'envoy-7d9f')},rule="check-delay"}`, values: '_ _ 2 12 3' },
          { series: `${LAG_METRIC}{${target('ingress-x1', 'DaemonSet', 'ingress')},rule="observed"}`, values: '95' },
          // Two hours ago: out of the window.
          { series: `${LAG_METRIC}{${target('envoy-5c8bd-c', 'ReplicaSet', 'envoy-5c8bd')},rule="observed"}`, values: '300 _x200' },
        ],
        promql_expr_test: [
          {
            expr: query,
            eval_time: '2h',
            exp_samples: [],
          },
          {
            expr: query,
            eval_time: '30m',
            exp_samples: [
              { labels: `{namespace="edge",${CONTROLLER_KIND_LABEL}="ReplicaSet",${CONTROLLER_NAME_LABEL}="envoy-7d9f"}`, value: 12 },
              { labels: `{namespace="edge",${CONTROLLER_KIND_LABEL}="DaemonSet",${CONTROLLER_NAME_LABEL}="ingress"}`, value: 95 },
              { labels: `{namespace="edge",${CONTROLLER_KIND_LABEL}="ReplicaSet",${CONTROLLER_NAME_LABEL}="envoy-5c8bd"}`, value: 300 },
            ],
          },
        ],
      },
    ]);
    assert.equal(result.status, 0, `${String(result.stdout)}${String(result.stderr)}`);
  });

  test("check's side queries on a real Prometheus engine: the listeners drains could not see, drains held by a poller, the 99th percentile of settled lags", async () => {
    const envoyA = target('envoy-7d9f-a', 'ReplicaSet', 'envoy-7d9f');
    const envoyB = target('envoy-7d9f-b', 'ReplicaSet', 'envoy-7d9f');
    const ingress = target('ingress-x1', 'DaemonSet', 'ingress');
    const workload = (kind: string, name: string): string => `namespace="edge",${CONTROLLER_KIND_LABEL}="${kind}",${CONTROLLER_NAME_LABEL}="${name}"`;
    // One drain per pod, its lag observed once it settled (the histogram's zeros first, as the sidecar exports them).
    const bucket = (labels: string, le: string, values: string): { series: string; values: string } => ({ series: `${LAG_HISTOGRAM}_bucket{${labels},le="${le}"}`, values });
    const result = await promtoolTest([
      {
        interval: '1m',
        input_series: [
          { series: `shutdown_manager_load_balancer_unobserved_listeners{${envoyA},reason="new-connections-missing"}`, values: '_ 2 2 _x5' },
          { series: `shutdown_manager_load_balancer_unobserved_listeners{${envoyB},reason="new-connections-missing"}`, values: '_ _ 3 _x5' },
          { series: `shutdown_manager_drain_held_by_traffic{${ingress}}`, values: '0 0 1 _x5' },
          { series: `shutdown_manager_drain_held_by_traffic{${envoyA}}`, values: '0 0 0 _x5' },
          // envoy-7d9f-a settled a 4 s lag (bucket 5), envoy-7d9f-b a 12 s one (bucket 15).
          ...['1', '2'].map((le) => bucket(envoyA, le, '0 0 0 0')),
          ...['5', '10', '15', '+Inf'].map((le) => bucket(envoyA, le, '0 0 1 1')),
          ...['1', '2', '5', '10'].map((le) => bucket(envoyB, le, '0 0 0 0')),
          ...['15', '+Inf'].map((le) => bucket(envoyB, le, '0 0 1 1')),
        ],
        promql_expr_test: [
          { expr: unobservedQuery('1h'), eval_time: '5m', exp_samples: [{ labels: `{${workload('ReplicaSet', 'envoy-7d9f')},reason="new-connections-missing"}`, value: 3 }] },
          { expr: heldByTrafficQuery('1h'), eval_time: '5m', exp_samples: [{ labels: `{${workload('DaemonSet', 'ingress')}}`, value: 1 }] },
          // Two drains, one in (2, 5], one in (10, 15]: the 99th percentile interpolates within the top bucket.
          { expr: `round(${lagQuantileQuery('1h')}, 0.001)`, eval_time: '5m', exp_samples: [{ labels: `{${workload('ReplicaSet', 'envoy-7d9f')}}`, value: 14.9 }] },
        ],
      },
    ]);
    assert.equal(result.status, 0, `${String(result.stdout)}${String(result.stderr)}`);
  });
});
