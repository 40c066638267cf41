/**
 * Offline injection into a stream of Kubernetes manifests (like `istioctl kube-inject`): the same pure
 * injector as the webhook, applied to Pods and to the pod templates of workload controllers. Documents
 * that are not changed are written back byte for byte; a changed document is edited through the YAML
 * document model, so its comments survive, and written with the indentation and spacing its source uses.
 */
import { isDeepStrictEqual } from 'node:util';
import type { V1Pod } from '@kubernetes/client-node';
import { Document, isAlias, isMap, isScalar, isSeq, LineCounter, parseAllDocuments, Scalar, visit, type ToStringOptions, type YAMLError } from 'yaml';
import { ANNOTATIONS } from '../config/annotation-names.js';
import type { InjectionConfig } from '../config/webhook.js';
import { UserFacingError } from '../errors.js';
import { formatLabelSelector } from '../config/label-selector.js';
import { injectPod, type InjectionOutcome, type SkipReason } from '../inject/injector.js';
import { podPatch, type Operation } from '../inject/patch.js';
import { uninjectPod, type UninjectionOutcome } from '../inject/uninjector.js';
import { isJsonObject, type JsonObject } from '../json.js';
import { isOptedIn, OPT_IN_KEY, withoutOptIn } from './opt-in.js';

/** Where the pod template sits in each kind of workload (a Pod is its own template). */
const TEMPLATE_PATHS: Readonly<Record<string, readonly string[]>> = {
  Pod: [],
  Deployment: ['spec', 'template'],
  DaemonSet: ['spec', 'template'],
  StatefulSet: ['spec', 'template'],
  ReplicaSet: ['spec', 'template'],
  ReplicationController: ['spec', 'template'],
  Job: ['spec', 'template'],
  CronJob: ['spec', 'jobTemplate', 'spec', 'template'],
};

/** The /shutdown token for one workload, named "Kind namespace/name". */
export type TokenFor = (workload: string) => string;

export class ManifestError extends UserFacingError {
  override readonly name = 'ManifestError';
}

/**
 * What becomes of one pod template: changed into `pod`, kept as it is, or refused (the whole run fails).
 * `status` is the resource's word in the summary ("injected", "skipped (opted out)").
 */
export type TemplateEdit =
  | { readonly action: 'change'; readonly pod: V1Pod; readonly warnings: readonly string[]; readonly status: string }
  | { readonly action: 'keep'; readonly warnings: readonly string[]; readonly status: string }
  | { readonly action: 'refuse'; readonly message: string };

/**
 * The edit of one pod template; `workload` is "Kind namespace/name", `namespace` the workload's own
 * (undefined when the manifest names none: it lands in whatever namespace it is applied to).
 */
export type EditTemplate = (template: V1Pod, workload: string, namespace: string | undefined) => TemplateEdit;

/** What a run wants to hear of besides pod templates: each Namespace read (never edited). */
export interface ObjectReads {
  readonly namespace?: (namespace: JsonObject) => void;
}

export interface EditedManifests {
  readonly output: string;
  /** Whether the output is JSON (kubectl -o json, a List), not YAML. */
  readonly json: boolean;
  /** "envoy.yaml: document 2 (Deployment edge/envoy)"-prefixed warnings and skips, for stderr. */
  readonly notes: readonly string[];
  /** Pod templates changed. */
  readonly changed: number;
  /** Every resource read, in order, with what became of it: the per-resource summary on stderr. */
  readonly resources: readonly ResourceOutcome[];
}

export interface ResourceOutcome {
  readonly kind: string;
  /** "namespace/name", or the name alone. */
  readonly name: string;
  readonly status: string;
}

/** `deployment "edge/envoy" injected`, as kubectl and linkerd say it. */
export function summaryLine(resource: ResourceOutcome): string {
  return `${resource.kind.toLowerCase()} "${resource.name}" ${resource.status}`;
}

/** Where the text came from, in every note and error: a path as given, or "stdin". */
export type SourceName = string;

export interface InjectedManifests extends EditedManifests {
  /** Every pod template read, by what injection did with it. */
  readonly tally: InjectionTally;
}

export interface InjectionTally {
  readonly templates: number;
  /** Matched --pod-selector. */
  readonly selected: number;
  /** Injected, or re-injected with another version or settings. */
  readonly injected: number;
  /** Already injected, identically: left byte for byte. */
  readonly upToDate: number;
}

