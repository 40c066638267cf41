/** Narrowing for JSON that came from outside (request bodies, manifests, Envoy's stats). */
export type JsonObject = Record<string, unknown>;

export function isJsonObject(value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
