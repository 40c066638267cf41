/**
 * Why `check` could not look at the cluster: each a one-line message naming what to do, and exit status 2
 * (the cluster's state is unknown, which is not the same as a failed check).
 */
import { EXIT_USAGE, UserFacingError } from '../errors.js';

export { causeOf } from '../errors.js';

/** One read, as RBAC rules name it: `list pods in namespace edge`, `get mutatingwebhookconfigurations/x`. */
export interface ReadOperation {
  readonly verb: 'get' | 'list' | 'create';
  readonly resource: string;
  /** The API group, '' for the core group: RBAC rules need it. */
  readonly group: string;
  readonly name?: string;
  readonly namespace?: string;
}

export function describeRead({ verb, resource, name, namespace }: ReadOperation): string {
  return `${verb} ${resource}${name === undefined ? '' : `/${name}`}${namespace === undefined ? '' : ` in namespace ${namespace}`}`;
}

export abstract class CheckError extends UserFacingError {
  override readonly exitCode = EXIT_USAGE;
}

/** No kubeconfig, an unknown --context, an unreadable file. */
export class KubeconfigError extends CheckError {
  override readonly name = 'KubeconfigError';
}

/** The API server did not answer (refused, unreachable, TLS, timeout). */
export class UnreachableError extends CheckError {
  override readonly name = 'UnreachableError';
}

/** 401: the credentials were not accepted. */
export class UnauthenticatedError extends CheckError {
  override readonly name = 'UnauthenticatedError';
}

/** 403: the identity may not make one of the reads. */
export class ForbiddenError extends CheckError {
  override readonly name = 'ForbiddenError';

  constructor(
    readonly operation: ReadOperation,
    serverMessage: string | undefined,
  ) {
    const { verb, resource, group } = operation;
    super(
      `permission denied: cannot ${describeRead(operation)} (RBAC verb "${verb}" on resource "${resource}" in API group "${group}")` +
        `${serverMessage === undefined ? '' : `; the API server said: ${serverMessage}`}. ` +
        'Bind the ClusterRole of manifests/check to yourself: kubectl apply -k manifests/check && ' +
        'kubectl create clusterrolebinding envoy-shutdown-manager-check --clusterrole=envoy-shutdown-manager-check --user=<you>',
    );
  }
}

/** -n/--namespace names a namespace the cluster does not have. */
export class NamespaceNotFoundError extends CheckError {
  override readonly name = 'NamespaceNotFoundError';

  constructor(namespace: string, closest: string | undefined, optedIn: readonly string[]) {
    const hint = closest === undefined ? '' : `; did you mean ${closest}?`;
    super(`--namespace ${namespace}: no such namespace in the cluster${hint} (namespaces opted in: ${optedIn.join(', ') || 'none'})`);
  }
}

/** Any other answer that is not the object (a 500, a 422 on a bad selector). */
export class ApiAnswerError extends CheckError {
  override readonly name = 'ApiAnswerError';
}
