/**
 * The shape of what the API server sends, as JSON Schemas: the AdmissionReview envelope, and the Pod as far as
 * the injector reads it, checked by ajv (compileReviewChecks); `describeViolation` turns the first violation
 * into a sentence naming the field. Every `description` is the expected form as it appears in that sentence
 * ("… must be <description>"); a node without one is reported at its nearest described ancestor (a map of
 * strings is named as the map, not by the key that broke it).
 *
 * Only types are checked, the way the API server's own decoding would have failed: a value of the right type
 * that makes no sense (a port of 0, a container without an image) is still the injector's to judge.
 * Unknown fields are allowed everywhere: the API server sends many that the injector never reads.
 */

/** The subset of JSON Schema used here; ajv accepts it as is. */
export interface JsonSchema {
  readonly type?: 'object' | 'array' | 'string' | 'integer';
  readonly description?: string;
  readonly properties?: Readonly<Record<string, JsonSchema>>;
  readonly required?: readonly string[];
  readonly additionalProperties?: JsonSchema;
  readonly items?: JsonSchema;
  readonly enum?: readonly string[];
  readonly const?: string;
  readonly minLength?: number;
  readonly minimum?: number;
  readonly maximum?: number;
}

export const ADMISSION_VERSIONS = ['admission.k8s.io/v1', 'admission.k8s.io/v1beta1'] as const;

const aString: JsonSchema = { type: 'string', description: 'a string' };
const stringList: JsonSchema = { type: 'array', description: 'a list of strings', items: aString };
/** Labels and annotations: a bad value is reported as the map, which is what the user wrote wrong. */
const stringMap: JsonSchema = { type: 'object', description: 'a map of strings', additionalProperties: { type: 'string' } };
const anObject: JsonSchema = { type: 'object', description: 'an object' };

function listOf(what: string, item: JsonSchema): JsonSchema {
  return { type: 'array', description: `a list of ${what}`, items: item };
}

/** Go's int32 and int64, which the API server's decoding enforces before any webhook sees the object. */
const INT32 = { minimum: -(2 ** 31), maximum: 2 ** 31 - 1 } as const;
// 2 ** 63 - 1 rounds to 2 ** 63 as a double, and so does the largest int64 in JSON: the bound still holds.
const INT64_MAX = 2 ** 63 - 1;

const PORT: JsonSchema = {
  type: 'object',
  description: 'a port (an object with an integer containerPort)',
  properties: {
    containerPort: { type: 'integer', description: 'a whole number (int32)', ...INT32 },
    name: aString,
  },
};

const CONTAINER: JsonSchema = {
  type: 'object',
  description: 'a container (an object with a string name)',
  required: ['name'],
  properties: {
    name: aString,
    image: aString,
    command: stringList,
    args: stringList,
    ports: listOf('ports', PORT),
    lifecycle: { ...anObject, properties: { preStop: anObject } },
    restartPolicy: aString,
    env: listOf('objects', anObject),
    volumeMounts: listOf('objects', anObject),
  },
};

/** Checked only for a Pod CREATE: the object of any other request is never read. */
export const POD_SCHEMA: JsonSchema = {
  type: 'object',
  description: 'the Pod being created',
  required: ['spec'],
  properties: {
    metadata: {
      ...anObject,
      properties: {
        name: aString,
        generateName: aString,
        namespace: aString,
        labels: stringMap,
        annotations: stringMap,
      },
    },
    spec: {
      ...anObject,
      properties: {
        containers: listOf('containers', CONTAINER),
        initContainers: listOf('containers', CONTAINER),
        volumes: listOf('objects', anObject),
        terminationGracePeriodSeconds: {
          type: 'integer',
          description: 'a whole number of seconds, 0 or more',
          minimum: 0,
          maximum: INT64_MAX,
        },
        restartPolicy: aString,
      },
    },
  },
};

export const ADMISSION_REVIEW_SCHEMA: JsonSchema = {
  type: 'object',
  description: 'a JSON object',
  required: ['apiVersion', 'kind', 'request'],
  properties: {
    apiVersion: { type: 'string', description: `one of ${ADMISSION_VERSIONS.join(', ')}`, enum: ADMISSION_VERSIONS },
    kind: { type: 'string', description: '"AdmissionReview"', const: 'AdmissionReview' },
    request: {
      ...anObject,
      required: ['uid', 'kind', 'operation'],
      properties: {
        uid: { type: 'string', description: 'a non-empty string', minLength: 1 },
        kind: {
          type: 'object',
          description: 'an object with a string "kind", such as {"group":"","version":"v1","kind":"Pod"}',
          required: ['kind'],
          properties: { group: aString, version: aString, kind: aString },
        },
        operation: { type: 'string', description: 'a string such as "CREATE"' },
        subResource: aString,
        namespace: aString,
        name: aString,
        // request.object is checked by POD_SCHEMA once the request is known to create a Pod.
      },
    },
  },
};

/** One error as ajv reports it. */
export interface SchemaViolation {
  readonly keyword: string;
  /** JSON pointer to the offending value, "" for the root. */
  readonly instancePath: string;
  readonly params: Readonly<Record<string, unknown>>;
}

