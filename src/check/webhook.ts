/**
 * The webhook's checks: its configuration, the Service and endpoints behind it, its replicas and their
 * PodDisruptionBudget, the certificate and its CA, whether its objectSelector and its own selector agree, and
 * what failurePolicy and timeoutSeconds mean for Envoy pods.
 */
import {
  canonicalLabelSelector,
  formatLabelSelector,
  fromObjectSelector,
  LabelSelectorError,
  labelSelectorProblem,
  matchesLabels,
  parseLabelSelector,
  type LabelSelector,
} from '../config/label-selector.js';
import { CONFIGURATION_ANNOTATIONS } from '../config/annotation-names.js';
import { envName } from '../config/settings.js';
import { DEFAULT_POD_SELECTOR } from '../config/webhook.js';
import { certificateFindings } from './certificate.js';
import type { V1Deployment, V1MutatingWebhook, WebhookObjects } from './cluster.js';
import { selfManaged, servingSecretName, webhookSetting } from './expectations.js';
import type { Finding } from './finding.js';

const APPLY = 'kubectl apply -k manifests (or manifests/self-signed without cert-manager)';
/** Below this, a node drain or one crash leaves no replica to call. */
export const MIN_READY_REPLICAS = 2;

function finding(check: string, status: Finding['status'], message: string, fix?: string): Finding {
  return { check, section: 'webhook', status, message, ...(fix === undefined ? {} : { fix }) };
}

export interface WebhookCheckInput {
  readonly objects: WebhookObjects;
  readonly now: Date;
}

export function webhookFindings({ objects, now }: WebhookCheckInput): Finding[] {
  const webhook = objects.configuration?.webhooks?.[0];
  if (objects.configuration === undefined || webhook === undefined) {
    const what = objects.configuration === undefined ? 'does not exist' : 'has no webhooks';
    return [finding('webhook.configuration', 'failure', `MutatingWebhookConfiguration ${objects.configurationName} ${what}: no pod gets the sidecar`, APPLY)];
  }
  const ref = webhook.clientConfig.service;
  if (ref === undefined) {
    return [finding('webhook.configuration', 'warning', `MutatingWebhookConfiguration ${objects.configurationName} calls a URL, not a Service: its endpoints and certificate are not checked`)];
  }
  const service = `${ref.namespace}/${ref.name}`;
  return [
    finding('webhook.configuration', 'ok', `MutatingWebhookConfiguration ${objects.configurationName} calls Service ${service}${ref.path ?? ''}`),
    endpointsFinding(objects, service),
    replicasFinding(objects.deployment, ref.namespace),
    disruptionBudgetFinding(objects),
    ...certificateOf(objects, webhook, `${ref.name}.${ref.namespace}.svc`, now),
    selectorFinding(objects, webhook),
    failurePolicyFinding(webhook),
    timeoutFinding(webhook),
  ];
}

function endpointsFinding(objects: WebhookObjects, service: string): Finding {
  if (objects.service === undefined) {
    return finding('webhook.endpoints', 'failure', `Service ${service} does not exist: the API server has nothing to call`, APPLY);
  }
  const ready = objects.endpointSlices.flatMap((slice) => slice.endpoints).filter((endpoint) => endpoint.conditions?.ready !== false).length;
  if (ready === 0) {
    return finding(
      'webhook.endpoints',
      'failure',
      `Service ${service} has no ready endpoints: Envoy pods are admitted without the sidecar meanwhile`,
      `kubectl -n ${objects.service.metadata?.namespace ?? ''} get pods -l app.kubernetes.io/name=envoy-shutdown-manager; kubectl -n ${objects.service.metadata?.namespace ?? ''} describe deployment envoy-shutdown-manager`,
    );
  }
  return finding('webhook.endpoints', 'ok', `Service ${service} has ${ready} ready endpoint${ready === 1 ? '' : 's'}`);
}

function replicasFinding(deployment: V1Deployment | undefined, namespace: string): Finding {
  if (deployment === undefined) {
    return finding('webhook.replicas', 'failure', `the webhook Deployment is not in namespace ${namespace}`, APPLY);
  }
  const name = `${namespace}/${deployment.metadata?.name ?? ''}`;
  const ready = deployment.status?.readyReplicas ?? 0;
  const fix = `kubectl -n ${namespace} scale deployment ${deployment.metadata?.name ?? ''} --replicas=${MIN_READY_REPLICAS}, then kubectl -n ${namespace} describe deployment ${deployment.metadata?.name ?? ''}`;
  if (ready === 0) return finding('webhook.replicas', 'failure', `Deployment ${name} has no ready replica`, fix);
  if (ready < MIN_READY_REPLICAS) {
    return finding('webhook.replicas', 'warning', `Deployment ${name} has ${ready} ready replica (at least ${MIN_READY_REPLICAS} keep it up through a node drain)`, fix);
  }
  return finding('webhook.replicas', 'ok', `Deployment ${name} has ${ready} ready replicas`);
}

function disruptionBudgetFinding(objects: WebhookObjects): Finding {
  const labels = objects.deployment?.spec?.template.metadata?.labels;
  if (objects.deployment === undefined) return finding('webhook.disruption-budget', 'info', 'no webhook Deployment, so no PodDisruptionBudget to look for');
  const covering = objects.disruptionBudgets.find((budget) => {
    try {
      return budget.spec?.selector !== undefined && matchesLabels(fromObjectSelector(budget.spec.selector), labels);
    } catch (error) {
      if (error instanceof LabelSelectorError) return false;
      throw error;
    }
  });
  if (covering === undefined) {
    return finding(
      'webhook.disruption-budget',
      'warning',
      'no PodDisruptionBudget covers the webhook pods: a node drain may evict every replica at once',
      'kubectl apply -f manifests/base/poddisruptionbudget.yaml',
    );
  }
  return finding('webhook.disruption-budget', 'ok', `PodDisruptionBudget ${covering.metadata?.name ?? ''} covers the webhook pods`);
}

