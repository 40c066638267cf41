/**
 * Kubernetes objects checked against the API's schemas, offline (CI reaches only the npm registry):
 *
 * - kubernetes-models: the OpenAPI schemas of Kubernetes itself (types, required fields, enums, formats), and of
 *   the CRDs our manifests use, cert-manager (@kubernetes-models/cert-manager) and the Prometheus Operator
 *   (@kubernetes-models/prometheus-operator), compiled into validators;
 * - unknown fields, as `kubectl apply --validate=strict` refuses them (the OpenAPI schemas allow any field, so a
 *   misspelt `imagePullPolicy` would pass the first check): for built-in kinds, every field must be one that
 *   @kubernetes/client-node's generated models (from the same OpenAPI document) know.
 */
import * as kubernetes from '@kubernetes/client-node';
import { isJsonObject, type JsonObject } from '../../src/json.js';

/** Where each API group's models live: built-in groups in kubernetes-models, CRDs in their own packages. */
function modelModule(group: string, version: string, kind: string): string {
  if (group === 'cert-manager.io') return `@kubernetes-models/cert-manager/${group}/${version}/${kind}`;
  if (group === 'monitoring.coreos.com') return `@kubernetes-models/prometheus-operator/${group}/${version}/${kind}`;
  return group === '' ? `kubernetes-models/${version}/${kind}` : `kubernetes-models/${group}/${version}/${kind}`;
}

interface ModelClass {
  new (data: JsonObject): { validate(): void };
}

function groupVersion(apiVersion: string): { group: string; version: string } {
  const [first, second] = apiVersion.split('/');
  return second === undefined ? { group: '', version: first as string } : { group: first as string, version: second };
}

/** The schema's complaint about `object`, or undefined when it validates; an unknown kind is a problem too. */
async function schemaProblem(object: JsonObject, name: string): Promise<string | undefined> {
  const { group, version } = groupVersion(String(object.apiVersion));
  const kind = String(object.kind);
  let model: ModelClass;
  try {
    model = ((await import(modelModule(group, version, kind))) as Record<string, ModelClass>)[kind] as ModelClass;
  } catch {
    return `${name}: no schema for ${String(object.apiVersion)} ${kind} (not a Kubernetes kind nor a known CRD's)`;
  }
  try {
    new model(object).validate();
    return undefined;
  } catch (error) {
    return `${name}: ${error instanceof Error ? error.message : String(error)}`;
  }
}

interface Attribute {
  readonly baseName: string;
  readonly type: string;
}

const MODELS = kubernetes as unknown as Record<string, { attributeTypeMap?: readonly Attribute[] } | undefined>;

/** Fields the models do not know, under `path`, for a value of the model type `type` (V1PodSpec, Array<V1Container>...). */
function unknownFields(value: unknown, type: string, path: string): string[] {
  const array = /^Array<(.+)>$/.exec(type);
  if (array) return Array.isArray(value) ? value.flatMap((item, index) => unknownFields(item, array[1] as string, `${path}[${index}]`)) : [];
  const map = /^\{ \[key: string\]: (.+); \}$/.exec(type);
  if (map) return isJsonObject(value) ? Object.entries(value).flatMap(([key, item]) => unknownFields(item, map[1] as string, `${path}.${key}`)) : [];
  const attributes = MODELS[type]?.attributeTypeMap;
  if (attributes === undefined || !isJsonObject(value)) return [];
  return Object.entries(value).flatMap(([key, item]) => {
    const attribute = attributes.find((candidate) => candidate.baseName === key);
    return attribute === undefined ? [`${path}.${key}: unknown field`] : unknownFields(item, attribute.type, `${path}.${key}`);
  });
}

/** The model type of a built-in kind (apps/v1 Deployment: V1Deployment), or undefined for CRDs. */
function builtInType(object: JsonObject): string | undefined {
  const { group, version } = groupVersion(String(object.apiVersion));
  if (group.includes('.') && !group.endsWith('.k8s.io')) return undefined;
  const type = `${version.charAt(0).toUpperCase()}${version.slice(1)}${String(object.kind)}`;
  return MODELS[type]?.attributeTypeMap === undefined ? undefined : type;
}

/** Every problem of one object: schema violations, then unknown fields (built-in kinds). Empty when valid. */
export async function kubernetesSchemaProblems(object: unknown, name: string): Promise<string[]> {
  if (!isJsonObject(object) || typeof object.apiVersion !== 'string' || typeof object.kind !== 'string') {
    return [`${name}: not a Kubernetes object (apiVersion and kind are strings)`];
  }
  const where = `${name} (${object.kind} ${String((object.metadata as JsonObject | undefined)?.name)})`;
  const problems: string[] = [];
  const schema = await schemaProblem(object, where);
  if (schema !== undefined) problems.push(schema);
  const type = builtInType(object);
  if (type !== undefined) problems.push(...unknownFields(object, type, where));
  return problems;
}
