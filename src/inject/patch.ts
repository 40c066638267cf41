/**
 * The JSON patch is the diff between the original and the mutated pod, as Istio's injector does it: escaping of keys
 * such as "shutdown-manager.io/status" and adding missing maps are then never hand-written. The diff is
 * fast-json-patch's `compare`, operation for operation and in the same order, less its deep clone of the values it
 * adds (see `diff`: why that is safe, and what it saves). test/inject/injector.property.test.ts checks that the
 * operations equal `compare`'s and apply to the mutated pod, on generated pods.
 */
import type { AddOperation, Operation, RemoveOperation, ReplaceOperation } from 'fast-json-patch';

export type { Operation };

export function podPatch(original: object, mutated: object): Operation[] {
  const operations: Operation[] = [];
  // Any object is read as JSON is: by its own enumerable keys, which every object and array has.
  diff(original as Node, mutated as Node, operations, '');
  return operations;
}

type Node = Record<string, unknown> | unknown[];

/**
 * fast-json-patch 3.1.1 `_generate` (duplex.js), with `invertible` false and values taken as they are: `compare`
 * copies each value it adds or replaces with a JSON round trip, which cost a sixth of the webhook's CPU (the whole
 * sidecar container is one added value). An operation's value is the mutated pod's own node instead. That is safe
 * because of how the patch is used: the injector builds every node it adds afresh (or takes it from a frozen template,
 * see sidecar.ts), and callers serialize the operations at once (the webhook) or copy them into a YAML document (the
 * inject command); nothing writes to them. The walk returns at once on a subtree that the copy-on-write injector
 * shares with the original (same object), so only the path to each change is visited.
 */
function diff(mirror: Node, node: Node, operations: Operation[], path: string): void {
  if (node === mirror) return;
  const object = hasToJSON(node) ? (node.toJSON() as Node) : node;
  const newKeys = keysOf(object);
  const oldKeys = keysOf(mirror);
  let deleted = false;
  const objectIsArray = Array.isArray(object);
  // Backwards, as compare does: removals from an array then run from its end, so their indexes stay right.
  for (let t = oldKeys.length - 1; t >= 0; t -= 1) {
    const key = oldKeys[t] as string;
    const oldValue = (mirror as Record<string, unknown>)[key];
    const newValue = (object as Record<string, unknown>)[key];
    if (Object.hasOwn(object, key) && !(newValue === undefined && oldValue !== undefined && !objectIsArray)) {
      if (isNode(oldValue) && isNode(newValue) && Array.isArray(oldValue) === Array.isArray(newValue)) {
        diff(oldValue, newValue, operations, `${path}/${escapePathComponent(key)}`);
      } else if (oldValue !== newValue) {
        // compare's deep clone turns undefined (an array hole) into null, as JSON would.
        operations.push({ op: 'replace', path: `${path}/${escapePathComponent(key)}`, value: newValue === undefined ? null : newValue } satisfies ReplaceOperation<unknown>);
      }
    } else if (Array.isArray(mirror) === objectIsArray) {
      operations.push({ op: 'remove', path: `${path}/${escapePathComponent(key)}` } satisfies RemoveOperation);
      deleted = true;
    } else {
      operations.push({ op: 'replace', path, value: object } satisfies ReplaceOperation<unknown>);
    }
  }
  if (!deleted && newKeys.length === oldKeys.length) return;
  for (const key of newKeys) {
    const value = (object as Record<string, unknown>)[key];
    if (!Object.hasOwn(mirror, key) && value !== undefined) {
      operations.push({ op: 'add', path: `${path}/${escapePathComponent(key)}`, value } satisfies AddOperation<unknown>);
    }
  }
}

function isNode(value: unknown): value is Node {
  return typeof value === 'object' && value !== null;
}

function hasToJSON(value: object): value is { toJSON(): unknown } {
  return typeof (value as { toJSON?: unknown }).toJSON === 'function';
}

/** An array's indexes as strings, as compare lists them; an object's own enumerable keys. */
function keysOf(node: Node): string[] {
  if (!Array.isArray(node)) return Object.keys(node);
  const keys = new Array<string>(node.length);
  for (let index = 0; index < node.length; index += 1) keys[index] = String(index);
  return keys;
}

/** RFC 6901: "~" is written "~0" and "/" is written "~1". */
function escapePathComponent(key: string): string {
  if (!key.includes('/') && !key.includes('~')) return key;
  return key.replace(/~/g, '~0').replace(/\//g, '~1');
}
