/**
 * The test suite's own rule: every `assert.ok(value)` and `assert(value)` carries a message. Without one, a failing
 * call makes Node's assert build its message from the caller's source: it reads the .ts file at the position of the
 * transpiled code (tsx), and acorn, failing on TypeScript, retries at every column before it. On a 300-line test file
 * that took over ten minutes at 40 % of a core, and a CI run waited on it (test/sidecar/server-connections.test.ts,
 * a probe over its bound on a loaded machine).
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, test } from 'node:test';
import ts from 'typescript';
import { REPO_ROOT } from './support/process.js';

/** `file:line` of every call of `assert.ok` or `assert` with a single argument in `source`. */
export function assertionsWithoutMessage(fileName: string, source: string): string[] {
  const file = ts.createSourceFile(fileName, source, ts.ScriptTarget.Latest, true);
  const found: string[] = [];
  const visit = (node: ts.Node): void => {
    if (ts.isCallExpression(node) && node.arguments.length === 1 && ['assert', 'assert.ok'].includes(node.expression.getText(file))) {
      found.push(`${fileName}:${file.getLineAndCharacterOfPosition(node.getStart(file)).line + 1}`);
    }
    ts.forEachChild(node, visit);
  };
  visit(file);
  return found;
}

function typeScriptFiles(directory: string): string[] {
  return readdirSync(directory, { withFileTypes: true }).flatMap((entry) => {
    const path = join(directory, entry.name);
    if (entry.isDirectory()) return entry.name === 'fixtures' ? [] : typeScriptFiles(path);
    return entry.name.endsWith('.ts') ? [path] : [];
  });
}

describe('the test suite', () => {
  test('every assert.ok and assert call has a message', () => {
    const missing = ['test', 'bench'].flatMap((directory) =>
      typeScriptFiles(join(REPO_ROOT, directory)).flatMap((path) => assertionsWithoutMessage(relative(REPO_ROOT, path), readFileSync(path, 'utf8'))),
    );
    assert.deepEqual(missing, [], 'add a message saying what was expected');
  });

  test("npm test's file list (test/support/test-files.mjs) has every test file once, and no two that run alone in a row", () => {
    const listed = execFileSync(process.execPath, [join(REPO_ROOT, 'test/support/test-files.mjs')], { encoding: 'utf8' }).trim().split('\n');
    const all = typeScriptFiles(join(REPO_ROOT, 'test')).filter((path) => path.endsWith('.test.ts')).map((path) => relative(REPO_ROOT, path));
    assert.deepEqual([...listed].sort(), all.sort(), 'every test file, once');
    const alone = listed.map((file) => /^runsAlone\(\);$/m.test(readFileSync(join(REPO_ROOT, file), 'utf8')));
    assert.ok(alone.filter(Boolean).length >= 10, 'the files that load the machine run alone');
    assert.ok(!alone.some((isAlone, index) => isAlone && alone[index + 1] === true), 'two files that run alone next to each other');
  });

  test('control: the scan finds both forms, and leaves calls with a message alone', () => {
    const source = "assert.ok(a > 1);\nassert(b);\nassert.ok(c, 'c');\nassert.equal(d, 1);\n";
    assert.deepEqual(assertionsWithoutMessage('sample.ts', source), ['sample.ts:1', 'sample.ts:2']);
  });
});
