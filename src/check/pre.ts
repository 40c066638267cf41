/**
 * `check --pre`: can this cluster take the install? The API server's version, whether the caller may apply every
 * object of the install, and cert-manager when the install uses it. Pure: read.ts reads, this judges.
 */
import { DEFAULT_NAMESPACE } from '../certs/names.js';
import type { Finding } from './finding.js';

/**
 * The oldest Kubernetes the webhook's default install works on: the preStop hooks carry the /shutdown token in
 * `httpHeaders`, which kubelets before 1.26 drop (docs/operations/security.md).
 */
export const MINIMUM_KUBERNETES = { major: 1, minor: 26 } as const;

/** One kind of object the install applies, as RBAC names it. */
export interface InstalledResource {
  readonly kind: string;
  /** '' for the core group. */
  readonly group: string;
  readonly resource: string;
  readonly namespaced: boolean;
}

/** What manifests/base applies (test/cli/check-pre.test.ts holds this list to the manifests' kinds). */
export const BASE_RESOURCES: readonly InstalledResource[] = [
  { kind: 'Namespace', group: '', resource: 'namespaces', namespaced: false },
  { kind: 'ServiceAccount', group: '', resource: 'serviceaccounts', namespaced: true },
  { kind: 'Deployment', group: 'apps', resource: 'deployments', namespaced: true },
  { kind: 'Service', group: '', resource: 'services', namespaced: true },
  { kind: 'PodDisruptionBudget', group: 'policy', resource: 'poddisruptionbudgets', namespaced: true },
  { kind: 'NetworkPolicy', group: 'networking.k8s.io', resource: 'networkpolicies', namespaced: true },
  { kind: 'ResourceQuota', group: '', resource: 'resourcequotas', namespaced: true },
  { kind: 'MutatingWebhookConfiguration', group: 'admissionregistration.k8s.io', resource: 'mutatingwebhookconfigurations', namespaced: false },
];

/** What manifests/cert-manager.yaml adds in the default install (`kubectl apply -k manifests`). */
export const CERT_MANAGER_RESOURCES: readonly InstalledResource[] = [
  { kind: 'Issuer', group: 'cert-manager.io', resource: 'issuers', namespaced: true },
  { kind: 'Certificate', group: 'cert-manager.io', resource: 'certificates', namespaced: true },
];

/** `kubectl apply` reads each object, then creates it or patches it. */
export const APPLY_VERBS = ['get', 'create', 'patch'] as const;

/** One question for a SelfSubjectAccessReview. */
export interface AccessQuestion {
  readonly verb: (typeof APPLY_VERBS)[number];
  readonly group: string;
  readonly resource: string;
  readonly namespace?: string;
}

export function accessQuestions(resources: readonly InstalledResource[], namespace = DEFAULT_NAMESPACE): AccessQuestion[] {
  return resources.flatMap(({ group, resource, namespaced }) =>
    APPLY_VERBS.map((verb) => ({ verb, group, resource, ...(namespaced ? { namespace } : {}) })),
  );
}

/** The API server's /version, as far as the check needs it. */
export interface ServerVersion {
  readonly major: string;
  readonly minor: string;
  readonly gitVersion: string;
}

/** The cert-manager resources the API server serves under cert-manager.io/v1; undefined: the group is not served. */
export type CertManagerApi = readonly string[] | undefined;

export interface PreInstallReading {
  readonly version: ServerVersion;
  readonly access: readonly { readonly question: AccessQuestion; readonly allowed: boolean }[];
  /** Read only with --cert-manager. */
  readonly certManager?: { readonly served: CertManagerApi };
}

export function preInstallFindings(reading: PreInstallReading): Finding[] {
  return [
    versionFinding(reading.version),
    accessFinding(reading.access),
    ...(reading.certManager === undefined ? [] : [certManagerFinding(reading.certManager.served)]),
  ];
}

/** "1", "28+" (GKE, EKS add a +): the leading digits. */
function versionNumber(text: string): number | undefined {
  const digits = /^\d+/.exec(text.trim())?.[0];
  return digits === undefined ? undefined : Number(digits);
}

function versionFinding(version: ServerVersion): Finding {
  const major = versionNumber(version.major);
  const minor = versionNumber(version.minor);
  const shown = version.gitVersion || `${version.major}.${version.minor}`;
  const needed = `${MINIMUM_KUBERNETES.major}.${MINIMUM_KUBERNETES.minor}`;
  const base = { check: 'pre.kubernetes-version', section: 'pre' } as const;
  if (major === undefined || minor === undefined) {
    return { ...base, status: 'warning', message: `the API server's version "${version.major}.${version.minor}" (${shown}) cannot be read as a number: make sure it is ${needed} or later` };
  }
  if (major > MINIMUM_KUBERNETES.major || (major === MINIMUM_KUBERNETES.major && minor >= MINIMUM_KUBERNETES.minor)) {
    return { ...base, status: 'ok', message: `Kubernetes ${shown}: ${needed} or later, as the hooks' Authorization header needs` };
  }
  return {
    ...base,
    status: 'failure',
    message: `Kubernetes ${shown} is older than ${needed}: its kubelets drop the preStop hooks' headers, so every drain would be refused (401)`,
    fix: `upgrade the cluster to ${needed} or later, or run the webhook with --protect-shutdown=false (docs/operations/security.md)`,
  };
}

function describeQuestion({ verb, group, resource, namespace }: AccessQuestion): string {
  return `${verb} ${resource}${group === '' ? '' : `.${group}`}${namespace === undefined ? '' : ` in namespace ${namespace}`}`;
}

function accessFinding(access: PreInstallReading['access']): Finding {
  const denied = access.filter((answer) => !answer.allowed).map((answer) => answer.question);
  const kinds = new Set(access.map(({ question }) => `${question.group}/${question.resource}`)).size;
  const base = { check: 'pre.permissions', section: 'pre' } as const;
  if (denied.length === 0) {
    return { ...base, status: 'ok', message: `you may ${APPLY_VERBS.join(', ')} every kind of object the install applies (${kinds} kinds), as kubectl apply does` };
  }
  const first = denied[0] as AccessQuestion;
  return {
    ...base,
    status: 'failure',
    message: `kubectl apply of the install would be refused: you may not ${denied.map(describeQuestion).join(', ')}`,
    fix: `run the install as a cluster administrator, or have one grant these; to ask the API server yourself: kubectl auth can-i ${first.verb} ${first.resource}${first.group === '' ? '' : `.${first.group}`}${first.namespace === undefined ? '' : ` -n ${first.namespace}`}`,
  };
}

function certManagerFinding(api: CertManagerApi): Finding {
  const base = { check: 'pre.cert-manager', section: 'pre' } as const;
  const install = 'install cert-manager first (https://cert-manager.io/docs/installation/), or install without it: kubectl apply -k manifests/self-signed';
  if (api === undefined) {
    return { ...base, status: 'failure', message: 'cert-manager is not installed: the API server serves no cert-manager.io/v1 (its CRDs certificates.cert-manager.io and issuers.cert-manager.io)', fix: install };
  }
  const missing = CERT_MANAGER_RESOURCES.map((resource) => resource.resource).filter((resource) => !api.includes(resource));
  if (missing.length > 0) {
    return { ...base, status: 'failure', message: `cert-manager.io/v1 is served without ${missing.map((resource) => `${resource}.cert-manager.io`).join(' and ')}: an incomplete cert-manager`, fix: install };
  }
  return { ...base, status: 'ok', message: 'cert-manager is installed: the API server serves certificates.cert-manager.io and issuers.cert-manager.io (v1)' };
}
