/**
 * `envoy-shutdown-manager check`: is every Envoy pod protected? Reads the cluster (read-only), reports each
 * check, and exits 0 when none failed, 1 when one did, 2 when it could not tell (usage, connection, RBAC).
 */
import { checkCluster } from '../check/index.js';
import { parsePrometheusUrl, parseServiceRef, SERVICE_FORM, URL_FORM, type PrometheusSource } from '../check/prometheus.js';
import { renderJson, renderText } from '../check/render.js';
import { WEBHOOK_CONFIGURATION_NAME } from '../certs/names.js';
import { labelSelectorProblem } from '../config/label-selector.js';
import { describeSettings, HelpRequested, readSettings, type Setting } from '../config/settings.js';
import * as kinds from '../config/values.js';
import type { ValueKind } from '../config/values.js';
import { EXIT_FAILURE, EXIT_OK, EXIT_USAGE, UsageError, UserFacingError } from '../errors.js';
import type { CommandIo } from './io.js';

const pageSize: ValueKind<number> = {
  form: 'a whole number from 1 to 5000',
  parse: (raw) => (/^\d+$/.test(raw.trim()) && Number(raw) >= 1 && Number(raw) <= 5000 ? Number(raw) : undefined),
  format: String,
};

/** A Prometheus range duration: 7d, 12h, 1w, 1d12h (units in Prometheus's order, each at most once). */
const lagWindow: ValueKind<string> = {
  form: 'a Prometheus duration such as 7d, 24h, 2w or 1d12h',
  parse: (raw) => {
    const text = raw.trim();
    return /^(?=\d)(\d+y)?(\d+w)?(\d+d)?(\d+h)?(\d+m)?(\d+s)?$/.test(text) && /[1-9]/.test(text) ? text : undefined;
  },
  format: String,
};

const optionalUrl: ValueKind<PrometheusSource | null> = {
  form: URL_FORM,
  parse: (raw) => (raw.trim() === '' ? null : parsePrometheusUrl(raw)),
  format: (value) => (value?.kind === 'url' ? value.url.toString() : ''),
};

const optionalService: ValueKind<PrometheusSource | null> = {
  form: SERVICE_FORM,
  parse: (raw) => (raw.trim() === '' ? null : parseServiceRef(raw)),
  format: (value) => (value?.kind === 'service' ? `${value.namespace}/${value.service}:${value.port}` : ''),
};

const CHECK_SETTINGS = {
  kubeconfig: { kind: kinds.text, default: '', help: 'The kubeconfig file; without it KUBECONFIG, then ~/.kube/config, then the pod\'s ServiceAccount.' } satisfies Setting<string>,
  context: { kind: kinds.text, default: '', help: "The kubeconfig context to use; without it the kubeconfig's current context." } satisfies Setting<string>,
  output: { kind: kinds.oneOf('text', 'json'), default: 'text', help: 'text: a report for people; json: the same findings for scripts and CI.' } satisfies Setting<string>,
  'all-namespaces': {
    kind: kinds.boolean,
    default: false,
    help: 'Also look in namespaces that did not opt in, and report their matching pods as information.',
  } satisfies Setting<boolean>,
  'pod-selector': {
    kind: kinds.text,
    default: '',
    help: "Which pods are Envoy's (label-selector syntax); without it the webhook Deployment's own selector, else app=envoy.",
  } satisfies Setting<string>,
  'webhook-configuration-name': { kind: kinds.text, default: WEBHOOK_CONFIGURATION_NAME, help: 'The MutatingWebhookConfiguration to check.' } satisfies Setting<string>,
  'page-size': { kind: pageSize, default: 500, help: 'Items per page of each list request (limit).' } satisfies Setting<number>,
  'request-timeout': { kind: kinds.positiveDurationMs, default: 10_000, help: 'How long to wait for each answer of the API server (and of Prometheus).' } satisfies Setting<number>,
  'prometheus-url': {
    kind: optionalUrl,
    default: null,
    help: "Prometheus's URL, to read the load balancer's lag each workload's drains observed (a port-forward: http://localhost:9090). Without it or --prometheus, the lag is unknown.",
  } satisfies Setting<PrometheusSource | null>,
  prometheus: {
    kind: optionalService,
    default: null,
    help: "Prometheus's Service as <namespace>/<service>:<port>, reached through the API server's service proxy with the kubeconfig's credentials (RBAC: get services/proxy there, see manifests/check).",
  } satisfies Setting<PrometheusSource | null>,
  'lag-window': {
    kind: lagWindow,
    default: '7d',
    help: "How far back Prometheus is asked for the largest load-balancer lag (the query's range).",
  } satisfies Setting<string>,
};

