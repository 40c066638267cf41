/**
 * The JSON patch is the diff between the original and the mutated pod, as Istio's injector does it:
 * escaping of keys such as "shutdown-manager.io/status" and adding missing maps are then never hand-written.
 */
import jsonPatch, { type Operation } from 'fast-json-patch';

export type { Operation };

export function podPatch(original: object, mutated: object): Operation[] {
  return jsonPatch.compare(original, mutated);
}
