/**
 * src/webhook/review-schema.ts on its own: the schemas compiled by ajv accept what the API server sends and refuse
 * only wrong types, never repairing a value; describeViolation names the field in the review and the expected
 * form; preview stays short whatever it is given. test/webhook/admission-json.test.ts and the hostile tests
 * check the same through HTTPS.
 */
import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';
import {
  ADMISSION_REVIEW_SCHEMA,
  compileReviewChecks,
  describeViolation,
  POD_SCHEMA,
  preview,
  type ReviewSchemaChecks,
} from '../../src/webhook/review-schema.js';

function review(request: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    apiVersion: 'admission.k8s.io/v1',
    kind: 'AdmissionReview',
    request: { uid: 'u-1', kind: { group: '', version: 'v1', kind: 'Pod' }, operation: 'CREATE', ...request },
  };
}

const POD = {
  metadata: { name: 'edge', namespace: 'edge', labels: { app: 'envoy' }, annotations: { 'shutdown-manager.io/drain-delay': '5s' } },
  spec: {
    containers: [{ name: 'envoy', image: 'envoyproxy/envoy:v1.31.2', args: ['-c', '/e.yaml'], ports: [{ containerPort: 8080 }] }],
    terminationGracePeriodSeconds: 30,
    unknownField: { kept: true },
  },
};

describe('the compiled checks', () => {
  let checks: ReviewSchemaChecks;
  before(async () => {
    checks = await compileReviewChecks();
  });

  test('accept a review of either admission version, and a pod with fields the injector never reads', () => {
    assert.equal(checks.review(review()), undefined);
    assert.equal(checks.review({ ...review(), apiVersion: 'admission.k8s.io/v1beta1' }), undefined);
    assert.equal(checks.pod(POD), undefined);
  });

  test('refuse the wrong types, and name the first violation with its JSON pointer', () => {
    assert.deepEqual(pick(checks.review({ ...review(), kind: 'Review' })), { keyword: 'const', instancePath: '/kind' });
    assert.deepEqual(pick(checks.review(review({ uid: '' }))), { keyword: 'minLength', instancePath: '/request/uid' });
    assert.deepEqual(pick(checks.pod({ spec: { containers: [{ name: 'envoy', ports: [{ containerPort: '8080' }] }] } })), {
      keyword: 'type',
      instancePath: '/spec/containers/0/ports/0/containerPort',
    });
    assert.deepEqual(pick(checks.pod({ spec: { terminationGracePeriodSeconds: -1 } })), { keyword: 'minimum', instancePath: '/spec/terminationGracePeriodSeconds' });
    assert.deepEqual(pick(checks.pod({ spec: { containers: [{ name: 'envoy', ports: [{ containerPort: 2 ** 31 }] }] } })), {
      keyword: 'maximum',
      instancePath: '/spec/containers/0/ports/0/containerPort',
    });
  });

  test('never repair the value: no coercion of "8080" or of a lone string into a list, no defaults', () => {
    const pod = { spec: { containers: [{ name: 'envoy', args: '-c /e.yaml', ports: [{ containerPort: '8080' }] }] } };
    const before = structuredClone(pod);
    assert.notEqual(checks.pod(pod), undefined, 'a string for args is refused');
    assert.deepEqual(pod, before);
  });

  test('a value of the right type that makes no sense is left to the injector', () => {
    assert.equal(checks.pod({ spec: { containers: [{ name: 'envoy', ports: [{ containerPort: 0 }] }] } }), undefined);
  });
});

function pick(violation: { keyword: string; instancePath: string } | undefined): { keyword: string; instancePath: string } | undefined {
  return violation === undefined ? undefined : { keyword: violation.keyword, instancePath: violation.instancePath };
}

describe('describeViolation', () => {
  test("names the field under the review's root and the expected form, with the value it got", () => {
    const body = review();
    assert.equal(
      describeViolation(ADMISSION_REVIEW_SCHEMA, '', { ...body, apiVersion: 'v2' }, { keyword: 'enum', instancePath: '/apiVersion', params: {} }),
      'AdmissionReview apiVersion must be one of admission.k8s.io/v1, admission.k8s.io/v1beta1 (got "v2")',
    );
    const pod = { spec: { containers: [{ name: 'envoy', ports: [{ containerPort: '8080' }] }] } };
    assert.equal(
      describeViolation(POD_SCHEMA, 'request.object', pod, { keyword: 'type', instancePath: '/spec/containers/0/ports/0/containerPort', params: {} }),
      'AdmissionReview request.object.spec.containers[0].ports[0].containerPort must be a whole number (int32) (got "8080")',
    );
  });

  test('a missing property is named itself; a whole bad body is "body"', () => {
    assert.equal(
      describeViolation(ADMISSION_REVIEW_SCHEMA, '', { request: {} }, { keyword: 'required', instancePath: '/request', params: { missingProperty: 'uid' } }),
      'AdmissionReview request.uid must be a non-empty string (got undefined)',
    );
    assert.equal(describeViolation(ADMISSION_REVIEW_SCHEMA, '', [], { keyword: 'type', instancePath: '', params: {} }), 'AdmissionReview body must be a JSON object (got [])');
  });

  test('a bad annotation value is reported as the map, and a "/" in a key is unescaped from the pointer', () => {
    const pod = { metadata: { annotations: { 'shutdown-manager.io/drain-delay': 5 } } };
    assert.equal(
      describeViolation(POD_SCHEMA, 'request.object', pod, { keyword: 'type', instancePath: '/metadata/annotations/shutdown-manager.io~1drain-delay', params: {} }),
      'AdmissionReview request.object.metadata.annotations must be a map of strings (got {"shutdown-manager.io/drain-delay":5})',
    );
  });
});

describe('preview', () => {
  test('renders short values as JSON and cuts long or deep ones', () => {
    assert.deepEqual([preview('a'), preview(5), preview(null), preview(undefined), preview([]), preview({})], ['"a"', '5', 'null', 'undefined', '[]', '{}']);
    assert.equal(preview([1, 2, 3, 4, 5]), '[1,2,3,4,…]');
    assert.equal(preview({ a: { b: { c: 1 } } }), '{"a":{"b":{…}}}');
    const long = preview('x'.repeat(3 * 1024 * 1024));
    assert.equal(long.length, 60, `cut to 60 characters: ${long.length}`);
    assert.ok(long.endsWith('…'), 'marked as cut');
  });

  test('a value nested a million levels deep does not overflow the stack', () => {
    let deep: unknown = 1;
    for (let i = 0; i < 1_000_000; i += 1) deep = [deep];
    assert.equal(preview(deep), '[[[…]]]');
  });
});
