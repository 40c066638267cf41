/** processIo (src/cli/io.ts): a command's streams and environment are the process's own; stdin is looked up only when read. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { processIo } from '../../src/cli/io.js';

test("stdout, stderr and the environment are the process's own objects: what a command writes or sets is the process's", () => {
  const io = processIo();
  assert.equal(io.stdout, process.stdout, "the process's stdout");
  assert.equal(io.stderr, process.stderr, "the process's stderr");
  assert.equal(io.env, process.env, "the process's environment, not a copy");
});

test('stdin is looked up only when a command reads it, and then each time', (t) => {
  // process.stdin is Node's own lazy getter (creating it opens the descriptor): count its calls.
  const original = Object.getOwnPropertyDescriptor(process, 'stdin');
  assert.equal(typeof original?.get, 'function', "Node's process.stdin is a getter");
  let lookups = 0;
  Object.defineProperty(process, 'stdin', {
    ...original,
    get() {
      lookups += 1;
      return original?.get?.call(process);
    },
  });
  t.after(() => Object.defineProperty(process, 'stdin', original as PropertyDescriptor));

  const io = processIo();
  assert.equal(lookups, 0, 'making the streams does not touch stdin');
  assert.equal(io.stdin, original?.get?.call(process), "reading io.stdin gives the process's stdin");
  assert.equal(lookups, 1, 'read once, looked up once');
  void io.stdin;
  assert.equal(lookups, 2, 'looked up again at each read');
});