/** When no pod template was injected, why, in a line for stderr; undefined when one was (or already is). */
export function nothingInjectedReason(tally: InjectionTally, config: InjectionConfig): string | undefined {
  if (tally.injected > 0 || tally.upToDate > 0) return undefined;
  if (tally.templates === 0) return 'nothing injected: the input holds no Pod and no workload with a pod template';
  const selector = formatLabelSelector(config.podSelector);
  if (tally.selected === 0) return `nothing injected: no pod template (of ${tally.templates}) matches --pod-selector ${selector}`;
  return `nothing injected: every pod template that matches --pod-selector ${selector} was skipped (opted out, or see the notes above)`;
}

type Path = readonly (string | number)[];

export function injectManifests(text: string, config: InjectionConfig, tokenFor: TokenFor, source: SourceName = 'stdin'): InjectedManifests {
  const tally = { templates: 0, selected: 0, injected: 0, upToDate: 0 };
  const edited = editManifests(
    text,
    (template, workload) => {
      const outcome = injectPod(template, config, tokenFor(workload));
      tally.templates += 1;
      if (outcome.action !== 'skip' || outcome.reason !== 'not-selected') tally.selected += 1;
      if (outcome.action === 'inject') tally.injected += 1;
      if (outcome.action === 'skip' && outcome.reason === 'already-injected' && outcome.warnings.length === 0) tally.upToDate += 1;
      return injectionEdit(outcome, template, config);
    },
    source,
  );
  return { ...edited, tally };
}

/**
 * Every injected pod template with its injection undone (`uninject`), and the webhook's opt-in annotation that
 * `inject` writes by default removed from templates not injected here. Templates with neither are left alone.
 */
export function uninjectManifests(text: string, source: SourceName = 'stdin'): EditedManifests {
  return editManifests(text, (template) => uninjectionEdit(uninjectPod(template), template), source);
}

function injectionEdit(outcome: InjectionOutcome, template: V1Pod, config: InjectionConfig): TemplateEdit {
  switch (outcome.action) {
    case 'deny':
      return { action: 'refuse', message: outcome.message };
    case 'skip':
      return { action: 'keep', warnings: outcome.warnings, status: skippedStatus(outcome.reason, outcome.warnings.length > 0, config) };
    case 'inject': {
      const before = template.metadata?.annotations?.[ANNOTATIONS.status] !== undefined;
      return { action: 'change', pod: outcome.pod, warnings: outcome.warnings, status: before ? 're-injected' : 'injected' };
    }
  }
}

export function skippedStatus(reason: SkipReason, noted: boolean, config: InjectionConfig): string {
  const see = noted ? '; see the note above' : '';
  switch (reason) {
    case 'not-selected':
      return `skipped (does not match --pod-selector ${formatLabelSelector(config.podSelector)})`;
    case 'opted-out':
      return `skipped (opted out: ${ANNOTATIONS.inject})`;
    case 'already-injected':
      return noted ? `skipped (already injected${see})` : 'unchanged (already injected)';
    case 'hand-configured':
      return `skipped (has a shutdown-manager container of its own${see})`;
    case 'no-envoy-container':
      return `skipped (no Envoy container${see})`;
    case 'runs-to-completion':
      return `skipped (runs to completion${see})`;
  }
}

function uninjectionEdit(outcome: UninjectionOutcome, template: V1Pod): TemplateEdit {
  switch (outcome.action) {
    case 'refuse':
      return outcome;
    case 'skip':
      // Not injected here, but maybe left to the webhook by `inject`: its opt-in annotation is what to undo.
      if (isOptedIn(template.metadata?.annotations?.[OPT_IN_KEY])) {
        return { action: 'change', pod: withoutOptIn(template), warnings: outcome.warnings, status: `uninjected (annotation ${OPT_IN_KEY} removed)` };
      }
      return { action: 'keep', warnings: outcome.warnings, status: 'skipped (not injected)' };
    case 'uninject':
      return { action: 'change', pod: outcome.pod, warnings: outcome.warnings, status: 'uninjected' };
  }
}

