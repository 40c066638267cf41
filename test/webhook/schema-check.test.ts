/**
 * schema-check.ts against ajv, the validator Fastify used to check the review with (ajv 8, Fastify's defaults and
 * the webhook's options): the same first violation, keyword, path and params, on generated hostile reviews and
 * on the edge cases of each keyword. ajv comes with Fastify; it is only the yardstick here.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Ajv } from 'ajv';
import fc from 'fast-check';
import { ADMISSION_REVIEW_SCHEMA, POD_SCHEMA, type JsonSchema } from '../../src/webhook/review-schema.js';
import { compileSchemaCheck } from '../../src/webhook/schema-check.js';
import { hostileCases, loadBases } from './hostile-reviews.js';

// As @fastify/ajv-compiler built it, with the options the webhook gave Fastify.
const ajv = new Ajv({ coerceTypes: false, useDefaults: false, removeAdditional: false, allErrors: false, addUsedSchema: false });

function checkers(schema: JsonSchema): { ours: (value: unknown) => unknown; theirs: (value: unknown) => unknown } {
  const validate = ajv.compile(schema);
  const ours = compileSchemaCheck(schema);
  return {
    ours: (value) => ours(value),
    theirs: (value) => {
      if (validate(value)) return undefined;
      const { keyword, instancePath, params } = validate.errors?.[0] ?? {};
      return { keyword, instancePath, params };
    },
  };
}

const review = checkers(ADMISSION_REVIEW_SCHEMA);
const pod = checkers(POD_SCHEMA);

function assertSame(check: ReturnType<typeof checkers>, value: unknown, what: string): void {
  assert.deepEqual(check.ours(value), check.theirs(value), what);
}

test('the first violation of a generated hostile review is the one ajv reports', () => {
  let violations = 0;
  fc.assert(
    fc.property(hostileCases(loadBases(), 65_536), (hostile) => {
      let body: unknown;
      try {
        body = JSON.parse(hostile.body.toString('utf8'));
      } catch {
        return; // Fastify answers 400 before any schema sees it
      }
      const what = hostile.steps.join(' | ').slice(0, 300);
      assertSame(review, body, what);
      const object = (body as { request?: { object?: unknown } } | null)?.request?.object;
      assertSame(pod, object, what);
      if (review.ours(body) !== undefined || pod.ours(object) !== undefined) violations += 1;
    }),
    { numRuns: 1500 },
  );
  assert.ok(violations >= 300, `too few violations to compare: ${violations}`);
});

test("each keyword's edge cases: the violation ajv reports", () => {
  const base = { apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', request: { uid: 'u', kind: { kind: 'Pod' }, operation: 'CREATE' } };
  const reviews: unknown[] = [
    base,
    null,
    [],
    'text',
    {},
    { ...base, apiVersion: 'v1' },
    { ...base, apiVersion: 7 },
    { ...base, kind: 'Review' },
    { ...base, request: { ...base.request, uid: '' } },
    { ...base, request: { ...base.request, uid: '\u{1F600}' } },
    { ...base, request: { ...base.request, uid: 5, kind: undefined } },
    { ...base, request: { kind: 'Pod' } },
    { ...base, request: { ...base.request, kind: {} } },
  ];
  for (const value of reviews) assertSame(review, value, JSON.stringify(value));

  const spec = { containers: [{ name: 'envoy', ports: [{ containerPort: 8080 }] }] };
  const pods: unknown[] = [
    { spec },
    { metadata: {} },
    { spec: { ...spec, terminationGracePeriodSeconds: JSON.parse('1e400') as number } },
    { spec: { ...spec, terminationGracePeriodSeconds: -1 } },
    { spec: { ...spec, terminationGracePeriodSeconds: 2 ** 64 } },
    { spec: { ...spec, terminationGracePeriodSeconds: 1.5 } },
    { spec: { ...spec, terminationGracePeriodSeconds: '30' } },
    { spec: { containers: [{ name: 'envoy', ports: [{ containerPort: 2 ** 31 }] }] } },
    { spec: { containers: [{ name: 'envoy' }, { image: 'x' }] } },
    { spec: { containers: [{ name: 'envoy', args: ['a', 1] }] } },
    { spec, metadata: { annotations: { ok: 'yes', 'a/b~c': 1 } } },
    { spec, metadata: { labels: [] } },
    { spec: { containers: [{ name: 'envoy', lifecycle: { preStop: 'x' } }] } },
  ];
  for (const value of pods) assertSame(pod, value, JSON.stringify(value));
});

test('a violation deep in the pod is reported at its path, escaped as a JSON pointer', () => {
  const check = compileSchemaCheck(POD_SCHEMA);
  assert.deepEqual(check({ spec: { containers: [] }, metadata: { annotations: { 'a/b~c': 1 } } }), {
    keyword: 'type',
    instancePath: '/metadata/annotations/a~1b~0c',
    params: { type: 'string' },
  });
  assert.deepEqual(check({ spec: { containers: [{ name: 'envoy' }, {}] } }), {
    keyword: 'required',
    instancePath: '/spec/containers/1',
    params: { missingProperty: 'name' },
  });
});