const USAGE = `Usage: envoy-shutdown-manager check [flags]

Is every Envoy pod protected? Checks the webhook (configuration, endpoints, replicas, PodDisruptionBudget,
certificate and its CA's expiry, objectSelector against the webhook's selector) and every pod matching the selector
in the namespaces labelled shutdown-manager.io/inject=enabled.
Read-only; the RBAC it needs is manifests/check.

With --prometheus-url or --prometheus, it also shows each workload's load-balancer lag (the time from Envoy's
health-check failure to the last client that still reached it, the largest its drains observed over --lag-window),
and warns where it nears the drain's deadline or outlasts the check-delay with the quiet-period rule off.

Exit status: 0 no check failed, 1 a check failed, 2 usage error, the cluster could not be read, or (no check
failed but) Prometheus could not be.

Flags:
${describeSettings(CHECK_SETTINGS)}
`;

export async function runCheckCommand(args: readonly string[], io: CommandIo, now = new Date()): Promise<number> {
  try {
    const values = readSettings(CHECK_SETTINGS, args, io.env);
    const podSelector = values['pod-selector'] || undefined;
    const problem = podSelector === undefined ? undefined : labelSelectorProblem(podSelector);
    if (problem !== undefined) throw new UsageError(`--pod-selector ${podSelector}: ${problem}`);
    if (values['prometheus-url'] !== null && values.prometheus !== null) {
      throw new UsageError('--prometheus-url and --prometheus both name Prometheus: give one (the URL, or the Service reached through the API server)');
    }
    const lagSource = values['prometheus-url'] ?? values.prometheus;
    // On Node 22+ @kubernetes/client-node's own dependencies print deprecation warnings (punycode, url.parse) on
    // every run: nothing a user of this command can act on, and noise in front of its report.
    process.noDeprecation = true;
    // Loaded here, not above: @kubernetes/client-node is a chunk only this command (and self-managed TLS) loads.
    const { loadKubeConfig, readCluster } = await import('../check/read.js');
    const kubeConfig = loadKubeConfig({
      ...(values.kubeconfig === '' ? {} : { file: values.kubeconfig }),
      ...(values.context === '' ? {} : { context: values.context }),
    });
    const { snapshot, expected, lag } = await readCluster(kubeConfig, {
      configurationName: values['webhook-configuration-name'],
      allNamespaces: values['all-namespaces'],
      podSelectorFlag: podSelector,
      pageSize: values['page-size'],
      requestTimeoutMs: values['request-timeout'],
      concurrency: 8,
      ...(lagSource === null ? {} : { lag: { source: lagSource, window: values['lag-window'] } }),
    });
    const report = checkCluster(snapshot, expected, now, lag);
    io.stdout.write(values.output === 'json' ? renderJson(report) : renderText(report, wantsColour(io)));
    // Asked for and not read: the answer is incomplete, as when the cluster cannot be read; the report has the rest.
    if (lag.status === 'failed') io.stderr.write(`envoy-shutdown-manager check: cannot read the load balancer's lag from Prometheus: ${lag.message}\n`);
    if (report.failed) return EXIT_FAILURE;
    return lag.status === 'failed' ? EXIT_USAGE : EXIT_OK;
  } catch (error) {
    if (error instanceof HelpRequested) {
      io.stdout.write(USAGE);
      return EXIT_OK;
    }
    // Bad flags (ConfigErrors, UsageError), no kubeconfig, an unreachable server, a missing permission.
    if (error instanceof UserFacingError) {
      io.stderr.write(`envoy-shutdown-manager check: ${error.message}\n`);
      return error.exitCode;
    }
    throw error;
  }
}

/** Colour only on a terminal, and never with NO_COLOR set (https://no-color.org). */
function wantsColour(io: CommandIo): boolean {
  const noColour = io.env.NO_COLOR !== undefined && io.env.NO_COLOR !== '';
  return !noColour && (io.stdout as NodeJS.WriteStream).isTTY === true;
}
