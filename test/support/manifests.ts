/**
 * Reading manifests/ for the tests: YAML parsing that fails loudly, a minimal kustomize (resources, inline
 * JSON 6902 patches with a target, and ConfigMaps generated from files with a fixed name, which is all our
 * kustomizations use, and the tests insist on that), path access that names the missing field, and
 * Kubernetes label-selector semantics.
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { readFile, readdir, stat } from 'node:fs/promises';
import { basename, join, relative } from 'node:path';
import jsonPatch, { type Operation } from 'fast-json-patch';
import { parseAllDocuments } from 'yaml';
import { isJsonObject as isObject, type JsonObject } from '../../src/json.js';
import { REPO_ROOT } from './process.js';

export const MANIFESTS_DIR = join(REPO_ROOT, 'manifests');

export type { JsonObject } from '../../src/json.js';
export { isJsonObject as isObject } from '../../src/json.js';

export interface ManifestDoc {
  /** Path relative to the repository root, for messages. */
  readonly file: string;
  readonly value: JsonObject;
}

/**
 * Every document of a YAML file, as plain data. Fails on any syntax error or warning, on empty documents
 * and on values that YAML 1.1 (what kubectl's parser speaks) and YAML 1.2 (the `yaml` default) read
 * differently, such as `0440`, `on` or `yes`.
 */
export async function loadYamlFile(path: string): Promise<unknown[]> {
  return parseYamlText(await readFile(path, 'utf8'), relative(REPO_ROOT, path));
}

/** loadYamlFile for text that is not a file of its own (an inline patch); `name` is for messages. */
export function parseYamlText(text: string, name: string): unknown[] {
  const docs12 = parseAllDocuments(text, { prettyErrors: true });
  const docs11 = parseAllDocuments(text, { version: '1.1' });
  assert.ok(Array.isArray(docs12) && Array.isArray(docs11), `${name}: not a YAML stream`);
  const values: unknown[] = [];
  docs12.forEach((doc, index) => {
    assert.deepEqual(doc.errors.map(String), [], `${name} document ${index + 1}: YAML errors`);
    assert.deepEqual(doc.warnings.map(String), [], `${name} document ${index + 1}: YAML warnings`);
    const value: unknown = doc.toJS();
    assert.ok(value !== null && value !== undefined, `${name} document ${index + 1} is empty`);
    assert.deepEqual(docs11[index]?.toJS(), value, `${name} document ${index + 1} reads differently in YAML 1.1`);
    values.push(value);
  });
  return values;
}

/** The value at `path`, or an assertion failure naming the first missing step. */
export function get(value: unknown, path: readonly (string | number)[], where = ''): unknown {
  let current = value;
  for (const [index, step] of path.entries()) {
    const here = `${where}${path.slice(0, index + 1).join('.')}`;
    if (typeof step === 'number') {
      assert.ok(Array.isArray(current) && step < current.length, `${here}: no such item`);
      current = current[step];
    } else {
      assert.ok(isObject(current) && step in current, `${here}: no such field`);
      current = current[step];
    }
  }
  return current;
}

export function getObject(value: unknown, path: readonly (string | number)[], where = ''): JsonObject {
  const result = get(value, path, where);
  assert.ok(isObject(result), `${where}${path.join('.')}: not a mapping`);
  return result;
}

export function getArray(value: unknown, path: readonly (string | number)[], where = ''): unknown[] {
  const result = get(value, path, where);
  assert.ok(Array.isArray(result), `${where}${path.join('.')}: not a list`);
  return result;
}

export function getString(value: unknown, path: readonly (string | number)[], where = ''): string {
  const result = get(value, path, where);
  assert.equal(typeof result, 'string', `${where}${path.join('.')}: not a string`);
  return result as string;
}

export interface KustomizePatch {
  /** kind and name always; group and version when given. */
  readonly target: Readonly<Record<string, string>>;
  readonly operations: readonly Operation[];
}

/** A configMapGenerator entry: data from whole files, a fixed name (no hash suffix), optional labels. */
export interface ConfigMapGenerator {
  readonly name: string;
  readonly namespace: string;
  /** Paths relative to the kustomization; each file's base name is its data key. */
  readonly files: readonly string[];
  readonly labels: Readonly<Record<string, string>>;
}

/**
 * A kustomize replacement, the subset manifests/base uses: a source field (optionally one part of it, split on a
 * delimiter) copied into fields of other objects, each selected by kind and name. Field paths are kustomize's:
 * dot-separated keys, list indices, and `[key=value]` to pick a list item.
 */
