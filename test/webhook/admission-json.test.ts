/** The review's JSON written around the patch is exactly what JSON.stringify writes, whatever the strings hold. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { admissionReviewJson, ADMISSION_VERSIONS, encodeAdmissionReview, type AdmissionResponse } from '../../src/webhook/admission.js';

// Strings that look like the key the patch is put after, escaped or not.
const tricky = fc.oneof(fc.string(), fc.constantFrom('"patch":""', '\\"patch\\":\\"\\"', '"patch":"', 'patch', '"', '\\', '\u2028'));
const base64 = fc.base64String({ maxLength: 400 });

test('admissionReviewJson writes what JSON.stringify writes, with and without a patch', () => {
  fc.assert(
    fc.property(
      fc.constantFrom(...ADMISSION_VERSIONS),
      fc.record(
        {
          uid: tricky,
          allowed: fc.boolean(),
          patchType: fc.constant('JSONPatch' as const),
          patch: base64,
          warnings: fc.array(tricky, { maxLength: 3 }),
          status: fc.record({ code: fc.integer(), reason: tricky, message: tricky }),
        },
        { requiredKeys: ['uid', 'allowed'] },
      ),
      (apiVersion, response: AdmissionResponse) => {
        assert.equal(admissionReviewJson(apiVersion, response), JSON.stringify(encodeAdmissionReview(apiVersion, response)));
      },
    ),
    { numRuns: 1000 },
  );
});