export function editManifests(text: string, edit: EditTemplate, source: SourceName = 'stdin', objects: ObjectReads = {}): EditedManifests {
  const json = /^\s*[[{]/.test(text) ? parseJson(text) : undefined;
  const edits = { template: edit, ...objects };
  return json === undefined ? editYaml(text, edits, source) : editJson(json, text, edits, source);
}

/** What one run does: edit pod templates, and read the other objects it asks for. */
interface Edits extends ObjectReads {
  readonly template: EditTemplate;
}

/** JSON, or undefined: text that starts like JSON may still be flow-style YAML (`{kind: Pod, ...}`). */
function parseJson(text: string): { value: unknown } | undefined {
  try {
    return { value: JSON.parse(text) };
  } catch {
    return undefined;
  }
}

/** JSON in, JSON out (kubectl -o json, a List): the same edits, without YAML formatting to preserve. */
function editJson(json: { value: unknown }, text: string, edit: Edits, source: SourceName): EditedManifests {
  const document = new Document(json.value);
  const notes: string[] = [];
  const resources: ResourceOutcome[] = [];
  const label = `${source}: document 1`;
  const changed = withLabel(label, () =>
    editDocument(document, edit, (note) => notes.push(`${label} (${describe(document)}): ${note}`), (resource) => resources.push(resource)),
  );
  return { output: changed > 0 ? `${JSON.stringify(document.toJS(), null, 2)}\n` : text, json: true, notes, changed, resources };
}

function editYaml(text: string, edit: Edits, source: SourceName): EditedManifests {
  const lineCounter = new LineCounter();
  // merge: `<<` keys (YAML 1.1, as kubectl reads them) are resolved when reading the pod templates.
  // logLevel error: what the library would only warn of (a list as a key) is no manifest's, and not worth
  // Node's multi-line warning on stderr.
  const documents = parseAllDocuments(text, { lineCounter, merge: true, logLevel: 'error' });
  if (!Array.isArray(documents)) return { output: text, json: false, notes: [], changed: 0, resources: [] }; // only comments
  const notes: string[] = [];
  const resources: ResourceOutcome[] = [];
  let total = 0;
  let output = '';
  documents.forEach((document, index) => {
    const label = `${source}: document ${index + 1}`;
    const firstError = document.errors[0];
    if (firstError !== undefined) throw new ManifestError(`${label}${describeYamlError(firstError, lineCounter, text)}`);
    // What the yaml library throws only when the document is read (an alias of no anchor, a merge of a
    // scalar, too many aliases): said as the parse errors are, with the line at fault.
    try {
      document.toJS({ maxAliasCount: 100 });
    } catch (error) {
      throw new ManifestError(`${label}${describeReadError(error, document, lineCounter, text)}`);
    }
    const start = index === 0 ? 0 : document.range[0];
    const end = documents[index + 1]?.range[0] ?? text.length;
    const changed = withLabel(label, () =>
      editDocument(document, edit, (note) => notes.push(`${label} (${describe(document)}): ${note}`), (resource) => resources.push(resource)),
    );
    total += changed;
    output += changed > 0 ? document.toString(sourceStyle(document, text)) : text.slice(start, end);
  });
  return { output, json: false, notes, changed: total, resources };
}

/**
 * " (line 25, column 1): <what> (in "<the line>")", on one line. The yaml library's own message ends "at line
 * 25, column 1:" and puts the offending line after it on lines of its own.
 */
function describeYamlError(error: YAMLError, lineCounter: LineCounter, text: string): string {
  const what = (error.message.split('\n')[0] ?? '').replace(/ at line \d+, column \d+:?$/, '');
  return describeAt(what, error.linePos?.[0] ?? lineCounter.linePos(error.pos[0]), text);
}

function describeAt(what: string, where: { line: number; col: number } | undefined, text: string): string {
  if (where === undefined) return `: ${what}`;
  const line = (text.split(/\r?\n/)[where.line - 1] ?? '').trim();
  const shown = line.length > 60 ? `${line.slice(0, 57)}...` : line;
  return ` (line ${where.line}, column ${where.col}): ${what}${shown === '' ? '' : ` (in ${JSON.stringify(shown)})`}`;
}

/** An error from reading a parsed document (toJS), placed at the alias or merge key at fault where one is. */
function describeReadError(error: unknown, document: Document, lineCounter: LineCounter, text: string): string {
  const what = (error instanceof Error ? error.message : String(error)).split('\n')[0] ?? '';
  let offset: number | undefined;
  visit(document, {
    Alias(_, alias) {
      if (alias.range != null && alias.resolve(document) === undefined) {
        offset = alias.range[0];
        return visit.BREAK;
      }
      return undefined;
    },
  });
  if (offset === undefined && /merge/i.test(what)) {
    visit(document, {
      Pair(_, pair) {
        if (isScalar(pair.key) && pair.key.source === '<<' && pair.key.range != null) {
          const resolved = (node: unknown): unknown => (isAlias(node) ? node.resolve(document) : node);
          const value = resolved(pair.value);
          if (!isMap(value) && !(isSeq(value) && value.items.every((item) => isMap(resolved(item))))) {
            offset = pair.key.range[0];
            return visit.BREAK;
          }
        }
        return undefined;
      },
    });
  }
  offset ??= document.contents?.range?.[0];
  return describeAt(what, offset === undefined ? undefined : lineCounter.linePos(offset), text);
}

function withLabel<T>(label: string, work: () => T): T {
  try {
    return work();
  } catch (error) {
    if (error instanceof ManifestError) throw new ManifestError(`${label}: ${error.message}`);
    throw error;
  }
}

/**
 * Edits every pod template found in the document (a List holds several); returns how many were changed.
 * `record` hears of every resource, edited or not.
 */
function editDocument(document: Document, edit: Edits, note: (text: string) => void, record: (resource: ResourceOutcome) => void): number {
  const root = document.toJS({ maxAliasCount: 100 }) as unknown;
  if (!isJsonObject(root)) return 0;
  const targets: Array<{ object: JsonObject; base: Path }> =
    root.kind === 'List' && Array.isArray(root.items)
      ? root.items.flatMap((item, i) => (isJsonObject(item) ? [{ object: item, base: ['items', i] }] : []))
      : [{ object: root, base: [] }];
  let count = 0;
  for (const { object, base } of targets) {
    const kind = typeof object.kind === 'string' && object.kind !== '' ? object.kind : undefined;
    const recordAs = (status: string): void => record({ kind: kind ?? 'object', name: nameOf(object), status });
    const templatePath = kind === undefined ? undefined : TEMPLATE_PATHS[kind];
    if (kind === 'Namespace') edit.namespace?.(object);
    if (templatePath === undefined) {
      recordAs(kind === undefined ? 'skipped (no kind: not a Kubernetes resource)' : 'skipped (not a workload)');
      continue;
    }
    const template = valueAt(object, templatePath);
    if (!isJsonObject(template)) {
      recordAs('skipped (no pod template)');
      continue;
    }
    const problem = templateShapeProblem(template);
    if (problem !== undefined) throw new ManifestError(`${String(object.kind)} ${nameOf(object)}: its pod template is not a valid pod template: ${problem}`);
    const outcome = edit.template(template as V1Pod, `${String(object.kind)} ${nameOf(object)}`, namespaceOf(object));
    const operations = operationsFor(outcome, template, object, note);
    const path = [...base, ...templatePath];
    for (const operation of operations) applyToDocument(document, path, operation);
    if (outcome.action === 'change') assertWrittenAsEdited(document, path, outcome.pod, object);
    if (operations.length > 0) count += 1;
    if (outcome.action !== 'refuse') recordAs(outcome.action === 'change' && operations.length === 0 ? 'unchanged' : outcome.status);
  }
  return count;
}

/**
 * Reads the edited template back: a merge key (`<<: *base`) makes an edit land beside the merged value
 * instead of in it, which would silently drop containers or annotations. Better to refuse than to corrupt.
 */
function assertWrittenAsEdited(document: Document, path: Path, edited: V1Pod, object: JsonObject): void {
  const written = valueAt(document.toJS({ maxAliasCount: 100 }), path);
  if (!isDeepStrictEqual(written, JSON.parse(JSON.stringify(edited)))) {
    throw new ManifestError(
      `${String(object.kind)} ${nameOf(object)}: its pod template uses YAML merge keys (<<) or anchors that an edit cannot go through; expand them first (e.g. yq 'explode(.)')`,
    );
  }
}

type Shape = 'object' | 'string' | 'number' | 'boolean' | 'strings' | 'objects' | 'string map';

/** The fields of a pod template the injector reads, and what the API server would hold them to. */
const POD_SHAPE: ReadonlyArray<readonly [Path, Shape]> = [
  [['metadata'], 'object'],
  [['metadata', 'labels'], 'string map'],
  [['metadata', 'annotations'], 'string map'],
  [['spec'], 'object'],
  [['spec', 'terminationGracePeriodSeconds'], 'number'],
  [['spec', 'hostNetwork'], 'boolean'],
  [['spec', 'volumes'], 'objects'],
  [['spec', 'containers'], 'objects'],
  [['spec', 'initContainers'], 'objects'],
];

const CONTAINER_SHAPE: ReadonlyArray<readonly [Path, Shape]> = [
  [['name'], 'string'],
  [['image'], 'string'],
  [['command'], 'strings'],
  [['args'], 'strings'],
  [['ports'], 'objects'],
  [['env'], 'objects'],
  [['lifecycle'], 'object'],
  [['securityContext'], 'object'],
  [['resources'], 'object'],
];

function hasShape(value: unknown, shape: Shape): boolean {
  switch (shape) {
    case 'object':
      return isJsonObject(value);
    case 'string':
    case 'number':
    case 'boolean':
      return typeof value === shape;
    case 'strings':
      return Array.isArray(value) && value.every((item) => typeof item === 'string');
    case 'objects':
      return Array.isArray(value) && value.every((item) => isJsonObject(item));
    case 'string map':
      return isJsonObject(value) && Object.values(value).every((item) => typeof item === 'string');
  }
}

const SHAPE_WORDS: Readonly<Record<Shape, string>> = {
  object: 'a map',
  string: 'a string',
  number: 'a number',
  boolean: 'true or false',
  strings: 'a list of strings',
  objects: 'a list of maps',
  'string map': 'a map of strings (quote numbers and booleans)',
};

/**
 * What in the template is of the wrong type for the injector (`containers: 5`, a number as a label value),
 * as the API server would refuse it; undefined when every field it reads has its type. Absent fields are fine.
 */
function templateShapeProblem(template: JsonObject): string | undefined {
  const check = (root: unknown, shape: ReadonlyArray<readonly [Path, Shape]>, prefix: string): string | undefined => {
    for (const [path, expected] of shape) {
      const value = valueAt(root, path);
      if (value !== undefined && value !== null && !hasShape(value, expected)) return `${prefix}${path.join('.')} is not ${SHAPE_WORDS[expected]}`;
    }
    return undefined;
  };
  const pod = check(template, POD_SHAPE, '');
  if (pod !== undefined) return pod;
  for (const list of ['containers', 'initContainers'] as const) {
    const containers = valueAt(template, ['spec', list]);
    if (!Array.isArray(containers)) continue;
    for (const [index, container] of containers.entries()) {
      const problem = check(container, CONTAINER_SHAPE, `spec.${list}[${index}].`);
      if (problem !== undefined) return problem;
    }
  }
  return undefined;
}

/** The value at `path` (keys and list indexes), or undefined where the path leaves the data. */
function valueAt(root: unknown, path: Path): unknown {
  return path.reduce<unknown>((value, key) => (typeof value === 'object' && value !== null ? (value as Record<string, unknown>)[key] : undefined), root);
}

function operationsFor(outcome: TemplateEdit, template: JsonObject, object: JsonObject, note: (text: string) => void): Operation[] {
  switch (outcome.action) {
    case 'refuse':
      throw new ManifestError(`${String(object.kind)} ${nameOf(object)}: ${outcome.message}`);
    case 'keep':
      for (const warning of outcome.warnings) note(warning);
      return [];
    case 'change':
      for (const warning of outcome.warnings) note(warning);
      return podPatch(template, outcome.pod);
  }
}

/** Applies one diff operation through the YAML model, so that the rest of the document keeps its formatting. */
function applyToDocument(document: Document, base: Path, operation: Operation): void {
  const path = [...base, ...parsePointer(operation.path)];
  try {
    if (operation.op === 'add') unflowEmpty(document.getIn(path.slice(0, -1), true));
    if (operation.op === 'remove') document.deleteIn(path);
    else if (operation.op === 'add' || operation.op === 'replace') document.setIn(path, styledLike(document, path, document.createNode(operation.value)));
    else throw new Error(`unexpected patch operation ${operation.op}`);
  } catch (error) {
    // An edit through an alias (`template: *shared`) would change every place the anchor is used.
    const reason = error instanceof Error ? error.message : String(error);
    throw new ManifestError(
      `cannot edit ${path.join('.')}: ${reason}; if the pod template uses YAML anchors or aliases, expand them first (e.g. with yq 'explode(.)')`,
    );
  }
}

/** `volumes: []` and `annotations: {}` say "none", not "write this on one line": what is added goes in block style. */
function unflowEmpty(collection: unknown): void {
  if ((isSeq(collection) || isMap(collection)) && collection.flow === true && collection.items.length === 0) collection.flow = false;
}

/**
 * A string added to a list whose strings are all quoted alike (`args: ["-c", "/etc/envoy/envoy.yaml"]`) is
 * quoted the same way, so that Envoy's appended drain flags read as if written with the rest.
 */
function styledLike(document: Document, path: Path, node: unknown): unknown {
  const list = document.getIn(path.slice(0, -1), true);
  if (!isSeq(list) || !isScalar(node) || typeof node.value !== 'string') return node;
  const styles = new Set(list.items.filter((item) => isScalar(item) && typeof item.value === 'string').map((item) => (item as Scalar).type));
  const [style] = styles;
  if (styles.size === 1 && (style === Scalar.QUOTE_DOUBLE || style === Scalar.QUOTE_SINGLE)) node.type = style;
  return node;
}

/**
 * How the source lays out its YAML, read from the document's own nodes, so that an edited document keeps
 * its look: yaml's defaults (sequences indented under their key, `[ a ]`, lines folded at 80 columns) would
 * re-space lines the injection never touched, and `kubectl get -o yaml` indents none of its sequences.
 * Each style is the majority of what the source shows; without evidence, yaml's own default stands.
 */
function sourceStyle(document: Document, text: string): ToStringOptions {
  const column = (offset: number): number => offset - (text.lastIndexOf('\n', offset - 1) + 1);
  const indents = new Map<number, number>();
  const votes = { indentedSeq: 0, flushSeq: 0, padded: 0, unpadded: 0 };
  visit(document, {
    Pair(_, pair, path) {
      const parent = path[path.length - 1];
      const { key, value } = pair;
      if (!isMap(parent) || parent.flow || !isScalar(key) || key.range == null) return;
      const keyColumn = column(key.range[0]);
      let childColumn: number | undefined;
      if (isMap(value) && !value.flow) {
        const first = value.items[0]?.key;
        if (isScalar(first) && first.range != null) childColumn = column(first.range[0]);
      } else if (isSeq(value) && !value.flow && value.range != null && value.items.length > 0) {
        childColumn = column(value.range[0]);
        if (childColumn > keyColumn) votes.indentedSeq += 1;
        else votes.flushSeq += 1;
      }
      if (childColumn !== undefined && childColumn > keyColumn) {
        indents.set(childColumn - keyColumn, (indents.get(childColumn - keyColumn) ?? 0) + 1);
      }
    },
    Node(_, node) {
      if ((isMap(node) || isSeq(node)) && node.flow && node.items.length > 0 && node.range != null) {
        if (text[node.range[0] + 1] === ' ') votes.padded += 1;
        else votes.unpadded += 1;
      }
    },
  });
  const [indent] = [...indents].sort(([, a], [, b]) => b - a)[0] ?? [2];
  return {
    indent,
    indentSeq: votes.indentedSeq >= votes.flushSeq,
    flowCollectionPadding: votes.padded > votes.unpadded,
    // Never fold: a long command line or annotation stays on its one line, as written.
    lineWidth: 0,
  };
}

/** RFC 6901: "/metadata/annotations/shutdown-manager.io~1status" → ["metadata", "annotations", "shutdown-manager.io/status"]. */
function parsePointer(pointer: string): (string | number)[] {
  return pointer
    .split('/')
    .slice(1)
    .map((part) => part.replaceAll('~1', '/').replaceAll('~0', '~'))
    .map((part) => (/^\d+$/.test(part) ? Number(part) : part));
}

function nameOf(object: JsonObject): string {
  const metadata = isJsonObject(object.metadata) ? object.metadata : {};
  const name = String(metadata.name ?? metadata.generateName ?? '(unnamed)');
  return metadata.namespace ? `${String(metadata.namespace)}/${name}` : name;
}

function namespaceOf(object: JsonObject): string | undefined {
  const namespace = isJsonObject(object.metadata) ? object.metadata.namespace : undefined;
  return typeof namespace === 'string' && namespace !== '' ? namespace : undefined;
}

function describe(document: Document): string {
  const root = document.toJS() as unknown;
  return isJsonObject(root) ? `${String(root.kind ?? 'unknown kind')} ${nameOf(root)}` : 'not an object';
}