export interface KustomizeReplacement {
  readonly source: { readonly kind: string; readonly name: string; readonly fieldPath: string; readonly delimiter?: string; readonly index?: number };
  readonly targets: readonly { readonly kind: string; readonly name: string; readonly fieldPaths: readonly string[] }[];
}

export interface Kustomization {
  readonly dir: string;
  readonly resources: readonly string[];
  readonly patches: readonly KustomizePatch[];
  readonly configMapGenerator: readonly ConfigMapGenerator[];
  readonly replacements: readonly KustomizeReplacement[];
}

export async function loadKustomization(dir: string): Promise<Kustomization> {
  const [doc, ...rest] = await loadYamlFile(join(dir, 'kustomization.yaml'));
  const name = relative(REPO_ROOT, join(dir, 'kustomization.yaml'));
  assert.equal(rest.length, 0, `${name}: one document expected`);
  assert.ok(isObject(doc), `${name}: not a mapping`);
  assert.equal(doc.apiVersion, 'kustomize.config.k8s.io/v1beta1', `${name}: apiVersion`);
  assert.equal(doc.kind, 'Kustomization', `${name}: kind`);
  // The tests resolve resources and patches themselves; any other transformer (namespace:, images...)
  // would make what they check differ from what kubectl applies.
  const keys = Object.keys(doc).filter((key) => !['patches', 'configMapGenerator', 'replacements'].includes(key)).sort();
  assert.deepEqual(keys, ['apiVersion', 'kind', 'resources'], `${name}: only resources, patches, configMapGenerator and replacements are supported`);
  const resources = getArray(doc, ['resources'], `${name}: `);
  for (const entry of resources) assert.equal(typeof entry, 'string', `${name}: resources entries are paths`);
  const patches = ((doc.patches ?? []) as unknown[]).map((patch, index) => loadPatch(patch, `${name} patches.${index}: `));
  const configMapGenerator = ((doc.configMapGenerator ?? []) as unknown[]).map((entry, index) =>
    loadConfigMapGenerator(entry, `${name} configMapGenerator.${index}: `),
  );
  const replacements = ((doc.replacements ?? []) as unknown[]).map((entry, index) => loadReplacement(entry, `${name} replacements.${index}: `));
  return { dir, resources: resources as string[], patches, configMapGenerator, replacements };
}

/** A replacement of the supported subset; anything else (a target's options, select by label...) fails. */
function loadReplacement(entry: unknown, where: string): KustomizeReplacement {
  assert.ok(isObject(entry), `${where}not a mapping`);
  assert.deepEqual(Object.keys(entry).sort(), ['source', 'targets'], `${where}source and targets only`);
  const source = getObject(entry, ['source'], where);
  assert.deepEqual(Object.keys(source).filter((key) => !['kind', 'name', 'fieldPath', 'options'].includes(key)), [], `${where}source: kind, name, fieldPath and options only`);
  const options = (source.options ?? {}) as Record<string, unknown>;
  assert.deepEqual(Object.keys(options).filter((key) => key !== 'delimiter' && key !== 'index'), [], `${where}source options: delimiter and index only`);
  const targets = getArray(entry, ['targets'], where).map((target, index) => {
    const at = `${where}targets.${index}: `;
    assert.ok(isObject(target), `${at}not a mapping`);
    assert.deepEqual(Object.keys(target).sort(), ['fieldPaths', 'select'], `${at}select and fieldPaths only`);
    const select = getObject(target, ['select'], at);
    assert.deepEqual(Object.keys(select).sort(), ['kind', 'name'], `${at}select by kind and name only`);
    const fieldPaths = getArray(target, ['fieldPaths'], at);
    for (const path of fieldPaths) assert.equal(typeof path, 'string', `${at}fieldPaths are strings`);
    return { kind: getString(select, ['kind'], at), name: getString(select, ['name'], at), fieldPaths: fieldPaths as string[] };
  });
  return {
    source: {
      kind: getString(source, ['kind'], where),
      name: getString(source, ['name'], where),
      fieldPath: getString(source, ['fieldPath'], where),
      ...(typeof options.delimiter === 'string' ? { delimiter: options.delimiter } : {}),
      ...(typeof options.index === 'number' ? { index: options.index } : {}),
    },
    targets,
  };
}

/** A kustomize field path as steps: keys, list indices, and `[key=value]` list items. */
function fieldSteps(path: string): string[] {
  return path.match(/\[[^\]]*\]|[^.]+/g) ?? [];
}

