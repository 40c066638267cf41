/**
 * `envoy-shutdown-manager check`: is every Envoy pod protected? Reads the cluster (read-only), reports each
 * check, and exits 0 when none failed, 1 when one did, 2 when it could not tell (usage, connection, RBAC).
 */
import { checkCluster } from '../check/index.js';
import { parsePrometheusUrl, parseServiceRef, SERVICE_FORM, URL_FORM, type PrometheusSource } from '../check/prometheus.js';
import { preInstallFindings } from '../check/pre.js';
import { makeReport, type CheckReport } from '../check/report.js';
import { ApiAnswerError, UnreachableError } from '../check/errors.js';
import type { ReadSettings } from '../check/read.js';
import { renderJson, renderMachineError, renderText, renderYaml } from '../check/render.js';
import { WEBHOOK_CONFIGURATION_NAME } from '../certs/names.js';
import { labelSelectorProblem } from '../config/label-selector.js';
import { describeSettings, envName, HelpRequested, readSettings, type Setting, type ValuesOf } from '../config/settings.js';
import * as kinds from '../config/values.js';
import type { ValueKind } from '../config/values.js';
import { EXIT_FAILURE, EXIT_OK, EXIT_USAGE, UsageError, UserFacingError } from '../errors.js';
import type { CommandIo } from './io.js';
import { setTimeout as sleep } from 'node:timers/promises';

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

/** A namespace's name (RFC 1123 label), as -n would name it. */
const namespaceName: ValueKind<string> = {
  form: 'a namespace name: lower-case letters, digits and -, at most 63 characters',
  parse: (raw) => (/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/.test(raw.trim()) ? raw.trim() : undefined),
  format: String,
};

/** How long a bare `--wait` waits: linkerd check's default. */
const DEFAULT_WAIT = '5m';

const CHECK_SETTINGS = {
  kubeconfig: { kind: kinds.text, default: '', help: 'The kubeconfig file; without it KUBECONFIG, then ~/.kube/config, then the pod\'s ServiceAccount.' } satisfies Setting<string>,
  context: { kind: kinds.text, default: '', help: "The kubeconfig context to use; without it the kubeconfig's current context." } satisfies Setting<string>,
  output: {
    kind: kinds.oneOf('text', 'json', 'yaml'),
    default: 'text',
    help: 'text: a report for people; json or yaml: the same findings for scripts and CI, and an error as {"error": {"message", "exitCode"}} on stdout when no report could be made. -o is kubectl\'s spelling.',
  } satisfies Setting<string>,
  namespace: {
    kind: namespaceName,
    default: '',
    // Not SHUTDOWN_MANAGER_NAMESPACE: the webhook's pod sets it to its own namespace, which would silently scope a check run there.
    env: false,
    help: "-n: only this namespace's Envoy pods, whether it opted in or not (the webhook is checked all the same). Without it, every opted-in namespace.",
  } satisfies Setting<string>,
  'all-namespaces': {
    kind: kinds.boolean,
    default: false,
    help: '-A: also look in namespaces that did not opt in, and report their matching pods as information.',
  } satisfies Setting<boolean>,
  pre: {
    kind: kinds.boolean,
    default: false,
    help: "Before install, instead of the checks above: the API server's version (1.26 or later), and whether you may get, create and patch every kind of object the install applies (SelfSubjectAccessReviews).",
  } satisfies Setting<boolean>,
  'cert-manager': {
    kind: kinds.boolean,
    default: false,
    help: "With --pre: the install uses cert-manager (kubectl apply -k manifests, the default): check that cert-manager's API is served, and the permissions for its Issuers and Certificates. Without it, manifests/base's objects only.",
  } satisfies Setting<boolean>,
  wait: {
    kind: kinds.durationMs,
    default: 0,
    help: `Retry every second until every check passes or this long has passed (a bare --wait: ${DEFAULT_WAIT}); then exit as without it, naming on stderr what still fails. Only the report of the last attempt is printed. 0s: one attempt.`,
  } satisfies Setting<number>,
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
       envoy-shutdown-manager check --pre [--cert-manager]

Is every Envoy pod protected? Checks the webhook (configuration, endpoints, replicas, PodDisruptionBudget,
certificate and its CA's expiry, objectSelector against the webhook's selector) and every pod matching the selector
in the namespaces labelled shutdown-manager.io/inject=enabled (-n NAME: that namespace only; -A: every namespace).
Read-only; the RBAC it needs is manifests/check.

With --prometheus-url or --prometheus, it also shows each workload's load-balancer lag (the time from Envoy's
health-check failure to the last client that still reached it, the largest its drains observed over --lag-window),
and warns where it nears the drain's deadline or outlasts the check-delay with the quiet-period rule off.

