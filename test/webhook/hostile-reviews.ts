/**
 * Hostile AdmissionReviews and what every answer to them must satisfy; shared by the property test and
 * `npm run fuzz`. A case starts from a fixture review and applies up to three mutations: a wrong type in a
 * field the webhook reads (the answer must name that field), a right type with a senseless value, prototype
 * keys, huge strings, raw bytes that are not UTF-8, deep nesting; then perhaps a change to the body as a
 * whole (truncated, a BOM, padded to the body limit ± 1 byte, another content type).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { Agent, request } from 'node:https';
import { join } from 'node:path';
import fc from 'fast-check';
import jsonPatch, { type Operation } from 'fast-json-patch';
import { FIXTURES } from '../support/webhook.js';

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type JsonObject = { [key: string]: Json };
type Path = readonly (string | number)[];

export interface HostileCase {
  readonly body: Buffer;
  /** undefined: no Content-Type header at all. */
  readonly contentType: string | undefined;
  /** What was done to which fixture, for failure messages. */
  readonly steps: readonly string[];
  /**
   * Set when exactly one field the webhook reads was given a wrong type (and nothing else was changed): the
   * answer must reject the review naming this field, e.g. "request.object.spec.containers[0].ports".
   */
  readonly expectedField?: string;
}

interface Base {
  readonly name: string;
  readonly review: JsonObject;
  /** Only a Pod CREATE has its pod checked; other reviews are allowed whatever their object holds. */
  readonly podCreate: boolean;
}

export function loadBases(): Base[] {
  return readdirSync(FIXTURES)
    .filter((file) => file.endsWith('.json'))
    .sort()
    .map((file) => {
      const review = JSON.parse(readFileSync(join(FIXTURES, file), 'utf8')) as JsonObject;
      const request = review['request'] as JsonObject;
      const kind = request['kind'] as JsonObject;
      return { name: file, review, podCreate: kind['kind'] === 'Pod' && request['operation'] === 'CREATE' };
    });
}

// ---- fields the webhook reads, with wrong values for their type and where the answer must point ----------------

type FieldType =
  | 'string'
  | 'stringMap'
  | 'stringList'
  | 'object'
  | 'objectList'
  | 'container'
  | 'containerList'
  | 'port'
  | 'portList'
  | 'int32'
  | 'seconds'
  | 'uid'
  | 'apiVersion'
  | 'reviewKind';

interface Field {
  readonly path: Path;
  readonly type: FieldType;
  /** Only checked for a Pod CREATE. */
  readonly inPod: boolean;
}

function containerFields(list: 'containers' | 'initContainers', index: number): Field[] {
  const at = (...rest: (string | number)[]): Path => ['request', 'object', 'spec', list, index, ...rest];
  const pod = (path: Path, type: FieldType): Field => ({ path, type, inPod: true });
  return [
    pod(at(), 'container'),
    pod(at('name'), 'string'),
    pod(at('image'), 'string'),
    pod(at('command'), 'stringList'),
    pod(at('args'), 'stringList'),
    pod(at('ports'), 'portList'),
    pod(at('ports', 0), 'port'),
    pod(at('ports', 0, 'containerPort'), 'int32'),
    pod(at('ports', 0, 'name'), 'string'),
    pod(at('lifecycle'), 'object'),
    pod(at('lifecycle', 'preStop'), 'object'),
    pod(at('restartPolicy'), 'string'),
    pod(at('env'), 'objectList'),
    pod(at('env', 0), 'object'),
    pod(at('volumeMounts'), 'objectList'),
    pod(at('volumeMounts', 0), 'object'),
  ];
}