/** Walks one step: the container the step names, where it is, or undefined. */
function step(current: unknown, name: string): { holder: Record<string, unknown> | unknown[]; key: string | number } | undefined {
  const item = /^\[([^=\]]+)=([^\]]*)\]$/.exec(name);
  if (item) {
    if (!Array.isArray(current)) return undefined;
    const index = current.findIndex((candidate) => isObject(candidate) && candidate[item[1] as string] === item[2]);
    return index === -1 ? undefined : { holder: current, key: index };
  }
  if (Array.isArray(current)) return /^\d+$/.test(name) && Number(name) < current.length ? { holder: current, key: Number(name) } : undefined;
  return isObject(current) && Object.hasOwn(current, name) ? { holder: current, key: name } : undefined;
}

/** Where a field path ends (its last step's container and key); fails naming the path when a step is missing. */
function locate(value: JsonObject, path: string, where: string): { holder: Record<string, unknown> | unknown[]; key: string | number } {
  let current: unknown = value;
  let found: ReturnType<typeof step>;
  for (const name of fieldSteps(path)) {
    found = step(current, name);
    assert.ok(found, `${where}: ${path} not found (at ${name})`);
    current = (found.holder as Record<string | number, unknown>)[found.key];
  }
  assert.ok(found, `${where}: empty field path`);
  return found;
}

function findTarget(docs: readonly ManifestDoc[], kind: string, name: string, where: string): ManifestDoc {
  const matches = docs.filter((doc) => doc.value.kind === kind && get(doc.value, ['metadata', 'name']) === name);
  assert.equal(matches.length, 1, `${where}: ${kind} ${name} must match exactly one object`);
  return matches[0] as ManifestDoc;
}

/** Applies replacements as kustomize does: the source's value (or its part) written over each target field. */
function applyReplacements(docs: ManifestDoc[], replacements: readonly KustomizeReplacement[], where: string): ManifestDoc[] {
  for (const { source, targets } of replacements) {
    const from = findTarget(docs, source.kind, source.name, where);
    const at = locate(from.value, source.fieldPath, `${where} source`);
    let value = (at.holder as Record<string | number, unknown>)[at.key];
    if (source.delimiter !== undefined) {
      const parts = String(value).split(source.delimiter);
      const index = source.index ?? 0;
      assert.ok(index >= 0 && index < parts.length, `${where}: ${JSON.stringify(value)} has no part ${index} split on ${JSON.stringify(source.delimiter)}`);
      value = parts[index];
    }
    for (const target of targets) {
      const doc = findTarget(docs, target.kind, target.name, where);
      const patched = structuredClone(doc.value);
      for (const path of target.fieldPaths) {
        const field = locate(patched, path, `${where} target`);
        (field.holder as Record<string | number, unknown>)[field.key] = structuredClone(value);
      }
      docs[docs.indexOf(doc)] = { file: doc.file, value: patched };
    }
  }
  return docs;
}

/** Files only, and a fixed name: a hashed name would differ from what the tests compare with by name. */
function loadConfigMapGenerator(entry: unknown, where: string): ConfigMapGenerator {
  assert.ok(isObject(entry), `${where}not a mapping`);
  assert.deepEqual(Object.keys(entry).sort(), ['files', 'name', 'namespace', 'options'], `${where}name, namespace, files and options only`);
  const options = getObject(entry, ['options'], where);
  assert.deepEqual(Object.keys(options).filter((key) => key !== 'labels'), ['disableNameSuffixHash'], `${where}options: disableNameSuffixHash and labels only`);
  assert.equal(options.disableNameSuffixHash, true, `${where}options.disableNameSuffixHash must be true`);
  const files = getArray(entry, ['files'], where);
  for (const file of files) assert.ok(typeof file === 'string' && !file.includes('='), `${where}files are plain paths (no key=path)`);
  const labels = (options.labels ?? {}) as Record<string, unknown>;
  for (const value of Object.values(labels)) assert.equal(typeof value, 'string', `${where}label values are strings`);
  return {
    name: getString(entry, ['name'], where),
    namespace: getString(entry, ['namespace'], where),
    files: files as string[],
    labels: labels as Record<string, string>,
  };
}