With --pre, before install: the API server's version and your permissions to apply the install (and cert-manager
with --cert-manager). It needs no RBAC of its own. With --wait, it retries until every check passes.

Exit status: 0 no check failed, 1 a check failed (with --wait: still failing when the time ran out), 2 usage error,
the cluster could not be read, or (no check failed but) Prometheus could not be.

Flags:
${describeSettings(CHECK_SETTINGS)}
`;

type CheckValues = ValuesOf<typeof CHECK_SETTINGS>;

/** One attempt's answer: the report, and the line to print when Prometheus could not be read. */
interface Attempt {
  readonly report: CheckReport;
  readonly lagProblem?: string;
}

/** How often --wait tries again: a check reads little, and a rollout's pods change by the second. */
const RETRY_MS = 1_000;

export async function runCheckCommand(args: readonly string[], io: CommandIo, now?: Date): Promise<number> {
  try {
    const values = readSettings(CHECK_SETTINGS, kubectlFlags(args), io.env);
    const podSelector = validate(values);
    // On Node 22+ @kubernetes/client-node's own dependencies print deprecation warnings (punycode, url.parse) on
    // every run: nothing a user of this command can act on, and noise in front of its report.
    process.noDeprecation = true;
    // Loaded here, not above: @kubernetes/client-node is a chunk only this command (and self-managed TLS) loads.
    const read = await import('../check/read.js');
    const kubeConfig = read.loadKubeConfig({
      ...(values.kubeconfig === '' ? {} : { file: values.kubeconfig }),
      ...(values.context === '' ? {} : { context: values.context }),
    });
    const settings = readSettingsOf(values, podSelector);
    const attempt = async (): Promise<Attempt> => {
      if (values.pre) return { report: makeReport(preInstallFindings(await read.readPreInstall(kubeConfig, settings, values['cert-manager']))) };
      const { snapshot, expected, lag } = await read.readCluster(kubeConfig, settings);
      const report = checkCluster(snapshot, expected, now ?? new Date(), lag);
      return lag.status === 'failed' ? { report, lagProblem: `cannot read the load balancer's lag from Prometheus: ${lag.message}` } : { report };
    };
    const { report, lagProblem } = await untilPassing(attempt, values.wait, io);
    io.stdout.write(values.output === 'json' ? renderJson(report) : values.output === 'yaml' ? renderYaml(report) : renderText(report, wantsColour(io)));
    // Asked for and not read: the answer is incomplete, as when the cluster cannot be read; the report has the rest.
    if (lagProblem !== undefined) io.stderr.write(`envoy-shutdown-manager check: ${lagProblem}\n`);
    if (report.failed) return EXIT_FAILURE;
    return lagProblem !== undefined ? EXIT_USAGE : EXIT_OK;
  } catch (error) {
    if (error instanceof HelpRequested) {
      io.stdout.write(USAGE);
      return EXIT_OK;
    }
    // Bad flags (ConfigErrors, UsageError), no kubeconfig, an unreachable server, a missing permission.
    if (error instanceof UserFacingError) {
      // A script asked for JSON or YAML reads stdout as such: it gets the error in that shape, and still the exit code.
      const format = machineOutput(args, io.env);
      if (format !== undefined) io.stdout.write(renderMachineError(format, error.message, error.exitCode));
      else io.stderr.write(`envoy-shutdown-manager check: ${error.message}\n`);
      return error.exitCode;
    }
    throw error;
  }
}

/**
 * kubectl's spellings, turned into this command's flags: -n NAME, -n=NAME and -nNAME (--namespace), -A
 * (--all-namespaces), -o json, -o=json and -ojson (--output); and a bare --wait (no duration after it) waits
 * DEFAULT_WAIT. The flag parser has no short options nor optional values.
 */
export function kubectlFlags(args: readonly string[]): string[] {
  return args.map((arg, index) => {
    if (arg === '-A') return '--all-namespaces';
    if (arg === '-n') return '--namespace';
    if (arg.startsWith('-n=')) return `--namespace=${arg.slice(3)}`;
    if (/^-n[a-z0-9]/.test(arg)) return `--namespace=${arg.slice(2)}`;
    if (arg === '-o') return '--output';
    if (arg.startsWith('-o=')) return `--output=${arg.slice(3)}`;
    if (/^-o[a-z]/.test(arg)) return `--output=${arg.slice(2)}`;
    const next = args[index + 1];
    if (arg === '--wait' && (next === undefined || next.startsWith('-'))) return `--wait=${DEFAULT_WAIT}`;
    return arg;
  });
}

/**
 * The machine format asked for, read apart from the settings parser (whose error may be what is to be rendered) with
 * the same precedence: the last -o/--output given, in any of kubectl's spellings, else its environment variable; if
 * it is json or yaml.
 */