function certificateOf(objects: WebhookObjects, webhook: V1MutatingWebhook, serviceHost: string, now: Date): Finding[] {
  const namespace = webhook.clientConfig.service?.namespace ?? '';
  const secretName = servingSecretName(objects.deployment);
  const renewal = selfManaged(objects.deployment)
    ? `kubectl -n ${namespace} delete secret ${secretName} && kubectl -n ${namespace} rollout restart deployment ${objects.deployment?.metadata?.name ?? 'envoy-shutdown-manager'} (the webhook issues a new one)`
    : `kubectl -n ${namespace} describe certificate ${objects.certificate?.ref.split('/')[1] ?? secretName} (cert-manager), or npm run certs (see certs/README.md)`;
  const self = selfManaged(objects.deployment);
  return certificateFindings({
    selfManaged: self,
    // Left by an earlier self-managed install, it would be stale: only a self-managed webhook keeps it current.
    publishedPem: self ? objects.configuration?.metadata?.annotations?.[CONFIGURATION_ANNOTATIONS.servingCertificate] : undefined,
    caBundlePem: webhook.clientConfig.caBundle === undefined ? undefined : Buffer.from(webhook.clientConfig.caBundle, 'base64').toString('utf8'),
    servingSecretRef: `Secret ${namespace}/${secretName}`,
    servingSecretName: secretName,
    certificate: objects.certificate,
    serviceHost,
    now,
    renewal,
  });
}

/**
 * The API server sends the webhook the pods its objectSelector matches, and the webhook injects those its own
 * selector (--pod-selector, from its Deployment) matches: where they differ, a pod one selects and the other does
 * not is admitted without the sidecar and without a word (or, selected by the webhook only, never sent to it).
 */
function selectorFinding(objects: WebhookObjects, webhook: V1MutatingWebhook): Finding {
  const fix = `make the objectSelector of MutatingWebhookConfiguration ${objects.configurationName} and the webhook's ${envName('pod-selector')} select the same pods (manifests/base sets both from the Deployment's)`;
  const ours = webhookSelector(objects.deployment);
  if ('problem' in ours) return finding('webhook.selector', 'failure', ours.problem, fix);
  const theirs = objectSelectorOf(webhook);
  if ('problem' in theirs) return finding('webhook.selector', 'failure', `the objectSelector of ${objects.configurationName} cannot be read: ${theirs.problem}`, fix);
  const shown = formatLabelSelector(ours.selector);
  if (canonicalLabelSelector(theirs.selector) !== canonicalLabelSelector(ours.selector)) {
    const message = `the objectSelector ${theirs.shown} and the webhook's selector ${shown} (${ours.from}) select different pods: those only one selects get no sidecar, silently`;
    return finding('webhook.selector', 'failure', message, fix);
  }
  return finding('webhook.selector', 'ok', `the objectSelector and the webhook's selector (${shown}) select the same pods`);
}

/** The selector the webhook runs with, as its Deployment sets it (else its default), and where it comes from. */
function webhookSelector(deployment: V1Deployment | undefined): { selector: LabelSelector; from: string } | { problem: string } {
  const configured = webhookSetting(deployment, 'pod-selector');
  const text = configured ?? DEFAULT_POD_SELECTOR;
  const from = configured === undefined ? 'its default' : `${envName('pod-selector')} or --pod-selector of its Deployment`;
  const problem = labelSelectorProblem(text);
  if (problem !== undefined) return { problem: `the webhook's selector ${text} (${from}) is not a label selector: ${problem}` };
  return { selector: parseLabelSelector(text), from };
}

/** The webhook's objectSelector as requirements; none is an empty selector (the API server then sends every pod). */
function objectSelectorOf(webhook: V1MutatingWebhook): { selector: LabelSelector; shown: string } | { problem: string } {
  const objectSelector = webhook.objectSelector ?? {};
  try {
    return { selector: fromObjectSelector(objectSelector), shown: JSON.stringify(objectSelector) };
  } catch (error) {
    if (!(error instanceof LabelSelectorError)) throw error;
    return { problem: error.message };
  }
}

function failurePolicyFinding(webhook: V1MutatingWebhook): Finding {
  const policy = webhook.failurePolicy ?? 'Fail';
  const meaning =
    policy === 'Ignore'
      ? 'Envoy pods created while the webhook cannot be called start without the sidecar (this check finds them)'
      : 'Envoy pods cannot be created at all while the webhook cannot be called';
  return finding('webhook.failure-policy', 'info', `failurePolicy ${policy}: ${meaning}`);
}

function timeoutFinding(webhook: V1MutatingWebhook): Finding {
  const seconds = webhook.timeoutSeconds ?? 10;
  const after = (webhook.failurePolicy ?? 'Fail') === 'Ignore' ? 'then admits it without the sidecar' : 'then refuses it';
  return finding('webhook.timeout', 'info', `timeoutSeconds ${seconds}: a pod creation waits up to ${seconds} s for a webhook that hangs, ${after}`);
}
