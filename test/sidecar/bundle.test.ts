/**
 * What the sidecar loads, checked on the build (run `npm run build` first; `npm test` does). `npm run build`
 * makes three CommonJS bundles of it (tools/bundle.mjs): dist/sidecar.cjs (src/sidecar/command.ts and what it
 * imports statically: what the first /healthz needs), dist/sidecar-engine.cjs (src/sidecar/engine.ts: the drain,
 * which the first requires once the server listens) and dist/sidecar-metrics.cjs (prom-client's three classes,
 * required at the first scrape). They require Node built-ins and each other, nothing else: a dependency or a
 * project module left outside them would show here before it shows in every Envoy pod's memory. The image's
 * entry point (dist/entry.cjs) must hand the sidecar to the first, and every other mode to dist/main.js.
 */
import assert from 'node:assert/strict';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test, type TestContext } from 'node:test';
import { isBuiltin } from 'node:module';
import { fileURLToPath } from 'node:url';
import { httpRequest } from '../support/connections.js';
import { runBuiltEntry, runNode, startNode } from '../support/process.js';

const DIST = fileURLToPath(new URL('../../dist/', import.meta.url));
const BUILT_MAIN = join(DIST, 'main.js');
/** Each bundle, and the parts it may require (lazily: when the code that needs them first runs). */
const BUNDLES = {
  'sidecar.cjs': ['./sidecar-engine.cjs'],
  'sidecar-engine.cjs': ['./sidecar-metrics.cjs'],
  'sidecar-metrics.cjs': [],
} as const;
type Bundle = keyof typeof BUNDLES;

const code = (bundle: Bundle): Promise<string> => readFile(join(DIST, bundle), 'utf8');
/** The project's modules and packages esbuild put in a bundle (its metafile, dist/meta/), with what is left of each. */
function bundled(bundle: Bundle): Map<string, number> {
  const meta = JSON.parse(readFileSync(join(DIST, 'meta', `${bundle.replace(/\.cjs$/, '')}.json`), 'utf8')) as {
    outputs: Record<string, { inputs: Record<string, { bytesInOutput: number }> }>;
  };
  const output = meta.outputs[`dist/${bundle}`];
  assert.ok(output !== undefined, `dist/meta names dist/${bundle}`);
  return new Map(Object.entries(output.inputs).map(([path, { bytesInOutput }]) => [path, bytesInOutput]));
}