const FIELDS: readonly Field[] = [
  { path: ['apiVersion'], type: 'apiVersion', inPod: false },
  { path: ['kind'], type: 'reviewKind', inPod: false },
  { path: ['request'], type: 'object', inPod: false },
  { path: ['request', 'uid'], type: 'uid', inPod: false },
  { path: ['request', 'kind'], type: 'object', inPod: false },
  { path: ['request', 'kind', 'kind'], type: 'string', inPod: false },
  { path: ['request', 'kind', 'group'], type: 'string', inPod: false },
  { path: ['request', 'operation'], type: 'string', inPod: false },
  { path: ['request', 'subResource'], type: 'string', inPod: false },
  { path: ['request', 'namespace'], type: 'string', inPod: false },
  { path: ['request', 'name'], type: 'string', inPod: false },
  { path: ['request', 'object'], type: 'object', inPod: true },
  { path: ['request', 'object', 'metadata'], type: 'object', inPod: true },
  { path: ['request', 'object', 'metadata', 'labels'], type: 'stringMap', inPod: true },
  { path: ['request', 'object', 'metadata', 'annotations'], type: 'stringMap', inPod: true },
  { path: ['request', 'object', 'metadata', 'name'], type: 'string', inPod: true },
  { path: ['request', 'object', 'metadata', 'generateName'], type: 'string', inPod: true },
  { path: ['request', 'object', 'metadata', 'namespace'], type: 'string', inPod: true },
  { path: ['request', 'object', 'spec'], type: 'object', inPod: true },
  { path: ['request', 'object', 'spec', 'containers'], type: 'containerList', inPod: true },
  { path: ['request', 'object', 'spec', 'initContainers'], type: 'containerList', inPod: true },
  ...containerFields('containers', 0),
  ...containerFields('containers', 1),
  ...containerFields('initContainers', 0),
  { path: ['request', 'object', 'spec', 'volumes'], type: 'objectList', inPod: true },
  { path: ['request', 'object', 'spec', 'volumes', 0], type: 'object', inPod: true },
  { path: ['request', 'object', 'spec', 'terminationGracePeriodSeconds'], type: 'seconds', inPod: true },
  { path: ['request', 'object', 'spec', 'restartPolicy'], type: 'string', inPod: true },
];

const STRING_FIELDS = FIELDS.filter((field) => field.type === 'string' || field.type === 'uid');

/** [value, where the answer points relative to the field] */
type Wrong = readonly [Json, string];

const NOT_A_STRING: readonly Wrong[] = [[null, ''], [5, ''], [true, ''], [[], ''], [['x'], ''], [{}, ''], [{ a: 'b' }, '']];
const NOT_AN_OBJECT: readonly Wrong[] = [[null, ''], ['x', ''], [0, ''], [false, ''], [[], ''], [[{}], '']];
const NOT_A_NUMBER: readonly Wrong[] = [[null, ''], ['8080', ''], [true, ''], [[], ''], [[1], ''], [{}, '']];

const WRONG_VALUES: Readonly<Record<FieldType, readonly Wrong[]>> = {
  string: NOT_A_STRING,
  uid: [...NOT_A_STRING, ['', '']],
  apiVersion: [...NOT_A_STRING, ['v1', ''], ['admission.k8s.io/v2', '']],
  reviewKind: [...NOT_A_STRING, ['Pod', '']],
  object: NOT_AN_OBJECT,
  // A map is named as a whole, whichever entry is wrong.
  stringMap: [...NOT_AN_OBJECT, [{ app: 1 }, ''], [{ a: null }, ''], [{ a: {} }, ''], [{ a: [] }, ''], [{ ok: 'x', b: true }, '']],
  stringList: [[null, ''], ['x', ''], [5, ''], [{}, ''], [[null], '[0]'], [[5], '[0]'], [[[]], '[0]'], [['ok', {}], '[1]']],
  objectList: [[null, ''], ['x', ''], [5, ''], [{}, ''], [[null], '[0]'], [['x'], '[0]'], [[7], '[0]'], [[[]], '[0]']],
  container: [[null, ''], ['envoy', ''], [5, ''], [[], ''], [{}, '.name'], [{ name: null }, '.name'], [{ name: 1, image: 'envoy' }, '.name']],
  containerList: [
    [null, ''],
    ['x', ''],
    [{}, ''],
    [{ name: 'envoy' }, ''],
    [[null], '[0]'],
    [['envoy'], '[0]'],
    [[{}], '[0].name'],
    [[{ name: 'envoy', image: 5 }], '[0].image'],
    [[{ name: 'envoy', ports: {} }], '[0].ports'],
    [[{ name: 'envoy', ports: [null] }], '[0].ports[0]'],
  ],
  port: [[null, ''], [80, ''], ['http', ''], [[], ''], [{ containerPort: '80' }, '.containerPort'], [{ name: 7 }, '.name']],
  portList: [
    [null, ''],
    ['x', ''],
    [{}, ''],
    [{ containerPort: 80 }, ''],
    [[null], '[0]'],
    [[8080], '[0]'],
    [[{ containerPort: '8080' }], '[0].containerPort'],
    [[{ containerPort: 1.5 }], '[0].containerPort'],
    [[{ containerPort: 2 ** 31 }], '[0].containerPort'],
    [[{ containerPort: 80, name: 1 }], '[0].name'],
  ],
  int32: [...NOT_A_NUMBER, [1.5, ''], [2 ** 31, ''], [-(2 ** 31) - 1, ''], [1e308, '']],
  seconds: [...NOT_A_NUMBER, [0.5, ''], [-1, ''], [2 ** 64, ''], [1e308, '']],
};

