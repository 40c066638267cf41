/**
 * JSON that came from outside (request bodies, manifests, Envoy's stats, a Prometheus): narrowing, and a guard run
 * before parsing, since JSON.parse recurses per level and holds the whole tree, so an answer of nested brackets
 * costs time and memory far beyond its size.
 */
export type JsonObject = Record<string, unknown>;

export function isJsonObject(value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Character codes of JSON's structure, for jsonDepthExceeds. */
const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACKET = 0x5d;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;

/**
 * Whether `text`, read as JSON, opens more than `maxDepth` arrays or objects at once: one pass over the
 * characters, skipping strings, with no allocation. A closer too many makes the depth negative, but
 * JSON.parse stops at that closer, before anything after it could nest.
 */
export function jsonDepthExceeds(text: string, maxDepth: number): boolean {
  let depth = 0;
  let inString = false;
  for (let index = 0; index < text.length; index += 1) {
    const code = text.charCodeAt(index);
    if (inString) {
      if (code === BACKSLASH) index += 1;
      else if (code === QUOTE) inString = false;
    } else if (code === QUOTE) {
      inString = true;
    } else if (code === OPEN_BRACKET || code === OPEN_BRACE) {
      depth += 1;
      if (depth > maxDepth) return true;
    } else if (code === CLOSE_BRACKET || code === CLOSE_BRACE) {
      depth -= 1;
    }
  }
  return false;
}
