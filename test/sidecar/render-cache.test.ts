/**
 * The render cache of the sidecar's port (src/sidecar/server/render-cache.ts): /drain's JSON in parts, its large
 * parts rendered once per object and shared, and a rendering shared by the calls of one turn of the event loop.
 * What it spares under a flood is shown through the built sidecar in server-listeners.test.ts.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { JsonParts, sharedPerTurn } from '../../src/sidecar/server/render-cache.js';

/** Envoy's open connections by listener, as many listeners as `count`. */
const listenerNames = (count: number): Record<string, number> => Object.fromEntries(Array.from({ length: count }, (_, index) => [`0.0.0.0_${20_000 + index}`, 1]));

describe("drain server: /drain's JSON in parts", () => {
  /** A listener map or list large enough to be a shared part. */
  const largeLeaf = fc.oneof(
    fc.dictionary(fc.string(), fc.integer(), { minKeys: 40, maxKeys: 80 }),
    fc.array(fc.oneof(fc.string(), fc.double(), fc.constant(null), fc.constant(undefined)), { minLength: 40, maxLength: 80 }),
  );
  const value = fc.letrec((tie) => ({
    node: fc.oneof(
      { depthSize: 'small' },
      fc.jsonValue({ maxDepth: 2 }),
      fc.constantFrom(undefined, () => 1, Number.NaN, Infinity),
      largeLeaf,
      fc.array(tie('node'), { maxLength: 5 }),
      fc.dictionary(fc.string(), tie('node'), { maxKeys: 40 }),
      tie('node').map((inner) => ({ toJSON: () => inner })),
      fc.date({ noInvalidDate: true }),
    ),
  })).node;
  const joined = (chunks: readonly (string | Buffer)[]): string => Buffer.concat(chunks.map((chunk) => (typeof chunk === 'string' ? Buffer.from(chunk) : chunk))).toString();

  test('the chunks are JSON.stringify(value, null, 2), rendered again or from their parts', () => {
    const parts = new JsonParts();
    fc.assert(
      fc.property(value, (input) => {
        const expected = JSON.stringify(input, null, 2) as string | undefined;
        assert.equal(joined(parts.render(input)), expected ?? '');
        assert.equal(joined(parts.render(input)), expected ?? '', 'the second time, from the parts kept');
      }),
      { numRuns: 300 },
    );
  });

  test("a large list is rendered once per object, and its Buffer shared; an object of a few dozen fields is not one", () => {
    const parts = new JsonParts();
    const byListener = listenerNames(3_000);
    const snapshot = (elapsedMs: number): object => ({ ...Object.fromEntries(Array.from({ length: 40 }, (_, index) => [`field${index}`, index])), elapsedMs, openConnectionsByListener: byListener });
    const first = parts.render(snapshot(1));
    const second = parts.render(snapshot(2));
    const buffers = (chunks: readonly (string | Buffer)[]): Buffer[] => chunks.filter((chunk): chunk is Buffer => Buffer.isBuffer(chunk));
    assert.equal(buffers(first).length, 1);
    assert.equal(buffers(second)[0], buffers(first)[0], 'the same Buffer');
    assert.match(joined(second), /"elapsedMs": 2/);
    assert.notEqual(buffers(parts.render(snapshot(3)))[0], undefined);
  });

  test('sharedPerTurn: one rendering for the calls of one turn of the event loop, a new one in the next', async () => {
    let renders = 0;
    const shared = sharedPerTurn(() => ++renders);
    assert.deepEqual([shared(), shared(), shared()], [1, 1, 1]);
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(shared(), 2);
  });
});