/** "request.object.spec.containers[0].ports" for ['request','object','spec','containers',0,'ports']. */
export function fieldName(path: Path): string {
  return path.map((segment, index) => (typeof segment === 'number' ? `[${segment}]` : index === 0 ? segment : `.${segment}`)).join('');
}

// ---- mutations --------------------------------------------------------------------------------------------------

/** Text in the serialized body replaced by raw bytes: a marker inside a string, or a whole quoted marker. */
interface RawPart {
  readonly marker: string;
  readonly bytes: Buffer;
}

interface Draft {
  readonly review: JsonObject;
  readonly raw: RawPart[];
  readonly steps: string[];
  /** Fields given a wrong type, with where the answer must point. */
  readonly wrong: string[];
  /** Other changes, which may hide or cause errors of their own. */
  otherChanges: number;
}

type Mutation = (draft: Draft) => void;

/**
 * Sets `path`, creating what is missing on the way. Returns whether it all existed: only then is the field's
 * error the first one the schema meets (a created container lacks its name, say).
 */
function setAt(root: JsonObject, path: Path, value: Json): boolean {
  let node: Json = root;
  let existed = true;
  for (let index = 0; index < path.length - 1; index += 1) {
    const segment = path[index] as string | number;
    const next = path[index + 1] as string | number;
    const container = node as Record<string | number, Json>;
    const child = typeof node === 'object' && node !== null && Object.hasOwn(node, segment) ? container[segment] : undefined;
    if (typeof child !== 'object' || child === null) {
      existed = false;
      container[segment] = typeof next === 'number' ? [] : {};
    }
    node = container[segment] as Json;
    if (Array.isArray(node) && typeof next === 'number' && next >= node.length) {
      existed = false;
      while (node.length <= next) node.push({});
    }
  }
  const last = path[path.length - 1] as string | number;
  if (typeof node !== 'object' || node === null) return false;
  (node as Record<string | number, Json>)[last] = value;
  return existed;
}

const wrongType: fc.Arbitrary<Mutation> = fc
  .constantFrom(...FIELDS)
  .chain((field) => fc.tuple(fc.constant(field), fc.constantFrom(...WRONG_VALUES[field.type])))
  .map(([field, [value, suffix]]) => (draft: Draft) => {
    const existed = setAt(draft.review, field.path, structuredClone(value));
    draft.steps.push(`${fieldName(field.path)} = ${JSON.stringify(value)}`);
    if (existed && (!field.inPod || isPodCreate(draft.review))) draft.wrong.push(fieldName(field.path) + suffix);
    else draft.otherChanges += 1;
  });

function isPodCreate(review: JsonObject): boolean {
  const request = review['request'] as JsonObject | undefined;
  const kind = request?.['kind'] as JsonObject | undefined;
  return kind?.['kind'] === 'Pod' && (kind['group'] ?? '') === '' && request?.['operation'] === 'CREATE' && !request['subResource'];
}

const ANNOTATION_KEYS = [
  'shutdown-manager.io/inject',
  'shutdown-manager.io/check-delay',
  'shutdown-manager.io/check-interval',
  'shutdown-manager.io/termination-grace-period',
  'shutdown-manager.io/serve-port',
  'shutdown-manager.io/envoy-admin-port',
  'shutdown-manager.io/envoy-container',
  'shutdown-manager.io/native-sidecar',
  'shutdown-manager.io/status',
  'shutdown-manager.io/listeners',
  'shutdown-manager.io/min-open-connections',
  'shutdown-manager.io/wait-containers',
  'shutdown-manager.io/sidecar-cpu-request',
  'shutdown-manager.io/sidecar-cpu-limit',
  'shutdown-manager.io/sidecar-memory-request',
  'shutdown-manager.io/sidecar-memory-limit',
];

