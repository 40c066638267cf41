/**
 * Offline injection into a stream of Kubernetes manifests (like `istioctl kube-inject`): the same pure
 * injector as the webhook, applied to Pods and to the pod templates of workload controllers. Documents
 * that are not changed are written back byte for byte; a changed document is edited through the YAML
 * document model, so its comments survive, and written with the indentation and spacing its source uses.
 */
import { isDeepStrictEqual } from 'node:util';
import type { V1Pod } from '@kubernetes/client-node';
import { Document, isMap, isScalar, isSeq, LineCounter, parseAllDocuments, Scalar, visit, type ToStringOptions, type YAMLError } from 'yaml';
import type { InjectionConfig } from '../config/webhook.js';
import { UserFacingError } from '../errors.js';
import { formatLabelSelector } from '../config/label-selector.js';
import { injectPod, type InjectionOutcome } from '../inject/injector.js';
import { podPatch, type Operation } from '../inject/patch.js';
import { uninjectPod, type UninjectionOutcome } from '../inject/uninjector.js';
import { isJsonObject, type JsonObject } from '../json.js';

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

/** What becomes of one pod template: changed into `pod`, kept as it is, or refused (the whole run fails). */
export type TemplateEdit =
  | { readonly action: 'change'; readonly pod: V1Pod; readonly warnings: readonly string[] }
  | { readonly action: 'keep'; readonly warnings: readonly string[] }
  | { readonly action: 'refuse'; readonly message: string };

/** The edit of one pod template; `workload` is "Kind namespace/name". */
export type EditTemplate = (template: V1Pod, workload: string) => TemplateEdit;

export interface EditedManifests {
  readonly output: string;
  /** "document 2 (Deployment edge/envoy)"-prefixed warnings and skips, for stderr. */
  readonly notes: readonly string[];
  /** Pod templates changed. */
  readonly changed: number;
}

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

export function injectManifests(text: string, config: InjectionConfig, tokenFor: TokenFor): InjectedManifests {
  const tally = { templates: 0, selected: 0, injected: 0, upToDate: 0 };
  const edited = editManifests(text, (template, workload) => {
    const outcome = injectPod(template, config, tokenFor(workload));
    tally.templates += 1;
    if (outcome.action !== 'skip' || outcome.reason !== 'not-selected') tally.selected += 1;
    if (outcome.action === 'inject') tally.injected += 1;
    if (outcome.action === 'skip' && outcome.reason === 'already-injected' && outcome.warnings.length === 0) tally.upToDate += 1;
    return injectionEdit(outcome);
  });
  return { ...edited, tally };
}

/** Every injected pod template with its injection undone (`uninject`); templates not injected are left alone. */
export function uninjectManifests(text: string): EditedManifests {
  return editManifests(text, (template) => uninjectionEdit(uninjectPod(template)));
}

function injectionEdit(outcome: InjectionOutcome): TemplateEdit {
  switch (outcome.action) {
    case 'deny':
      return { action: 'refuse', message: outcome.message };
    case 'skip':
      return { action: 'keep', warnings: outcome.warnings };
    case 'inject':
      return { action: 'change', pod: outcome.pod, warnings: outcome.warnings };
  }
}

function uninjectionEdit(outcome: UninjectionOutcome): TemplateEdit {
  switch (outcome.action) {
    case 'refuse':
      return outcome;
    case 'skip':
      return { action: 'keep', warnings: outcome.warnings };
    case 'uninject':
      return { action: 'change', pod: outcome.pod, warnings: outcome.warnings };
  }
}

export function editManifests(text: string, edit: EditTemplate): EditedManifests {
  const json = /^\s*[[{]/.test(text) ? parseJson(text) : undefined;
  return json === undefined ? editYaml(text, edit) : editJson(json, text, edit);
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
function editJson(json: { value: unknown }, text: string, edit: EditTemplate): EditedManifests {
  const document = new Document(json.value);
  const notes: string[] = [];
  const changed = editDocument(document, edit, (note) => notes.push(`document 1 (${describe(document)}): ${note}`));
  return { output: changed > 0 ? `${JSON.stringify(document.toJS(), null, 2)}\n` : text, notes, changed };
}

function editYaml(text: string, edit: EditTemplate): EditedManifests {
  const lineCounter = new LineCounter();
  // merge: `<<` keys (YAML 1.1, as kubectl reads them) are resolved when reading the pod templates.
  const documents = parseAllDocuments(text, { lineCounter, merge: true });
  if (!Array.isArray(documents)) return { output: text, notes: [], changed: 0 }; // only comments
  const notes: string[] = [];
  let total = 0;
  let output = '';
  documents.forEach((document, index) => {
    const label = `document ${index + 1}`;
    const firstError = document.errors[0];
    if (firstError !== undefined) throw new ManifestError(`${label}${describeYamlError(firstError, text)}`);
    const start = index === 0 ? 0 : document.range[0];
    const end = documents[index + 1]?.range[0] ?? text.length;
    const changed = withLabel(label, () => editDocument(document, edit, (note) => notes.push(`${label} (${describe(document)}): ${note}`)));
    total += changed;
    output += changed > 0 ? document.toString(sourceStyle(document, text)) : text.slice(start, end);
  });
  return { output, notes, changed: total };
}

/**
 * " (line 25, column 1): <what>", then the offending line and a caret under the column. The yaml library's own
 * message ends "at line 25, column 1:" and puts the line after it on lines of its own.
 */
function describeYamlError(error: YAMLError, text: string): string {
  const what = (error.message.split('\n')[0] ?? '').replace(/ at line \d+, column \d+:?$/, '');
  const where = error.linePos?.[0];
  if (where === undefined) return `: ${what}`;
  const line = (text.split(/\r?\n/)[where.line - 1] ?? '').trimEnd();
  return ` (line ${where.line}, column ${where.col}): ${what}\n    ${line}\n    ${' '.repeat(Math.max(0, where.col - 1))}^`;
}

function withLabel<T>(label: string, work: () => T): T {
  try {
    return work();
  } catch (error) {
    if (error instanceof ManifestError) throw new ManifestError(`${label}: ${error.message}`);
    throw error;
  }
}

/** Edits every pod template found in the document (a List holds several); returns how many were changed. */
function editDocument(document: Document, edit: EditTemplate, note: (text: string) => void): number {
  const root = document.toJS({ maxAliasCount: 100 }) as unknown;
  if (!isJsonObject(root)) return 0;
  const targets: Array<{ object: JsonObject; base: Path }> =
    root.kind === 'List' && Array.isArray(root.items)
      ? root.items.flatMap((item, i) => (isJsonObject(item) ? [{ object: item, base: ['items', i] }] : []))
      : [{ object: root, base: [] }];
  let count = 0;
  for (const { object, base } of targets) {
    const templatePath = TEMPLATE_PATHS[String(object.kind)];
    if (templatePath === undefined) continue;
    const template = valueAt(object, templatePath);
    if (!isJsonObject(template)) continue;
    const outcome = edit(template as V1Pod, `${String(object.kind)} ${nameOf(object)}`);
    const operations = operationsFor(outcome, template, object, note);
    const path = [...base, ...templatePath];
    for (const operation of operations) applyToDocument(document, path, operation);
    if (outcome.action === 'change') assertWrittenAsEdited(document, path, outcome.pod, object);
    if (operations.length > 0) count += 1;
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

function describe(document: Document): string {
  const root = document.toJS() as unknown;
  return isJsonObject(root) ? `${String(root.kind ?? 'unknown kind')} ${nameOf(root)}` : 'not an object';
}
