/**
 * What the answers that grow with Envoy's listeners (/drain, /metrics) are rendered with: at most once a turn of
 * the event loop (sharedPerTurn), and /drain's large parts once per poll of the drain (JsonParts).
 */

/**
 * `render`'s result, shared by every call in the same turn of the event loop: the requests of one read
 * (pipelined), and those of the connections read in the same poll of the loop, get one rendering; a request
 * read in a later turn gets a new one, so that an answer never predates what happened before its request came.
 */
export function sharedPerTurn<T>(render: () => T): () => T {
  let current: { readonly value: T } | undefined;
  return () => {
    if (current === undefined) {
      current = { value: render() };
      // The check phase that follows this turn's poll: unref'd, it holds no close() and no exit.
      setImmediate(() => (current = undefined)).unref();
    }
    return current.value;
  };
}

/** A list with more values than this, none an object (Envoy's listeners by name: thousands in some), is a part rendered once per object. */
const SHARED_PART_MIN_ENTRIES = 32;

/**
 * JSON.stringify(value, null, 2), as chunks: a plain object or array of more than SHARED_PART_MIN_ENTRIES values,
 * none of them an object, is rendered once per object (and depth) and its bytes given to every answer that shows
 * the same object; the rest, a few dozen fields, is rendered for each. The drain's large parts (open connections by
 * listener, the listeners available and watched) are made anew at each poll and never changed after (readonly
 * in DrainSnapshot): each is rendered once per poll, and held only as long as the drain holds its object.
 * Anything but plain objects and arrays (a Date, a class instance) is left to JSON.stringify, whole.
 */
export class JsonParts {
  private readonly parts = new WeakMap<object, Map<string, Buffer>>();

  render(value: unknown): (string | Buffer)[] {
    const chunks: (string | Buffer)[] = [];
    let text = '';
    const part = (container: object, indent: string): void => {
      let byIndent = this.parts.get(container);
      let bytes = byIndent?.get(indent);
      if (bytes === undefined) {
        // JSON strings hold no raw line breaks: each one is the start of a line to indent.
        bytes = Buffer.from(JSON.stringify(container, null, 2).replaceAll('\n', `\n${indent}`));
        if (byIndent === undefined) this.parts.set(container, (byIndent = new Map()));
        byIndent.set(indent, bytes);
      }
      if (text !== '') chunks.push(text);
      text = '';
      chunks.push(bytes);
    };
    /** Writes `item` (JSON.stringify's rules for `key`); false when it has no JSON (undefined, a function, a symbol). */
    const write = (key: string, item: unknown, indent: string): boolean => {
      const current =
        typeof item === 'object' && item !== null && typeof (item as { toJSON?: unknown }).toJSON === 'function' ? (item as { toJSON: (key: string) => unknown }).toJSON(key) : item;
      if (typeof current !== 'object' || current === null || !isPlain(current)) {
        // JSON.stringify's own rules, toJSON included (called again, with the key '').
        const json = JSON.stringify(item, null, 2) as string | undefined;
        if (json === undefined) return false;
        text += json.replaceAll('\n', `\n${indent}`);
        return true;
      }
      if (this.parts.has(current) || isLargeLeaf(current, SHARED_PART_MIN_ENTRIES)) {
        part(current, indent);
        return true;
      }
      const inner = `${indent}  `;
      if (Array.isArray(current)) {
        if (current.length === 0) {
          text += '[]';
          return true;
        }
        text += '[';
        current.forEach((element: unknown, index) => {
          text += `${index === 0 ? '' : ','}\n${inner}`;
          if (!write(String(index), element, inner)) text += 'null';
        });
        text += `\n${indent}]`;
        return true;
      }
      let written = 0;
      for (const [name, field] of Object.entries(current)) {
        const before = text;
        text += `${written === 0 ? '{' : ','}\n${inner}${JSON.stringify(name)}: `;
        // Nothing to show (write changes nothing then): the key is taken back.
        if (write(name, field, inner)) written += 1;
        else text = before;
      }
      text += written === 0 ? '{}' : `\n${indent}}`;
      return true;
    };
    if (!write('', value, '')) return [];
    if (text !== '') chunks.push(text);
    return chunks;
  }
}

/** A plain object or an array: what JsonParts walks itself. */
function isPlain(value: object): boolean {
  if (Array.isArray(value)) return true;
  const prototype = Object.getPrototypeOf(value) as unknown;
  return prototype === Object.prototype || prototype === null;
}

/**
 * Whether `container` is a list of more than `bound` values, none of them an object (listeners by name, names of
 * listeners): a snapshot of a few dozen fields, some of them objects, is not (the walk stops at its first object).
 * Without listing the keys: a part of thousands of listeners is walked this way once, when first seen.
 */
function isLargeLeaf(container: object, bound: number): boolean {
  let count = 0;
  for (const name in container) {
    if (!Object.hasOwn(container, name)) continue;
    const entry = (container as Record<string, unknown>)[name];
    if (typeof entry === 'object' && entry !== null) return false;
    count += 1;
  }
  return count > bound;
}