/** Right types, senseless values: these must be judged by the injector (allowed, skipped or denied), never rejected. */
const rightTypeNonsense: fc.Arbitrary<Mutation> = fc.oneof(
  fc
    .tuple(fc.constantFrom(...ANNOTATION_KEYS, 'shutdown-manager.io/x', 'example.com/y'), fc.oneof(fc.string({ maxLength: 12 }), fc.constantFrom('', '0', '-1s', '1e9', '99999999999999999999', 'true', '8090', '24h1ns', '1.5', ' 5s ', '64Mi', '9Ei', '1e-40', '.', 'envoy', 'envoy,,envoy', 'constructor')))
    .map(([key, value]) => (draft: Draft) => {
      setAt(draft.review, ['request', 'object', 'metadata', 'annotations', key], value);
      draft.steps.push(`annotation ${key} = ${JSON.stringify(value)}`);
      draft.otherChanges += 1;
    }),
  fc
    .tuple(fc.constantFrom(0, 1), fc.oneof(fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }), fc.constantFrom(8090, 9001, 0, -1, 65536)))
    .map(([index, port]) => (draft: Draft) => {
      setAt(draft.review, ['request', 'object', 'spec', 'containers', index, 'ports', 0, 'containerPort'], port);
      draft.steps.push(`containers[${index}] port ${port}`);
      draft.otherChanges += 1;
    }),
  fc.oneof(fc.integer({ min: 0, max: 2 ** 53 }), fc.constantFrom(0, 1, 2, 30, 86_400, 2 ** 63)).map((seconds) => (draft: Draft) => {
    setAt(draft.review, ['request', 'object', 'spec', 'terminationGracePeriodSeconds'], seconds);
    draft.steps.push(`terminationGracePeriodSeconds = ${seconds}`);
    draft.otherChanges += 1;
  }),
  fc
    .tuple(fc.constantFrom(...STRING_FIELDS.filter((field) => field.type === 'string')), fc.oneof(fc.string({ maxLength: 10 }), fc.constantFrom('', 'envoy', 'shutdown-manager', 'Always', 'Never', 'OnFailure', 'Pod', 'CREATE')))
    .map(([field, value]) => (draft: Draft) => {
      setAt(draft.review, field.path, value);
      draft.steps.push(`${fieldName(field.path)} = ${JSON.stringify(value)}`);
      draft.otherChanges += 1;
    }),
  fc.constantFrom<Mutation>((draft) => {
    setAt(draft.review, ['request', 'object', 'spec', 'containers'], []);
    draft.steps.push('no containers');
    draft.otherChanges += 1;
  }),
);

/**
 * Keys that name Object.prototype members. Fastify's parser refuses `__proto__` anywhere and `constructor`
 * holding a `prototype`; the others must be plain keys to everything downstream.
 */
const PROTOTYPE_KEYS = ['__proto__', 'constructor', 'prototype', 'toString', 'valueOf', 'hasOwnProperty', '__defineGetter__', 'isPrototypeOf'];
const OBJECT_PATHS: readonly Path[] = [
  [],
  ['request'],
  ['request', 'kind'],
  ['request', 'object'],
  ['request', 'object', 'metadata'],
  ['request', 'object', 'metadata', 'labels'],
  ['request', 'object', 'metadata', 'annotations'],
  ['request', 'object', 'spec'],
  ['request', 'object', 'spec', 'containers', 0],
  ['request', 'object', 'spec', 'containers', 0, 'lifecycle'],
  ['request', 'object', 'spec', 'containers', 0, 'ports', 0],
];

const someJson: fc.Arbitrary<Json> = fc.oneof(
  fc.constantFrom<Json>(null, true, 0, -1, 'x', '', [], {}, [null], { prototype: { polluted: true } }, { prototype: 'p' }),
  fc.jsonValue({ maxDepth: 2 }) as fc.Arbitrary<Json>,
);

