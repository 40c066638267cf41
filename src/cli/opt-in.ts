/**
 * The webhook's opt-in, as offline `inject` writes it by default and `uninject` removes it: the annotation
 * `shutdown-manager.io/inject: enabled` on a pod template; the label `shutdown-manager.io/inject=enabled` on
 * its Namespace (the MutatingWebhookConfiguration's namespaceSelector) is only read. Like `linkerd inject`, which adds
 * `linkerd.io/inject: enabled` and leaves the rest to its proxy injector: the webhook then draws each pod's
 * /shutdown token at creation, so that no token is ever written into a manifest (and so into Git).
 */
import type { V1Pod } from '@kubernetes/client-node';
import { ANNOTATIONS } from '../config/annotation-names.js';
import { injectSwitch } from '../config/values.js';
import { isJsonObject, type JsonObject } from '../json.js';

/** The same key on both: the pod annotation and the namespace label take the same words. */
export const OPT_IN_KEY = ANNOTATIONS.inject;

/** The value written; the webhook's namespaceSelector also accepts "true", and so does the annotation. */
export const OPT_IN_VALUE = 'enabled';

/** `kubectl label namespace edge shutdown-manager.io/inject=enabled`: what a note tells the user to run. */
export function labelCommand(namespace: string): string {
  return `kubectl label namespace ${namespace} ${OPT_IN_KEY}=${OPT_IN_VALUE}`;
}

/** enabled or "true" (any case): what the namespaceSelector and the injector read as opted in. */
export function isOptedIn(value: unknown): boolean {
  return typeof value === 'string' && injectSwitch.parse(value) === true;
}

/** The pod template with the opt-in annotation (the rest shared with `pod`). */
export function withOptIn(pod: V1Pod): V1Pod {
  const metadata = pod.metadata ?? {};
  return { ...pod, metadata: { ...metadata, annotations: { ...metadata.annotations, [OPT_IN_KEY]: OPT_IN_VALUE } } };
}

/** The pod template without the opt-in annotation, and without an `annotations` map that only held it. */
export function withoutOptIn(pod: V1Pod): V1Pod {
  const { [OPT_IN_KEY]: _removed, ...annotations } = pod.metadata?.annotations ?? {};
  const { annotations: _all, ...metadata } = pod.metadata ?? {};
  return { ...pod, metadata: Object.keys(annotations).length > 0 ? { ...metadata, annotations } : metadata };
}

/**
 * What a Namespace in the input says of the webhook: opted in (labelled enabled or "true"), opted out (another
 * value, the user's choice), or not labelled. `inject` does not label it: which namespaces the webhook acts in
 * stays the cluster operator's explicit choice, and `uninject` can then give back any input byte for byte.
 */
export function namespaceOptIn(namespace: JsonObject): 'in' | 'out' | 'unlabelled' {
  const value = labelsOf(namespace)[OPT_IN_KEY];
  if (value === undefined) return 'unlabelled';
  return isOptedIn(value) ? 'in' : 'out';
}

/** The Namespace's name, as the notes name it. */
export function namespaceName(namespace: JsonObject): string {
  const name = isJsonObject(namespace.metadata) ? namespace.metadata.name : undefined;
  return typeof name === 'string' ? name : '(unnamed)';
}

function labelsOf(namespace: JsonObject): JsonObject {
  const labels = isJsonObject(namespace.metadata) ? namespace.metadata.labels : undefined;
  return isJsonObject(labels) ? labels : {};
}