describe('the sidecar bundles', () => {
  test('require only Node built-ins and each other, and are CommonJS through and through', async () => {
    for (const [bundle, parts] of Object.entries(BUNDLES) as [Bundle, readonly string[]][]) {
      const text = await code(bundle);
      const required = [...text.matchAll(/\brequire\(\s*"([^"]+)"\s*\)/g)].map((match) => match[1] as string);
      assert.ok(required.length > 0, `no require found: is dist/${bundle} a bundle?`);
      // prom-client's files, bundled, require `util` by its bare name: a built-in all the same.
      for (const specifier of required) assert.ok(isBuiltin(specifier) || parts.includes(specifier), `dist/${bundle} requires ${specifier}, which is not a Node built-in`);
      // An import() would bring in Node's ES module loader, which the CommonJS bundles exist to avoid.
      assert.doesNotMatch(text, /\bimport\(/, `dist/${bundle} imports an ES module`);
      assert.doesNotMatch(text, /^\s*(import|export)\s/m, `ES module syntax left in dist/${bundle}`);
      // An ESM-style load of node:http reads all its exports, and on Node 24 that loads undici (12 MiB): see src/envoy/admin-client.ts.
      assert.ok(!required.includes('node:http'), `node:http is required by dist/${bundle}; use process.getBuiltinModule`);
      assert.ok(!required.includes('node:crypto'), `node:crypto is required by dist/${bundle}; it is loaded at the first token check`);
      // The next part only when it is first needed: as a promise's continuation, never at the top level.
      for (const part of parts) {
        const at = [...text.matchAll(new RegExp(`require\\("${part.replace('.', '\\.')}"\\)`, 'g'))].map((match) => text.slice(Math.max(0, (match.index ?? 0) - 60), match.index));
        assert.equal(at.length, 1, `dist/${bundle} requires ${part} once`);
        assert.match(at[0] as string, /Promise\.resolve\(\)\.then\(\(\) => __toESM\($/, `dist/${bundle} requires ${part} lazily`);
      }
    }
  });

  test('start with what the first /healthz needs: the drain, the admin client and prom-client are in the later parts', () => {
    const start = bundled('sidecar.cjs');
    for (const module of ['dist/sidecar/main.js', 'dist/sidecar/server.js', 'dist/sidecar/server/routes.js', 'dist/config/sidecar.js', 'dist/sidecar/journal.js']) {
      assert.ok((start.get(module) ?? 0) > 0, `${module} is in dist/sidecar.cjs`);
    }
    const engine = bundled('sidecar-engine.cjs');
    for (const module of ['dist/sidecar/engine.js', 'dist/sidecar/drain.js', 'dist/sidecar/supervisor.js', 'dist/sidecar/admin-probe.js', 'dist/envoy/admin-client.js', 'dist/envoy/stats.js', 'dist/envoy/process/identity.js', 'dist/envoy/process/witness.js', 'dist/sidecar/drain-process.js']) {
      assert.equal(start.get(module) ?? 0, 0, `${module} is not in dist/sidecar.cjs`);
      assert.ok((engine.get(module) ?? 0) > 0, `${module} is in dist/sidecar-engine.cjs`);
    }
    for (const bundle of ['sidecar.cjs', 'sidecar-engine.cjs'] as const) {
      const inputs = [...bundled(bundle).keys()];
      assert.deepEqual(inputs.filter((path) => path.includes('prom-client') || path === 'dist/sidecar/metrics.js'), [], `nothing of the metrics in dist/${bundle}`);
    }
  });

  test("holds prom-client's three classes (not its index) in dist/sidecar-metrics.cjs, so that the image needs no node_modules", async () => {
    const text = await code('sidecar-metrics.cjs');
    const files = new Set([...text.matchAll(/^\/\/ node_modules\/prom-client\/([\w./-]+)$/gm)].map((match) => match[1]));
    for (const file of ['lib/registry.js', 'lib/gauge.js', 'lib/counter.js']) assert.ok(files.has(file), `${file} is in the bundle`);
    assert.ok(!files.has('index.js'), 'the index loads cluster, push gateway and default metrics: 10-16 MiB');
    assert.doesNotMatch(text, /require\("prom-client/, 'nothing of prom-client is left to node_modules');
  });

  /** dist/entry.cjs and dist/sidecar.cjs in a directory of their own, with `engine` as its sidecar-engine.cjs if given. */
  function startBundleAlone(t: TestContext, engine?: string): string {
    const directory = mkdtempSync(join(tmpdir(), 'esm-start-only-'));
    t.after(() => rmSync(directory, { recursive: true, force: true }));
    for (const file of ['entry.cjs', 'sidecar.cjs']) copyFileSync(join(DIST, file), join(directory, file));
    if (engine !== undefined) writeFileSync(join(directory, 'sidecar-engine.cjs'), engine);
    return join(directory, 'entry.cjs');
  }
  const SIDECAR_ARGS = ['mode=sidecar', '--serve-address=127.0.0.1', '--serve-port=0', '--admin-port=1', '--state-dir='];

  test('answers /healthz without its drain loaded; what needs the drain waits for it', async (t) => {
    // An engine that never finishes loading: whatever the timing, /healthz is answered before it, and /ready is not.
    const entry = startBundleAlone(t, 'exports.startEngine = () => new Promise(() => {});\n');
    const sidecar = await startNode([entry, ...SIDECAR_ARGS], { ready: (line) => line['event'] === 'listening' });
    t.after(() => sidecar.kill());
    const url = (path: string): string => `http://127.0.0.1:${String(sidecar.ready['port'])}${path}`;
    assert.equal((await httpRequest(url('/healthz'), { timeoutMs: 5_000 })).status, 200);
    await assert.rejects(httpRequest(url('/ready'), { timeoutMs: 500 }), 'held until the drain is loaded');
    assert.equal((await httpRequest(url('/healthz'), { timeoutMs: 5_000 })).status, 200);
  });

  test('says so and exits 1 when its drain cannot be loaded', async (t) => {
    const sidecar = await startNode([startBundleAlone(t), ...SIDECAR_ARGS], { ready: (line) => line['event'] === 'listening' });
    t.after(() => sidecar.kill());
    const failed = await sidecar.waitForLog((line) => line['event'] === 'engine_failed', 10_000);
    assert.equal(failed['level'], 'error');
    assert.match(String(failed['error']), /sidecar-engine\.cjs/);
    assert.deepEqual(await sidecar.exited, { code: 1, signal: null });
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