const prototypeKey: fc.Arbitrary<Mutation> = fc
  .tuple(fc.constantFrom(...OBJECT_PATHS), fc.constantFrom(...PROTOTYPE_KEYS), someJson)
  .map(([path, key, value]) => (draft: Draft) => {
    let node: Json = draft.review;
    for (const segment of path) {
      const next: Json | undefined = typeof node === 'object' && node !== null && Object.hasOwn(node, segment) ? (node as Record<string | number, Json>)[segment] : undefined;
      if (next === undefined) break;
      node = next;
    }
    if (typeof node !== 'object' || node === null || Array.isArray(node)) return;
    // An own property named __proto__, as JSON.parse makes it (plain assignment would set the prototype).
    Object.defineProperty(node, key, { value: structuredClone(value), enumerable: true, writable: true, configurable: true });
    draft.steps.push(`${fieldName(path) || '(root)'}[${JSON.stringify(key)}] = ${JSON.stringify(value)}`);
    draft.otherChanges += 1;
  });

let markers = 0;
function marker(): string {
  markers += 1;
  return `~hostile-${markers}~`;
}

/** Long strings where strings belong: the right type, so never a reason to reject. */
const hugeString: fc.Arbitrary<Mutation> = fc
  .tuple(fc.constantFrom(...STRING_FIELDS), fc.integer({ min: 1_000, max: 16_000 }), fc.constantFrom('x', 'é', '€', '😀', 'envoy', '\\', '"', '\u0000'))
  .map(([field, length, unit]) => (draft: Draft) => {
    setAt(draft.review, field.path, unit.repeat(Math.ceil(length / unit.length)));
    draft.steps.push(`${fieldName(field.path)} = ${length} × ${JSON.stringify(unit)}`);
    draft.otherChanges += 1;
  });

/** Byte sequences that are not UTF-8: lone continuation, overlong, surrogate, truncated, invalid lead bytes. */
const NOT_UTF8 = [[0xff], [0x80], [0xc0, 0xaf], [0xed, 0xa0, 0x80], [0xe2, 0x82], [0xf8, 0x88, 0x80, 0x80, 0x80], [0xfe, 0xff], [0xc3]];

const rawBytes: fc.Arbitrary<Mutation> = fc
  .tuple(fc.constantFrom(...STRING_FIELDS, { path: ['request', 'object', 'metadata', 'labels', 'app'], type: 'string' as const, inPod: true }), fc.constantFrom(...NOT_UTF8), fc.constantFrom('', 'envoy'))
  .map(([field, bytes, around]) => (draft: Draft) => {
    const token = marker();
    setAt(draft.review, field.path, `${around}${token}${around}`);
    draft.raw.push({ marker: token, bytes: Buffer.from(bytes) });
    draft.steps.push(`${fieldName(field.path)} has raw bytes ${Buffer.from(bytes).toString('hex')}`);
    draft.otherChanges += 1;
  });

/** Nesting far deeper than any pod: JSON.stringify and structuredClone overflow the stack at about 10,000 levels. */
const deepNesting: fc.Arbitrary<Mutation> = fc
  .tuple(
    fc.constantFrom<Path>(
      ['request', 'object', 'metadata', 'managedFields'],
      ['request', 'object', 'spec', 'affinity'],
      ['request', 'object', 'spec', 'containers', 0, 'lifecycle', 'postStart'],
      ['request', 'object', 'spec', 'containers', 0, 'lifecycle', 'preStop'],
      ['request', 'object', 'spec', 'containers', 0, 'image'],
      ['request', 'object', 'metadata', 'labels'],
      ['request', 'object', 'spec', 'volumes'],
      ['request', 'object', 'spec', 'containers', 0, 'env'],
      ['request', 'userInfo'],
      ['request', 'kind', 'kind'],
      ['request', 'object', 'metadata', 'name'],
    ),
    fc.constantFrom(64, 5_000, 20_000),
    fc.constantFrom('[', '{"a":'),
  )
  .map(([path, depth, open]) => (draft: Draft) => {
    const token = marker();
    setAt(draft.review, path, token);
    const close = open === '[' ? ']' : '}';
    const inner = open === '[' ? '' : 'null';
    draft.raw.push({ marker: `"${token}"`, bytes: Buffer.from(open.repeat(depth) + inner + close.repeat(depth)) });
    draft.steps.push(`${fieldName(path)} nested ${depth} deep with ${open}`);
    draft.otherChanges += 1;
  });