/**
 * "<root><path> must be <description> (got <value>)". `root` names where `schema` sits in the review
 * ("request.object" for the pod); `data` is the value that was checked.
 */
export function describeViolation(schema: JsonSchema, root: string, data: unknown, violation: SchemaViolation): string {
  const segments = violation.instancePath === '' ? [] : violation.instancePath.slice(1).split('/').map(unescapePointer);
  const missing = violation.keyword === 'required' ? violation.params['missingProperty'] : undefined;
  if (typeof missing === 'string') segments.push(missing);

  // Walk schema and data together; remember the deepest node that can describe itself.
  let node: JsonSchema | undefined = schema;
  let value: unknown = data;
  let path = '';
  let described = { path, node: schema, value };
  for (const segment of segments) {
    const step = childOf(node, segment);
    if (step === undefined) break;
    node = step.node;
    path += step.label;
    value = ownValue(value, segment);
    if (node.description !== undefined) described = { path, node, value };
  }
  const where = root !== '' ? `${root}${described.path}` : described.path.replace(/^\./, '') || 'body';
  return `AdmissionReview ${where} must be ${described.node.description ?? 'valid'} (got ${preview(described.value)})`;
}

function unescapePointer(segment: string): string {
  return segment.replaceAll('~1', '/').replaceAll('~0', '~');
}

function childOf(node: JsonSchema | undefined, segment: string): { node: JsonSchema; label: string } | undefined {
  if (node === undefined) return undefined;
  if (node.type === 'array' && node.items !== undefined) return { node: node.items, label: `[${segment}]` };
  const property = node.properties !== undefined && Object.hasOwn(node.properties, segment) ? node.properties[segment] : undefined;
  if (property !== undefined) return { node: property, label: `.${segment}` };
  if (node.additionalProperties !== undefined) return { node: node.additionalProperties, label: `[${JSON.stringify(segment)}]` };
  return undefined;
}

function ownValue(container: unknown, key: string): unknown {
  if (typeof container !== 'object' || container === null) return undefined;
  return Object.hasOwn(container, key) ? (container as Record<string, unknown>)[key] : undefined;
}

const PREVIEW_LENGTH = 60;

/**
 * A short rendering of the offending value for the message. Bounded in depth and length: the value may be a
 * 3 MiB string or nested a million levels deep, and JSON.stringify of that would overflow the stack.
 */
export function preview(value: unknown): string {
  const text = render(value, 2);
  return text.length <= PREVIEW_LENGTH ? text : `${text.slice(0, PREVIEW_LENGTH - 1)}…`;
}

function render(value: unknown, depth: number): string {
  if (value === undefined) return 'undefined';
  if (typeof value === 'string') return JSON.stringify(value.length <= PREVIEW_LENGTH ? value : value.slice(0, PREVIEW_LENGTH));
  if (typeof value !== 'object' || value === null) return String(value);
  if (Array.isArray(value)) {
    if (value.length === 0) return '[]';
    if (depth === 0) return '[…]';
    return `[${value.slice(0, 4).map((item: unknown) => render(item, depth - 1)).join(',')}${value.length > 4 ? ',…' : ''}]`;
  }
  const keys = Object.keys(value);
  if (keys.length === 0) return '{}';
  if (depth === 0) return '{…}';
  const shown = keys.slice(0, 4).map((key) => `${JSON.stringify(key.slice(0, PREVIEW_LENGTH))}:${render((value as Record<string, unknown>)[key], depth - 1)}`);
  return `{${shown.join(',')}${keys.length > 4 ? ',…' : ''}}`;
}

/** A compiled schema: the first violation, or undefined when the value conforms. Compiling is the edge's job. */
export type SchemaCheck = (value: unknown) => SchemaViolation | undefined;

export interface ReviewSchemaChecks {
  /** Checks ADMISSION_REVIEW_SCHEMA. */
  readonly review: SchemaCheck;
  /** Checks POD_SCHEMA. */
  readonly pod: SchemaCheck;
}

/**
 * The review's schemas compiled by ajv, the one validator the webhook loads (Fastify is given no route schema:
 * see server.ts). The schemas must check the review, never repair it: coercion ("8080" → 8080, x → [x]) and
 * defaults would change the pod that the patch is computed against, and the API server applies the patch to the
 * unchanged one.
 */
export async function compileReviewChecks(): Promise<ReviewSchemaChecks> {
  // ajv is CommonJS whose module.exports is the Ajv class itself: take it as the default export, which both
  // Node's own loader and the bundle (esbuild gives a lazily loaded CommonJS chunk only a default) provide.
  const { default: ajvExports } = await import('ajv');
  const Ajv = ajvExports as unknown as typeof import('ajv').Ajv;
  const ajv = new Ajv({ coerceTypes: false, useDefaults: false, removeAdditional: false, allErrors: false, addUsedSchema: false });
  const compile = (schema: JsonSchema): SchemaCheck => {
    const validate = ajv.compile(schema);
    return (value) => (validate(value) ? undefined : (validate.errors?.[0] ?? { keyword: 'unknown', instancePath: '', params: {} }));
  };
  return { review: compile(ADMISSION_REVIEW_SCHEMA), pod: compile(POD_SCHEMA) };
}
