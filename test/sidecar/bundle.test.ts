/**
 * What the sidecar loads at start, checked on the build (run `npm run build` first; `npm test` does): the
 * CommonJS bundle that `npm run build` makes of src/sidecar/command.ts (dist/sidecar.cjs) requires Node
 * built-ins and nothing else, prom-client's three classes inside it and evaluated only once /metrics is asked
 * for. A dependency or a project module
 * left outside the bundle would show here before it shows in every Envoy pod's memory. The image's entry
 * point (dist/entry.cjs) must hand the sidecar to that bundle, and every other mode to dist/main.js.
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { describe, test } from 'node:test';
import { isBuiltin } from 'node:module';
import { fileURLToPath } from 'node:url';
import { runBuiltEntry, runNode } from '../support/process.js';

const BUNDLE = fileURLToPath(new URL('../../dist/sidecar.cjs', import.meta.url));
const BUILT_MAIN = fileURLToPath(new URL('../../dist/main.js', import.meta.url));

describe('the sidecar bundle', () => {
  test('requires only Node built-ins, and is CommonJS through and through', async () => {
    const code = await readFile(BUNDLE, 'utf8');
    const required = [...code.matchAll(/\brequire\(\s*"([^"]+)"\s*\)/g)].map((match) => match[1] as string);
    assert.ok(required.length > 0, 'no require found: is dist/sidecar.cjs the bundle?');
    // prom-client's files, bundled, require `util` by its bare name: a built-in all the same.
    for (const specifier of required) assert.ok(isBuiltin(specifier), `the sidecar requires ${specifier}, which is not a Node built-in`);
    // An import() would bring in Node's ES module loader, which the CommonJS bundle exists to avoid.
    assert.doesNotMatch(code, /\bimport\(/, 'the bundle imports an ES module');
    assert.doesNotMatch(code, /^\s*(import|export)\s/m, 'ES module syntax left in the bundle');
    // An ESM-style load of node:http reads all its exports, and on Node 24 that loads undici (12 MiB): see src/envoy/admin-client.ts.
    assert.ok(!required.includes('node:http'), 'node:http is required at start; use process.getBuiltinModule');
    assert.ok(!required.includes('node:crypto'), 'node:crypto is required at start; it is loaded at the first token check');
  });

  test("holds prom-client's three classes (not its index), so that the image needs no node_modules", async () => {
    const code = await readFile(BUNDLE, 'utf8');
    const bundled = new Set([...code.matchAll(/^\/\/ node_modules\/prom-client\/([\w./-]+)$/gm)].map((match) => match[1]));
    for (const file of ['lib/registry.js', 'lib/gauge.js', 'lib/counter.js']) assert.ok(bundled.has(file), `${file} is in the bundle`);
    assert.ok(!bundled.has('index.js'), 'the index loads cluster, push gateway and default metrics: 10-16 MiB');
    assert.doesNotMatch(code, /require\("prom-client/, 'nothing of prom-client is left to node_modules');
    // Loaded at the first scrape only: metrics.ts is imported lazily, which esbuild keeps lazy in the bundle.
    assert.match(code, /Promise\.resolve\(\)\.then\(\(\) => \(init_metrics\(\), metrics_exports\)\)/);
  });
});

describe("the image's entry point", () => {
  const SIDECAR_USAGE = /^Usage: envoy-shutdown-manager mode=sidecar/;
  const WEBHOOK_USAGE = /^Usage: envoy-shutdown-manager \[mode=webhook\]/;
  const OVERVIEW = /^Usage: envoy-shutdown-manager \[mode=webhook\|mode=sidecar\] \[flags\]\n {7}envoy-shutdown-manager inject\|uninject\|check/;
  const VERSION = /^envoy-shutdown-manager \d+\.\d+\.\d+\n$/;

  // entry.cts restates main.ts's rule for reading the mode: both are held to the same answers here.
  test('runs the sidecar for mode=sidecar wherever it stands, and the webhook otherwise, as dist/main.js does', async () => {
    for (const [args, code, stdout] of [
      [['mode=sidecar', '--help'], 0, SIDECAR_USAGE],
      [['--help', 'mode=sidecar'], 0, SIDECAR_USAGE],
      // --help alone lists the modes and the commands; with a mode, it is that mode's.
      [['--help'], 0, OVERVIEW],
      [['-h'], 0, OVERVIEW],
      [['mode=webhook', '--help'], 0, WEBHOOK_USAGE],
      // --version in every mode, the sidecar's too (which main.js answers: the version is not in the sidecar's bundle).
      [['--version'], 0, VERSION],
      [['mode=webhook', '--version'], 0, VERSION],
      [['mode=sidecar', '--version'], 0, VERSION],
      [['--check-delay=1s', '--version', 'mode=sidecar'], 0, VERSION],
      // The first mode= is the mode; a second one is an argument the webhook does not know.
      [['mode=webhook', 'mode=sidecar', '--help'], 2, /^$/],
    ] as const) {
      const run = await runBuiltEntry(args);
      assert.equal(run.code, code, `${args.join(' ')}: ${run.stderr}`);
      assert.match(run.stdout, stdout, args.join(' '));
      const viaMain = await runNode([BUILT_MAIN, ...args]);
      assert.deepEqual([viaMain.code, viaMain.stdout, viaMain.stderr], [run.code, run.stdout, run.stderr], args.join(' '));
    }
  });

  test('reports a bad sidecar flag as dist/main.js does: the message alone, exit 2', async () => {
    const viaEntry = await runBuiltEntry(['mode=sidecar', '--check-delay=soon']);
    const viaMain = await runNode([BUILT_MAIN, 'mode=sidecar', '--check-delay=soon']);
    assert.equal(viaEntry.code, 2);
    assert.match(viaEntry.stderr, /^envoy-shutdown-manager: flag --check-delay: "soon" is not valid/);
    assert.doesNotMatch(viaEntry.stderr, /\n\s+at /, 'no stack trace');
    assert.deepEqual([viaMain.code, viaMain.stderr], [viaEntry.code, viaEntry.stderr]);
  });

  test('leaves the commands (even with a mode= argument after them) and an unknown mode to dist/main.js', async () => {
    for (const command of ['inject', 'uninject', 'check']) {
      const help = await runBuiltEntry([command, '--help']);
      assert.equal(help.code, 0, `${command}: ${help.stderr}`);
      assert.match(help.stdout, new RegExp(`^Usage: envoy-shutdown-manager ${command}`), command);
      // A mode= after the command is the command's argument (refused by it), never the sidecar's mode.
      const run = await runBuiltEntry([command, 'mode=sidecar']);
      const viaMain = await runNode([BUILT_MAIN, command, 'mode=sidecar']);
      assert.match(run.stderr, new RegExp(`^envoy-shutdown-manager ${command}: .*mode=sidecar`), command);
      assert.deepEqual([viaMain.code, viaMain.stderr], [run.code, run.stderr], command);
    }
    // A mistyped command is main.js's too, even with a mode= after it, and said as one.
    for (const args of [['injct'], ['injct', 'mode=sidecar']]) {
      const run = await runBuiltEntry(args);
      const viaMain = await runNode([BUILT_MAIN, ...args]);
      assert.equal(run.code, 2, args.join(' '));
      assert.match(run.stderr, /^envoy-shutdown-manager: unknown command "injct"; did you mean "inject"\?/, args.join(' '));
      assert.deepEqual([viaMain.code, viaMain.stdout, viaMain.stderr], [run.code, run.stdout, run.stderr], args.join(' '));
    }
    const unknown = await runBuiltEntry(['mode=nope']);
    assert.equal(unknown.code, 2);
    assert.match(unknown.stderr, /unknown mode=nope; expected mode=webhook \(the default\) or mode=sidecar/);
  });
});
