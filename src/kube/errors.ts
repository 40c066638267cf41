/**
 * What can go wrong when the webhook talks to the Kubernetes API (self-managed TLS only), as typed errors
 * whose messages say what to fix. `retryable` separates "wait and try again" (the API server is busy or
 * another replica got there first) from "nothing will change until someone acts" (RBAC, missing objects).
 */
import { UserFacingError } from '../errors.js';

/** One API request, described the way RBAC rules are written: verb, resource, name, namespace. */
export interface KubeOperation {
  readonly verb: 'get' | 'create' | 'update' | 'patch';
  readonly resource: 'secrets' | 'mutatingwebhookconfigurations';
  readonly name: string;
  /** Absent for cluster-scoped resources. */
  readonly namespace?: string;
}

/** "update secrets/x in namespace y", "patch mutatingwebhookconfigurations/z (cluster-scoped)". */
export function describeOperation(operation: KubeOperation): string {
  const where = operation.namespace === undefined ? '(cluster-scoped)' : `in namespace ${operation.namespace}`;
  return `${operation.verb} ${operation.resource}/${operation.name} ${where}`;
}

export abstract class KubeApiError extends Error {
  /** Whether the same request may succeed later without anyone changing anything. */
  abstract readonly retryable: boolean;

  constructor(
    readonly operation: KubeOperation,
    message: string,
    /** HTTP status of the answer; absent when there was no answer (network error, timeout). */
    readonly status?: number,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/** 403: the ServiceAccount's RBAC does not allow the request. */
export class KubeForbiddenError extends KubeApiError {
  override readonly name = 'KubeForbiddenError';
  readonly retryable = false;

  constructor(operation: KubeOperation, serverMessage: string | undefined) {
    const { verb, resource, name, namespace } = operation;
    const scope =
      namespace === undefined
        ? `on ${name} (a ClusterRole with resourceNames: [${name}])`
        : `on ${name} in namespace ${namespace} (a Role there)`;
    super(
      operation,
      `the ServiceAccount lacks \`${verb} ${resource}\` ${scope}; ` +
        `apply the RBAC of manifests/self-signed (kubectl apply -k manifests/self-signed)` +
        (serverMessage === undefined ? '' : `. API server: ${serverMessage}`),
      403,
    );
  }
}

/** 401: the token was not accepted (missing, expired, or from another cluster). */
export class KubeUnauthorizedError extends KubeApiError {
  override readonly name = 'KubeUnauthorizedError';
  readonly retryable = false;

  constructor(operation: KubeOperation) {
    super(
      operation,
      `the API server rejected the ServiceAccount token (401 Unauthorized) on ${describeOperation(operation)}; ` +
        'the pod needs automountServiceAccountToken: true (manifests/self-signed sets it)',
      401,
    );
  }
}

/** 404 on an object that must exist (the MutatingWebhookConfiguration; a missing Secret is normal). */
export class KubeNotFoundError extends KubeApiError {
  override readonly name = 'KubeNotFoundError';
  readonly retryable = false;

  constructor(operation: KubeOperation, hint: string) {
    super(operation, `${operation.resource}/${operation.name} does not exist (404 on ${describeOperation(operation)}); ${hint}`, 404);
  }
}

/**
 * 409, or a failed JSON-patch `test`: someone else changed the object first. AlreadyExists answers a create
 * (another replica created the Secret); Conflict answers an update with a stale resourceVersion; Changed
 * means the webhook list moved between our read and our patch.
 */
export class KubeConflictError extends KubeApiError {
  override readonly name = 'KubeConflictError';
  readonly retryable = true;

  constructor(
    operation: KubeOperation,
    readonly reason: 'AlreadyExists' | 'Conflict' | 'Changed',
    status: number,
  ) {
    super(operation, `${describeOperation(operation)} lost a race (${reason}): another writer changed it first`, status);
  }
}

/** No usable answer: connection refused, TLS failure, timeout, 429 or 5xx. Worth retrying with backoff. */
export class KubeUnavailableError extends KubeApiError {
  override readonly name = 'KubeUnavailableError';
  readonly retryable = true;
}

/** Any other refusal (400, 422...): the request itself is wrong, so retrying it would not help. */
export class KubeRejectedError extends KubeApiError {
  override readonly name = 'KubeRejectedError';
  readonly retryable = false;
}

/** The process cannot talk to the API server at all: not in a cluster, or no token mounted. */
export class KubeConfigError extends UserFacingError {
  override readonly name = 'KubeConfigError';
}
