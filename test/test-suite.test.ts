/**
 * The test suite's own rule: every `assert.ok(value)` and `assert(value)` carries a message. Without one, a failing
 * call makes Node's assert build its message from the caller's source: it reads the .ts file at the position of the
 * transpiled code (tsx), and acorn, failing on TypeScript, retries at every column before it. On a 300-line test file
 * that took over ten minutes at 40 % of a core, and a CI run waited on it (test/sidecar/server-connections.test.ts,
 * a probe over its bound on a loaded machine).
 *
 * And a message says what was expected, in words: one that repeats the asserted expression's source (as a script
 * once wrote them, cut to 100 characters with `...`) tells the reader of a failure nothing the line number did not.
 *
 * And a test asserts something that could fail: every test calls an assertion (`assert…`, `t.assert…`, or a
 * helper named `assert…` or `expect…`), and a loop that asserts over a regexp's matches first asserts how many it
 * found (a `for … of text.matchAll(…)` whose body asserts passes when the pattern finds nothing).
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { basename, dirname, join, relative } from 'node:path';
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

/** Source text with its whitespace collapsed and every quote written `'`, for comparing a message with code. */
function normalized(text: string): string {
  return text.replace(/\s+/g, ' ').replace(/["`]/g, "'").trim();
}

/**
 * `file:line` of every `assert.ok` or `assert` call whose message (a plain string) is the asserted expression's own
 * source text, or a start of it cut with `...` or `…`.
 */
export function messagesRepeatingTheAssertion(fileName: string, source: string): string[] {
  const file = ts.createSourceFile(fileName, source, ts.ScriptTarget.Latest, true);
  const found: string[] = [];
  const visit = (node: ts.Node): void => {
    if (ts.isCallExpression(node) && node.arguments.length >= 2 && ['assert', 'assert.ok'].includes(node.expression.getText(file))) {
      const [value, message] = node.arguments as unknown as [ts.Expression, ts.Expression];
      if (ts.isStringLiteral(message) || ts.isNoSubstitutionTemplateLiteral(message)) {
        const expression = normalized(value.getText(file));
        const text = normalized(message.text);
        const cut = text.replace(/(\.\.\.|…)$/, '').trimEnd();
        if (text === expression || (cut !== text && cut !== '' && expression.startsWith(cut))) {
          found.push(`${fileName}:${file.getLineAndCharacterOfPosition(node.getStart(file)).line + 1}`);
        }
      }
    }
    ts.forEachChild(node, visit);
  };
  visit(file);
  return found;
}

/** Whether `callee` (a call's callee as written) is an assertion: `assert`, `assert.x`, `t.assert.x`, `assertX`, `expectX`. */
function isAssertion(callee: string): boolean {
  return /^(t\.)?assert\b/.test(callee) || /(^|\.)(assert|expect)\w*$/.test(callee);
}

function callsAnAssertion(node: ts.Node, file: ts.SourceFile): boolean {
  if (ts.isCallExpression(node) && isAssertion(node.expression.getText(file))) return true;
  return ts.forEachChild(node, (child) => callsAnAssertion(child, file) || undefined) ?? false;
}

function enclosingScope(node: ts.Node): ts.Node {
  let scope = node.parent;
  while (!ts.isSourceFile(scope) && !ts.isFunctionLike(scope)) scope = scope.parent;
  return scope;
}

/**
 * `file:line` of every `for … of` loop whose body asserts and that goes over a regexp's matches without asserting
 * how many: either over `x.matchAll(…)` itself, or over a variable initialized from one (in the same function)
 * when no assertion of that function names the variable whole or its `.length`.
 */
export function matchLoopsWithoutCount(fileName: string, source: string): string[] {
  const file = ts.createSourceFile(fileName, source, ts.ScriptTarget.Latest, true);
  const isMatchAll = (node: ts.Node): boolean => ts.isCallExpression(node) && ts.isPropertyAccessExpression(node.expression) && node.expression.name.text === 'matchAll';
  const containsMatchAll = (node: ts.Node): boolean => isMatchAll(node) || (ts.forEachChild(node, (child) => containsMatchAll(child) || undefined) ?? false);
  const found: string[] = [];
  const visit = (node: ts.Node): void => {
    if (ts.isForOfStatement(node) && callsAnAssertion(node.statement, file)) {
      const iterated = node.expression;
      let uncounted = isMatchAll(iterated);
      if (ts.isIdentifier(iterated)) {
        const name = iterated.text;
        const scope = enclosingScope(node);
        let fromMatches = false;
        let counted = false;
        const scan = (inner: ts.Node): void => {
          if (ts.isVariableDeclaration(inner) && ts.isIdentifier(inner.name) && inner.name.text === name && inner.initializer && containsMatchAll(inner.initializer)) fromMatches = true;
          if (ts.isCallExpression(inner) && isAssertion(inner.expression.getText(file)) && inner.arguments.some((argument) => argument.getText(file) === name || argument.getText(file).includes(`${name}.length`))) counted = true;
          ts.forEachChild(inner, scan);
        };
        scan(scope);
        uncounted = fromMatches && !counted;
      }
      if (uncounted) found.push(`${fileName}:${file.getLineAndCharacterOfPosition(node.getStart(file)).line + 1}`);
    }
    ts.forEachChild(node, visit);
  };
  visit(file);
  return found;
}

/** `file:line` of every `test(…)` or `it(…)` whose callback calls no assertion (see isAssertion). */
export function testsAssertingNothing(fileName: string, source: string): string[] {
  const file = ts.createSourceFile(fileName, source, ts.ScriptTarget.Latest, true);
  const found: string[] = [];
  const visit = (node: ts.Node): void => {
    if (ts.isCallExpression(node) && /^(test|it)(\.only|\.skip)?$/.test(node.expression.getText(file))) {
      const callback = node.arguments.find((argument) => ts.isArrowFunction(argument) || ts.isFunctionExpression(argument));
      if (callback && !callsAnAssertion(callback, file)) found.push(`${fileName}:${file.getLineAndCharacterOfPosition(node.getStart(file)).line + 1}`);
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

/** `[path from the repository's root, source]` of every TypeScript file of test/ and bench/ (fixtures aside). */
function suiteFiles(): [string, string][] {
  return ['test', 'bench'].flatMap((directory) => typeScriptFiles(join(REPO_ROOT, directory)).map((path): [string, string] => [relative(REPO_ROOT, path), readFileSync(path, 'utf8')]));
}

/**
 * The src modules with no test file named after them (test/<path>.test.ts, or test/<dir>/<name>*.test.ts), each
 * with why: "covered by" names a test file that imports the module; "exercised through" is a judgement from the
 * module's callers, not a measurement. The list may only shrink: a new module comes with its test file.
 */
const WITHOUT_OWN_TEST: ReadonlyArray<readonly [string, string]> = [
  ['src/certs-main.ts', 'entry point of npm run certs: run by test/cli/certs.test.ts'],
  ['src/certs/material.ts', 'covered by test/certs/self-managed.test.ts'],
  ['src/certs/mounted.ts', 'covered by test/errors.test.ts'],
  ['src/certs/names.ts', 'covered by test/cli/certs.test.ts'],
  ['src/certs/reconcile.ts', 'covered by test/errors.test.ts'],
  ['src/certs/source.ts', 'no test of its own yet: exercised through test/webhook/tls-rotation.test.ts'],
  ['src/certs/tls-source.ts', 'types only (the TLS source interface)'],
  ['src/check/certificate.ts', 'covered by test/check/core.test.ts'],
  ['src/check/cluster.ts', 'covered by test/check/core.test.ts'],
  ['src/check/expectations.ts', 'covered by test/check/core.test.ts'],
  ['src/check/finding.ts', "types only (a check's finding)"],
  ['src/check/index.ts', 're-exports for the CLI: exercised through test/cli/check*.test.ts'],
  ['src/check/pod-state.ts', 'covered by test/check/core.test.ts'],
  ['src/check/pods.ts', 'covered by test/check/core.test.ts'],
  ['src/check/prometheus.ts', 'covered by test/check/drains.test.ts'],
  ['src/check/read.ts', 'no test of its own yet: exercised through test/cli/check*.test.ts'],
  ['src/check/render.ts', 'covered by test/check/core.test.ts'],
  ['src/check/report.ts', 'covered by test/cli/check-scope.test.ts'],
  ['src/check/webhook.ts', 'no test of its own yet: exercised through test/cli/check.test.ts'],
  ['src/cli/input.ts', 'covered by test/cli/inject-url.test.ts'],
  ['src/cli/manifests.ts', 'covered by test/errors.test.ts'],
  ['src/cli/opt-in-manifests.ts', 'no test of its own yet: exercised through test/cli/opt-in.test.ts'],
  ['src/clock.ts', 'covered by test/envoy/admin-client-answers.test.ts'],
  ['src/config/annotation-names.ts', 'covered by test/inject/sidecar.test.ts'],
  ['src/config/annotations.ts', 'covered by test/config/config.test.ts'],
  ['src/config/drain.ts', 'covered by test/config/config.test.ts'],
  ['src/config/duration.ts', 'covered by test/config/config.test.ts'],
  ['src/config/endpoints.ts', 'covered by test/cli/check-prometheus.test.ts'],
  ['src/config/errors.ts', 'covered by test/config/resources.test.ts'],
  ['src/config/quantity.ts', 'covered by test/config/resources.test.ts'],
  ['src/config/reference.ts', 'generates docs/reference (tools/docs.ts): checked by test/docs/reference.test.ts'],
  ['src/config/settings.ts', 'covered by test/manifests/self-signed.test.ts'],
  ['src/config/sidecar.ts', 'covered by test/config/config.test.ts'],
  ['src/config/values.ts', 'covered by test/config/admin-address.test.ts'],
  ['src/config/webhook.ts', 'covered by test/config/resources.test.ts'],
  ['src/emulator/admin.ts', 'no test of its own yet: part of the Envoy emulator, exercised through test/emulator/'],
  ['src/emulator/cli.ts', 'covered by test/emulator/drain.test.ts'],
  ['src/emulator/contour-admin-listener.ts', 'no test of its own yet: part of the Envoy emulator, exercised through test/emulator/'],
  ['src/emulator/core.ts', 'no test of its own yet: part of the Envoy emulator, exercised through test/emulator/'],
  ['src/emulator/drain-manager.ts', 'no test of its own yet: part of the Envoy emulator, exercised through test/emulator/'],
  ['src/emulator/health-check-filter.ts', 'no test of its own yet: part of the Envoy emulator, exercised through test/emulator/'],
  ['src/emulator/hot-restart-child.ts', 'no test of its own yet: exercised through test/emulator/drain.test.ts'],
  ['src/emulator/http-listener.ts', 'no test of its own yet: part of the Envoy emulator, exercised through test/emulator/'],
  ['src/emulator/http1.ts', 'no test of its own yet: part of the Envoy emulator, exercised through test/emulator/'],
  ['src/emulator/http2.ts', 'no test of its own yet: part of the Envoy emulator, exercised through test/emulator/'],
  ['src/emulator/router.ts', 'no test of its own yet: part of the Envoy emulator, exercised through test/emulator/'],
  ['src/emulator/stats.ts', 'no test of its own yet: part of the Envoy emulator, exercised through test/emulator/'],
  ['src/emulator/tcp-proxy.ts', 'no test of its own yet: part of the Envoy emulator, exercised through test/emulator/'],
  ['src/emulator/types.ts', "types only (the emulator's shapes)"],
  ['src/emulator/upgrades.ts', 'no test of its own yet: part of the Envoy emulator, exercised through test/emulator/'],
  ['src/emulator/versions.ts', 'covered by test/sidecar/load-balancer-process.test.ts'],
  ['src/entry.cts', "the bundle's entry: test/sidecar/bundle.test.ts"],
  ['src/inject/admin-endpoint.ts', 'covered by test/inject/admin-discovery.test.ts'],
  ['src/inject/patch.ts', 'covered by test/inject/injector.property.test.ts'],
  ['src/inject/uninjector.ts', 'covered by test/inject/status.test.ts'],
  ['src/json.ts', 'covered by test/envoy/stats.test.ts'],
  ['src/kube/client.ts', 'covered by test/webhook/process.test.ts'],
  ['src/kube/errors.ts', 'covered by test/errors.test.ts'],
  ['src/kube/store.ts', 'no test of its own yet: exercised through test/certs/self-managed.test.ts'],
  ['src/main.ts', 'the CLI entry point: run by the test/cli/ process tests'],
  ['src/sidecar/command.ts', "the sidecar's command line: run by the test/sidecar/*-process tests"],
  ['src/sidecar/lag-buckets.ts', 'covered by test/cli/check-prometheus.test.ts'],
  ['src/sidecar/main.ts', "the sidecar's start: run by the test/sidecar/*-process tests"],
  ['src/sidecar/prom-client-parts.d.ts', 'type declarations only'],
  ['src/sidecar/server/connection-limits.ts', 'covered by test/sidecar/server-bounds.test.ts'],
  ['src/sidecar/server/deadlines.ts', 'covered by test/sidecar/deadlines.test.ts'],
  ['src/sidecar/server/render-cache.ts', 'covered by test/sidecar/render-cache.test.ts'],
  ['src/sidecar/server/routes.ts', 'covered by test/sidecar/server-bounds.test.ts'],
  ['src/sidecar/server/shutdown-token.ts', 'covered by test/sidecar/shutdown-token.test.ts'],
  ['src/webhook/main.ts', "the webhook's start: run by test/webhook/process.test.ts"],
  ['src/webhook/server.ts', 'covered by test/webhook/slowloris.test.ts'],
];

/** Whether test/ has a file named after the module at `path` (relative to src/, with its extension). */
function hasOwnTest(path: string): boolean {
  const base = path.replace(/\.d\.ts$|\.c?ts$/, '');
  const [directory, name] = [dirname(base), basename(base)];
  if (existsSync(join(REPO_ROOT, 'test', `${base}.test.ts`))) return true;
  const testDirectory = join(REPO_ROOT, 'test', directory);
  return existsSync(testDirectory) && readdirSync(testDirectory).some((file) => file.startsWith(name) && file.endsWith('.test.ts'));
}

function sourceModules(directory: string): string[] {
  return readdirSync(directory, { withFileTypes: true }).flatMap((entry) => {
    const path = join(directory, entry.name);
    if (entry.isDirectory()) return sourceModules(path);
    return /\.c?ts$/.test(entry.name) ? [path] : [];
  });
}

describe('the test suite', () => {
  test('every assert.ok and assert call has a message', () => {
    const missing = suiteFiles().flatMap(([path, source]) => assertionsWithoutMessage(path, source));
    assert.deepEqual(missing, [], 'add a message saying what was expected');
  });

  test("no assert.ok or assert message merely repeats the asserted expression's source", () => {
    const repeating = suiteFiles().flatMap(([path, source]) => messagesRepeatingTheAssertion(path, source));
    assert.deepEqual(repeating, [], 'say what was expected in words (the line number already points at the code)');
  });

  test('no loop asserts over the matches of a regexp without asserting how many it found', () => {
    const loops = suiteFiles().flatMap(([path, source]) => matchLoopsWithoutCount(path, source));
    assert.deepEqual(loops, [], 'collect the matches, assert their number (at least one), then loop');
  });

  test('every test calls an assertion', () => {
    const empty = suiteFiles().flatMap(([path, source]) => testsAssertingNothing(path, source));
    assert.deepEqual(empty, [], 'a test that asserts nothing passes whatever the code does');
  });

  test('the src modules without a test file named after them are the listed ones, each with a reason', () => {
    const without = sourceModules(join(REPO_ROOT, 'src'))
      .map((path) => relative(REPO_ROOT, path))
      .filter((path) => !hasOwnTest(relative('src', path)))
      .sort();
    const listed = WITHOUT_OWN_TEST.map(([path]) => path);
    assert.deepEqual(without, [...listed].sort(), 'a new module comes with its test file; a module that got one leaves the list');
    assert.ok(WITHOUT_OWN_TEST.every(([, reason]) => reason.trim() !== ''), 'every entry says why');
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

  test('control: a message that repeats the expression, whole or cut with ..., is found; one in words is not', () => {
    const source = [
      "assert.ok(a < b, 'a < b');",
      'assert(x.includes("y"), \'x.includes("y")\');',
      "assert.ok(list.every((item) => item.ok), 'list.every((item) => ...');",
      "assert.ok(a < b, `answered at once: ${a} ms`);",
      "assert.ok(a < b, 'answered at once');",
      "assert.ok(a, 'a');",
      "assert.equal(a, b, 'a');",
    ].join('\n');
    assert.deepEqual(messagesRepeatingTheAssertion('sample.ts', source), ['sample.ts:1', 'sample.ts:2', 'sample.ts:3', 'sample.ts:6']);
  });

  test('control: loops over matches are found unless counted; a loop that asserts nothing is left alone', () => {
    const source = [
      'for (const m of text.matchAll(/a/g)) assert.ok(m, "each");',
      'function counted() { const found = [...text.matchAll(/a/g)]; assert.ok(found.length > 0, "one"); for (const m of found) assert.ok(m, "each"); }',
      'function uncounted() { const found = [...text.matchAll(/a/g)]; for (const m of found) assert.ok(m, "each"); }',
      'for (const m of text.matchAll(/a/g)) names.push(m[0]);',
      'for (const item of list) assert.ok(item, "each");',
    ].join('\n');
    assert.deepEqual(matchLoopsWithoutCount('sample.ts', source), ['sample.ts:1', 'sample.ts:3']);
  });

  test('control: a test with no assertion is found; t.assert, assert.x and helpers named assert… or expect… count', () => {
    const source = [
      "test('nothing', () => { run(); });",
      "test('plain', () => { assert.equal(1, 1); });",
      "it('context', (t) => { t.assert.ok(true, 'yes'); });",
      "test('helper', async () => { await expectRefused(); assertDrained(x); });",
      "it.skip('skipped, still empty', async () => { await run(); });",
    ].join('\n');
    assert.deepEqual(testsAssertingNothing('sample.ts', source), ['sample.ts:1', 'sample.ts:5']);
  });
});