const mutation: fc.Arbitrary<Mutation> = fc.oneof(
  { arbitrary: wrongType, weight: 6 },
  { arbitrary: rightTypeNonsense, weight: 3 },
  { arbitrary: prototypeKey, weight: 2 },
  { arbitrary: hugeString, weight: 1 },
  { arbitrary: rawBytes, weight: 1 },
  { arbitrary: deepNesting, weight: 1 },
);

// ---- the body as a whole ---------------------------------------------------------------------------------------

type BodyChange =
  | { readonly kind: 'none' }
  | { readonly kind: 'pad'; readonly delta: -1 | 0 | 1 }
  | { readonly kind: 'truncate'; readonly fraction: number }
  | { readonly kind: 'bom' }
  | { readonly kind: 'garbage'; readonly bytes: readonly number[]; readonly where: 'before' | 'after' }
  | { readonly kind: 'empty' };

const bodyChange: fc.Arbitrary<BodyChange> = fc.oneof(
  { arbitrary: fc.constant({ kind: 'none' } as const), weight: 12 },
  { arbitrary: fc.constantFrom(-1, 0, 1).map((delta) => ({ kind: 'pad', delta }) as const), weight: 2 },
  { arbitrary: fc.double({ min: 0, max: 1, noNaN: true }).map((fraction) => ({ kind: 'truncate', fraction }) as const), weight: 1 },
  { arbitrary: fc.constant({ kind: 'bom' } as const), weight: 1 },
  {
    arbitrary: fc
      .record({ bytes: fc.array(fc.integer({ min: 0, max: 255 }), { minLength: 1, maxLength: 8 }), where: fc.constantFrom('before' as const, 'after' as const) })
      .map((garbage) => ({ kind: 'garbage', ...garbage }) as const),
    weight: 1,
  },
  { arbitrary: fc.constant({ kind: 'empty' } as const), weight: 1 },
);

const CONTENT_TYPES = ['application/json', 'application/json; charset=utf-8', 'Application/JSON', 'text/plain', 'application/x-www-form-urlencoded', undefined];
const contentType = fc.oneof(
  { arbitrary: fc.constant('application/json'), weight: 20 },
  { arbitrary: fc.constantFrom(...CONTENT_TYPES), weight: 1 },
);

function serialize(review: JsonObject, raw: readonly RawPart[]): Buffer {
  let parts: Buffer[] = [Buffer.from(JSON.stringify(review))];
  for (const { marker: token, bytes } of raw) {
    const needle = Buffer.from(token);
    parts = parts.flatMap((part) => {
      const at = part.indexOf(needle);
      return at === -1 ? [part] : [part.subarray(0, at), bytes, part.subarray(at + needle.length)];
    });
  }
  return Buffer.concat(parts);
}

/** Pads through an unknown top-level field, which every reader ignores, to exactly `size` bytes when it can. */
function padTo(review: JsonObject, raw: readonly RawPart[], size: number): Buffer {
  const unpadded = serialize({ ...review, padding: '' }, raw);
  const missing = size - unpadded.length;
  return missing < 0 ? unpadded : serialize({ ...review, padding: 'p'.repeat(missing) }, raw);
}

export function hostileCases(bases: readonly Base[], bodyLimit: number): fc.Arbitrary<HostileCase> {
  return fc
    .record({
      base: fc.constantFrom(...bases),
      mutations: fc.array(mutation, { maxLength: 3 }),
      change: bodyChange,
      contentType,
    })
    .map(({ base, mutations, change, contentType: type }) => {
      const draft: Draft = { review: structuredClone(base.review), raw: [], steps: [base.name], wrong: [], otherChanges: 0 };
      for (const mutate of mutations) mutate(draft);
      let body: Buffer;
      switch (change.kind) {
        case 'none':
          body = serialize(draft.review, draft.raw);
          break;
        case 'pad':
          body = padTo(draft.review, draft.raw, bodyLimit + change.delta);
          draft.steps.push(`padded to ${body.length} bytes (limit ${bodyLimit})`);
          break;
        case 'truncate': {
          const whole = serialize(draft.review, draft.raw);
          body = whole.subarray(0, Math.floor(whole.length * change.fraction));
          draft.steps.push(`truncated to ${body.length} of ${whole.length} bytes`);
          break;
        }
        case 'bom':
          body = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), serialize(draft.review, draft.raw)]);
          draft.steps.push('UTF-8 BOM');
          break;
        case 'garbage': {
          const garbage = Buffer.from(change.bytes);
          const whole = serialize(draft.review, draft.raw);
          body = change.where === 'before' ? Buffer.concat([garbage, whole]) : Buffer.concat([whole, garbage]);
          draft.steps.push(`garbage ${garbage.toString('hex')} ${change.where}`);
          break;
        }
        case 'empty':
          body = Buffer.alloc(0);
          draft.steps.push('empty body');
          break;
      }
      if (type !== 'application/json') draft.steps.push(`content type ${String(type)}`);
      const alone = draft.wrong.length === 1 && draft.otherChanges === 0 && change.kind === 'none' && type === 'application/json';
      return { body, contentType: type, steps: draft.steps, ...(alone ? { expectedField: draft.wrong[0] } : {}) };
    });
}