/** An inline JSON 6902 patch: `target` (kind, name, optionally group and version) and `patch` (a YAML list of operations). */
function loadPatch(patch: unknown, where: string): KustomizePatch {
  assert.ok(isObject(patch), `${where}not a mapping`);
  assert.deepEqual(Object.keys(patch).sort(), ['patch', 'target'], `${where}only inline patches with a target are supported`);
  const target = getObject(patch, ['target'], where);
  assert.deepEqual(
    Object.keys(target).filter((key) => !['group', 'version', 'kind', 'name'].includes(key)),
    [],
    `${where}target selects by group, version, kind and name only`,
  );
  getString(target, ['kind'], where);
  getString(target, ['name'], where);
  const [operations, ...rest] = parseYamlText(getString(patch, ['patch'], where), `${where}patch`);
  assert.equal(rest.length, 0, `${where}patch is one YAML document`);
  assert.ok(Array.isArray(operations) && operations.length > 0, `${where}patch is a list of JSON patch operations`);
  return { target: target as Record<string, string>, operations: operations as Operation[] };
}

function matchesTarget(value: JsonObject, target: Readonly<Record<string, string>>): boolean {
  const [group, version] = String(value.apiVersion).includes('/') ? String(value.apiVersion).split('/') : ['', String(value.apiVersion)];
  return (
    value.kind === target.kind &&
    get(value, ['metadata', 'name']) === target.name &&
    (target.group === undefined || target.group === group) &&
    (target.version === undefined || target.version === version)
  );
}

/** Applies each patch to the one object it targets; a failed `test` or a missing path fails, as in kustomize. */
function applyPatches(docs: ManifestDoc[], patches: readonly KustomizePatch[], where: string): ManifestDoc[] {
  for (const patch of patches) {
    const matches = docs.filter((doc) => matchesTarget(doc.value, patch.target));
    assert.equal(matches.length, 1, `${where}: a patch target must match exactly one object (${JSON.stringify(patch.target)})`);
    const doc = matches[0] as ManifestDoc;
    let patched: JsonObject;
    try {
      patched = jsonPatch.applyPatch(structuredClone(doc.value), [...patch.operations], true, false).newDocument;
    } catch (error) {
      assert.fail(`${where}: patch of ${String(doc.value.kind)} ${String(patch.target.name)} does not apply: ${String(error)}`);
    }
    docs[docs.indexOf(doc)] = { file: doc.file, value: patched };
  }
  return docs;
}

/**
 * A kustomization that is not a file of ours (an overlay shown in docs/distributions.md) applied to an install: its
 * `resources` are where the install comes from and are not read; its inline patches are applied as kustomize
 * would, each to the one object it targets.
 */
export function applyOverlay(text: string, name: string, docs: readonly ManifestDoc[]): ManifestDoc[] {
  const [doc, ...rest] = parseYamlText(text, name);
  assert.equal(rest.length, 0, `${name}: one document expected`);
  assert.ok(isObject(doc), `${name}: not a mapping`);
  assert.equal(doc.apiVersion, 'kustomize.config.k8s.io/v1beta1', `${name}: apiVersion`);
  assert.equal(doc.kind, 'Kustomization', `${name}: kind`);
  const patches = getArray(doc, ['patches'], `${name}: `).map((patch, index) => loadPatch(patch, `${name} patches.${index}: `));
  return applyPatches([...docs], patches, name);
}

/**
 * A kustomize Component of manifests/ (its inline JSON 6902 patches) applied to an install's objects, as kustomize
 * does when a user's kustomization lists the install as a resource and the Component under `components`.
 */
export async function applyComponent(dir: string, docs: readonly ManifestDoc[]): Promise<ManifestDoc[]> {
  const name = relative(REPO_ROOT, join(dir, 'kustomization.yaml'));
  const [doc, ...rest] = await loadYamlFile(join(dir, 'kustomization.yaml'));
  assert.equal(rest.length, 0, `${name}: one document expected`);
  assert.ok(isObject(doc), `${name}: not a mapping`);
  assert.equal(doc.apiVersion, 'kustomize.config.k8s.io/v1alpha1', `${name}: apiVersion`);
  assert.equal(doc.kind, 'Component', `${name}: kind`);
  assert.deepEqual(Object.keys(doc).sort(), ['apiVersion', 'kind', 'patches'], `${name}: only inline patches are supported`);
  const patches = getArray(doc, ['patches'], `${name}: `).map((patch, index) => loadPatch(patch, `${name} patches.${index}: `));
  return applyPatches([...docs], patches, name);
}

/**
 * Directories under manifests/ (itself included) that are installs; kustomize Components (recipes applied to
 * someone else's manifests, such as manifests/contour) are not: see componentDirs.
 */
export async function manifestDirs(dir = MANIFESTS_DIR): Promise<string[]> {
  return (await allDirs(dir)).filter((found) => !isComponent(found));
}

/** Directories under manifests/ holding a kustomize Component. */
export async function componentDirs(dir = MANIFESTS_DIR): Promise<string[]> {
  return (await allDirs(dir)).filter(isComponent);
}