export function machineOutput(args: readonly string[], env: NodeJS.ProcessEnv): 'json' | 'yaml' | undefined {
  const flags = kubectlFlags(args);
  let format: string | undefined = env[envName('output')] || undefined;
  flags.forEach((arg, index) => {
    if (arg === '--output') format = flags[index + 1];
    else if (arg.startsWith('--output=')) format = arg.slice('--output='.length);
  });
  return format === 'json' || format === 'yaml' ? format : undefined;
}

/** The combinations that mean nothing, each named; returns the --pod-selector, if any. */
function validate(values: CheckValues): string | undefined {
  const podSelector = values['pod-selector'] || undefined;
  const problem = podSelector === undefined ? undefined : labelSelectorProblem(podSelector);
  if (problem !== undefined) throw new UsageError(`--pod-selector ${podSelector}: ${problem}`);
  if (values['prometheus-url'] !== null && values.prometheus !== null) {
    throw new UsageError('--prometheus-url and --prometheus both name Prometheus: give one (the URL, or the Service reached through the API server)');
  }
  if (values.namespace !== '' && values['all-namespaces']) {
    throw new UsageError(`-n/--namespace ${values.namespace} and -A/--all-namespaces: give one (one namespace, or every namespace)`);
  }
  if (values['cert-manager'] && !values.pre) throw new UsageError('--cert-manager goes with --pre: it says the install to check for uses cert-manager');
  if (values.pre) {
    const installed = (['namespace', 'all-namespaces', 'pod-selector', 'prometheus-url', 'prometheus'] as const).filter((name) => {
      const value = values[name];
      return value !== '' && value !== false && value !== null;
    });
    if (installed.length > 0) throw new UsageError(`--pre checks the cluster before install: --${installed.join(', --')} ${installed.length === 1 ? 'is' : 'are'} about the installed webhook`);
  }
  return podSelector;
}

function readSettingsOf(values: CheckValues, podSelector: string | undefined): ReadSettings {
  const lagSource = values['prometheus-url'] ?? values.prometheus;
  return {
    configurationName: values['webhook-configuration-name'],
    allNamespaces: values['all-namespaces'],
    ...(values.namespace === '' ? {} : { namespace: values.namespace }),
    podSelectorFlag: podSelector,
    pageSize: values['page-size'],
    requestTimeoutMs: values['request-timeout'],
    concurrency: 8,
    ...(lagSource === null ? {} : { lag: { source: lagSource, window: values['lag-window'] } }),
  };
}

/** What still fails: the failed checks by name, and Prometheus when it could not be read. */
function failing({ report, lagProblem }: Attempt): string[] {
  const names = new Set(report.findings.filter((finding) => finding.status === 'failure').map((finding) => finding.check));
  if (lagProblem !== undefined) names.add('drains.lag (Prometheus)');
  return [...names];
}

/** Errors a later attempt may not meet: the API server starting or restarting. A refusal or a bad flag stays. */
function transient(error: unknown): boolean {
  return error instanceof UnreachableError || error instanceof ApiAnswerError;
}

/**
 * --wait: attempts, RETRY_MS apart, until one passes or `waitMs` has passed; the last attempt is the answer (its
 * error, if it threw one). Each change in what fails is one line on stderr, so a CI log shows the progress.
 */
async function untilPassing(attempt: () => Promise<Attempt>, waitMs: number, io: CommandIo): Promise<Attempt> {
  const deadline = performance.now() + waitMs;
  let shown = '';
  for (;;) {
    let outcome: Attempt | undefined;
    let error: unknown;
    try {
      outcome = await attempt();
      if (failing(outcome).length === 0) return outcome;
    } catch (caught) {
      if (waitMs === 0 || !transient(caught)) throw caught;
      error = caught;
    }
    const still = outcome === undefined ? (error instanceof Error ? error.message : String(error)) : failing(outcome).join(', ');
    const left = deadline - performance.now();
    if (left <= 0) {
      if (waitMs > 0) io.stderr.write(`envoy-shutdown-manager check: --wait ${kinds.durationMs.format(waitMs)} ran out; still failing: ${still}\n`);
      if (outcome === undefined) throw error;
      return outcome;
    }
    if (still !== shown) io.stderr.write(`envoy-shutdown-manager check: waiting (${kinds.durationMs.format(Math.ceil(left / 1000) * 1000)} left): ${still}\n`);
    shown = still;
    await sleep(Math.min(RETRY_MS, left));
  }
}

/** Colour only on a terminal, and never with NO_COLOR set (https://no-color.org). */
function wantsColour(io: CommandIo): boolean {
  const noColour = io.env.NO_COLOR !== undefined && io.env.NO_COLOR !== '';
  return !noColour && (io.stdout as NodeJS.WriteStream).isTTY === true;
}