// ---- what every answer must satisfy -------------------------------------------------------------------------

const ADMISSION_VERSIONS = ['admission.k8s.io/v1', 'admission.k8s.io/v1beta1'];

/** The review as the server reads it (UTF-8 with replacement characters, a BOM skipped), or undefined if it cannot. */
function parseAsServer(hostile: HostileCase, bodyLimit: number): { value: unknown } | undefined {
  if (hostile.contentType === undefined || !/^application\/json\s*(;|$)/i.test(hostile.contentType)) return undefined;
  if (hostile.body.length > bodyLimit || hostile.body.length === 0) return undefined;
  let text = hostile.body.toString('utf8');
  if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return undefined;
  }
  return poisoned(value) ? undefined : { value };
}

/** Fastify's parser refuses these: an own __proto__ anywhere, or a constructor holding a prototype. Iterative, for deep bodies. */
function poisoned(root: unknown): boolean {
  const stack: unknown[] = [root];
  while (stack.length > 0) {
    const node = stack.pop();
    if (typeof node !== 'object' || node === null) continue;
    if (!Array.isArray(node)) {
      if (Object.hasOwn(node, '__proto__')) return true;
      const constructorValue = Object.hasOwn(node, 'constructor') ? (node as Record<string, unknown>)['constructor'] : undefined;
      if (typeof constructorValue === 'object' && constructorValue !== null && Object.hasOwn(constructorValue, 'prototype')) return true;
    }
    for (const child of Object.values(node)) stack.push(child);
  }
  return false;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** The apiVersion and uid an answer in kind must carry, when the body lets them be read. */
export function readableIdentity(hostile: HostileCase, bodyLimit: number): { apiVersion: string; uid: string; review: Record<string, unknown> } | undefined {
  const parsed = parseAsServer(hostile, bodyLimit);
  if (parsed === undefined || !isObject(parsed.value)) return undefined;
  const review = parsed.value;
  const request = review['request'];
  if (review['kind'] !== 'AdmissionReview' || !isObject(request)) return undefined;
  const apiVersion = review['apiVersion'];
  const uid = request['uid'];
  if (typeof apiVersion !== 'string' || !ADMISSION_VERSIONS.includes(apiVersion) || typeof uid !== 'string' || uid === '') return undefined;
  return { apiVersion, uid, review };
}

export interface Answer {
  readonly status: number;
  readonly text: string;
}

/** How the answer is counted: by status, and for answers in kind by what they say. */
export type AnswerClass = 'allowed' | 'patched' | 'denied' | 'invalid (in kind)' | `HTTP ${number}`;

export function classify(answer: Answer): AnswerClass {
  if (answer.status !== 200) return `HTTP ${answer.status}`;
  const response = (JSON.parse(answer.text) as { response: { allowed: boolean; patch?: string; status?: { message?: string } } }).response;
  if (response.allowed) return response.patch === undefined ? 'allowed' : 'patched';
  return response.status?.message?.startsWith('envoy-shutdown-manager: AdmissionReview ') ? 'invalid (in kind)' : 'denied';
}

/** Everything wrong with `answer`; empty when it is right. */
export function problemsWith(hostile: HostileCase, answer: Answer, bodyLimit: number): string[] {
  const problems: string[] = [];
  if (answer.status >= 500) return [`HTTP ${answer.status}: ${answer.text.slice(0, 300)}`];
  const identity = readableIdentity(hostile, bodyLimit);
  let json: Record<string, unknown>;
  try {
    json = JSON.parse(answer.text) as Record<string, unknown>;
  } catch {
    return [`HTTP ${answer.status} with a body that is not JSON: ${answer.text.slice(0, 200)}`];
  }
  const expected = hostile.expectedField === undefined ? undefined : `AdmissionReview ${hostile.expectedField} must be `;

  if (identity === undefined) {
    if (![400, 413, 415].includes(answer.status)) problems.push(`no readable uid, yet HTTP ${answer.status}`);
    if (typeof json['message'] !== 'string' || json['message'] === '') problems.push('an error without a message');
    else if (expected !== undefined && !json['message'].includes(expected)) problems.push(`message does not name ${hostile.expectedField}: ${json['message']}`);
    return problems;
  }

  if (answer.status !== 200) return [`uid ${identity.uid.slice(0, 40)} was readable, yet HTTP ${answer.status}: ${answer.text.slice(0, 200)}`];
  if (json['apiVersion'] !== identity.apiVersion || json['kind'] !== 'AdmissionReview') problems.push(`answered as ${String(json['apiVersion'])} ${String(json['kind'])}`);
  const response = json['response'];
  if (!isObject(response)) return [...problems, 'no response object'];
  if (response['uid'] !== identity.uid) problems.push(`uid not echoed: ${String(response['uid']).slice(0, 40)}`);
  if (typeof response['allowed'] !== 'boolean') problems.push('allowed is not a boolean');
  if (response['allowed'] === false) {
    const status = response['status'];
    if (!isObject(status) || status['code'] !== 400 || typeof status['message'] !== 'string') problems.push(`denied without a 400 status: ${JSON.stringify(status)}`);
    else if (expected !== undefined && !status['message'].includes(expected)) problems.push(`message does not name ${hostile.expectedField}: ${status['message']}`);
  } else if (expected !== undefined) {
    problems.push(`allowed, although ${hostile.expectedField} has a wrong type`);
  }
  if (response['patch'] !== undefined) problems.push(...patchProblems(response, identity.review));
  return problems;
}

function patchProblems(response: Record<string, unknown>, review: Record<string, unknown>): string[] {
  if (response['patchType'] !== 'JSONPatch' || typeof response['patch'] !== 'string') return ['a patch without patchType JSONPatch'];
  let operations: Operation[];
  try {
    operations = JSON.parse(Buffer.from(response['patch'], 'base64').toString('utf8')) as Operation[];
  } catch {
    return ['a patch that is not base64 JSON'];
  }
  const request = review['request'] as Record<string, unknown>;
  try {
    // The pod as parsed from the body is ours to change (structuredClone would overflow on deep nesting).
    jsonPatch.applyPatch(request['object'], operations, true, true);
  } catch (error) {
    return [`the patch does not apply: ${(error as Error).message.slice(0, 200)}`];
  }
  return [];
}

// ---- an HTTPS client that keeps connections alive ---------------------------------------------------------------

export interface HostileClient {
  send(hostile: HostileCase): Promise<Answer>;
  close(): void;
}

export function hostileClient(url: string, ca: string, connections: number): HostileClient {
  const agent = new Agent({ keepAlive: true, maxSockets: connections, ca });
  const once = (hostile: HostileCase, reuse: boolean): Promise<Answer> =>
    new Promise((resolve, reject) => {
      const headers: Record<string, string> = { 'content-length': String(hostile.body.length) };
      if (hostile.contentType !== undefined) headers['content-type'] = hostile.contentType;
      const req = request(`${url}/mutate`, { method: 'POST', headers, ...(reuse ? { agent } : { agent: false, ca }), timeout: 20_000 }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8') }));
        res.on('error', reject);
      });
      req.on('timeout', () => req.destroy(new Error('no answer within 20 s')));
      req.on('error', (error: NodeJS.ErrnoException) => {
        // A kept-alive connection the server closed just as this request went out: Node's documented retry case.
        if (reuse && req.reusedSocket && (error.code === 'ECONNRESET' || error.code === 'EPIPE')) resolve(once(hostile, false));
        else reject(error);
      });
      req.end(hostile.body);
    });
  return { send: (hostile) => once(hostile, true), close: () => agent.destroy() };
}