async function allDirs(dir: string): Promise<string[]> {
  const dirs = [dir];
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    if (entry.isDirectory()) dirs.push(...(await allDirs(join(dir, entry.name))));
  }
  return dirs;
}

function isComponent(dir: string): boolean {
  const path = join(dir, 'kustomization.yaml');
  return existsSync(path) && /^kind: Component$/m.test(readFileSync(path, 'utf8'));
}

export async function isDirectory(path: string): Promise<boolean> {
  return stat(path).then(
    (info) => info.isDirectory(),
    () => false,
  );
}

/** What `kubectl apply -k dir` sends, given that our kustomizations only list resources and inline patches. */
export async function resolveKustomization(dir: string): Promise<ManifestDoc[]> {
  const { resources, patches, configMapGenerator, replacements } = await loadKustomization(dir);
  const docs: ManifestDoc[] = [];
  for (const entry of resources) {
    const path = join(dir, entry);
    if (await isDirectory(path)) {
      docs.push(...(await resolveKustomization(path)));
      continue;
    }
    for (const value of await loadYamlFile(path)) {
      assert.ok(isObject(value), `${relative(REPO_ROOT, path)}: a document is not a mapping`);
      docs.push({ file: relative(REPO_ROOT, path), value });
    }
  }
  const where = relative(REPO_ROOT, join(dir, 'kustomization.yaml'));
  for (const generator of configMapGenerator) {
    const data: Record<string, string> = {};
    for (const file of generator.files) data[basename(file)] = await readFile(join(dir, file), 'utf8');
    const metadata: JsonObject = { name: generator.name, namespace: generator.namespace };
    if (Object.keys(generator.labels).length > 0) metadata.labels = { ...generator.labels };
    docs.push({ file: where, value: { apiVersion: 'v1', kind: 'ConfigMap', metadata, data } });
  }
  // As kustomize orders its transformers: patches, then replacements.
  return applyReplacements(applyPatches(docs, patches, where), replacements, where);
}

/** The one object of that kind (and name, if given); fails when there are none or several. */
export function findOne(docs: readonly ManifestDoc[], kind: string, name?: string): JsonObject {
  const matches = docs.filter(
    (doc) => doc.value.kind === kind && (name === undefined || get(doc.value, ['metadata', 'name']) === name),
  );
  assert.equal(matches.length, 1, `exactly one ${kind}${name === undefined ? '' : ` named ${name}`} expected`);
  return (matches[0] as ManifestDoc).value;
}

export function findAll(docs: readonly ManifestDoc[], kind: string): JsonObject[] {
  return docs.filter((doc) => doc.value.kind === kind).map((doc) => doc.value);
}

/** Kubernetes LabelSelector semantics (matchLabels and matchExpressions, ANDed). */
export function selects(selector: unknown, labels: Readonly<Record<string, string>>): boolean {
  assert.ok(isObject(selector), 'a label selector is a mapping');
  const matchLabels = (selector.matchLabels ?? {}) as Record<string, string>;
  const expressions = (selector.matchExpressions ?? []) as { key: string; operator: string; values?: string[] }[];
  for (const [key, value] of Object.entries(matchLabels)) if (labels[key] !== value) return false;
  for (const { key, operator, values = [] } of expressions) {
    const has = Object.hasOwn(labels, key);
    const value = labels[key];
    const ok =
      operator === 'In'
        ? has && values.includes(value as string)
        : operator === 'NotIn'
          ? !has || !values.includes(value as string)
          : operator === 'Exists'
            ? has
            : operator === 'DoesNotExist'
              ? !has
              : assert.fail(`unknown selector operator ${operator}`);
    if (!ok) return false;
  }
  return true;
}

/** A namespace's labels as the API server sees them: it always adds kubernetes.io/metadata.name. */
export function namespaceLabels(namespace: JsonObject): Record<string, string> {
  const name = getString(namespace, ['metadata', 'name']);
  const labels = (getObject(namespace, ['metadata']).labels ?? {}) as Record<string, string>;
  return { ...labels, 'kubernetes.io/metadata.name': name };
}

/** A container port given by number or by name, as a number. */
export function resolveContainerPort(container: JsonObject, port: unknown): number {
  if (typeof port === 'number') return port;
  const ports = getArray(container, ['ports']) as JsonObject[];
  const named = ports.find((candidate) => candidate.name === port);
  assert.ok(named, `container ${String(container.name)} has no port named ${String(port)}`);
  return named.containerPort as number;
}
