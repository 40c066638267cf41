/**
 * How the modules of src/ import each other, read with the TypeScript compiler's parser (no build needed):
 *
 * - no import circle, type imports included. A circle through types alone costs nothing at run time, but it
 *   says two modules are one: the shared types then belong to a module both can import (src/check/finding.ts,
 *   the interfaces in src/emulator/drain-manager.ts and upgrades.ts);
 * - the modules the sidecar loads (what src/sidecar/command.ts, the start bundle's entry, and
 *   src/sidecar/engine.ts, the drain's, reach by static imports) are all under eslint.config.mjs's rule against
 *   importing node:http and node:crypto there, and the version and image name (src/version.ts) are not among
 *   them: the sidecar's --version is main.js's (test/sidecar/bundle.test.ts);
 * - what the sidecar runs before its first /healthz (what command.ts reaches by imports that load a module, type
 *   imports left out) holds none of the drain: main.ts loads engine.ts with import(), once it listens;
 * - no module of the product imports the Envoy emulator (src/emulator/README.md), and the lint rule that says so
 *   covers every module of src/ but the emulator's;
 * - the layering: a pure core (the injector, the config module, the identity rules...) imports no framework, no I/O
 *   and no edge, and the drain nothing of HTTP (eslint.config.mjs PURE_CORES and DRAIN_CORE, with controls here).
 *
 * Dynamic import() is left out of all: it loads on demand, which is what it is there for (the sidecar's
 * drain and metrics, the commands' chunks).
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, test } from 'node:test';
import { ESLint } from 'eslint';
import ts from 'typescript';
import { REPO_ROOT } from './support/process.js';

/** Repository-relative path (src/...) → the src/ modules it imports, by import or export declarations or import('…') types. */
type ImportGraph = ReadonlyMap<string, readonly string[]>;

function sourceFiles(directory: string): string[] {
  return readdirSync(join(REPO_ROOT, directory), { withFileTypes: true }).flatMap((entry) => {
    const path = `${directory}/${entry.name}`;
    if (entry.isDirectory()) return sourceFiles(path);
    return /\.c?ts$/.test(entry.name) && !entry.name.endsWith('.d.ts') ? [path] : [];
  });
}

/**
 * The relative specifiers `file` imports statically, as written; with `loading`, only the imports that load the
 * module at run time: not `import type` nor `export type` (erased), nor import('…') types. An import whose names
 * are all `type` still loads its module (verbatimModuleSyntax keeps it as `import {} from`).
 */
function staticSpecifiers(file: string, text: string, loading = false): string[] {
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const found: string[] = [];
  const visit = (node: ts.Node): void => {
    if ((ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) && node.moduleSpecifier !== undefined && ts.isStringLiteral(node.moduleSpecifier)) {
      const typeOnly = ts.isImportDeclaration(node) ? node.importClause?.isTypeOnly === true : node.isTypeOnly;
      if (!(loading && typeOnly)) found.push(node.moduleSpecifier.text);
    } else if (!loading && ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument) && ts.isStringLiteral(node.argument.literal)) {
      found.push(node.argument.literal.text);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found.filter((specifier) => specifier.startsWith('.'));
}

/** `./x.js` from src/a/b.ts → src/a/x.ts (`.cjs` → `.cts`), as NodeNext resolution maps them. */
function resolveSpecifier(from: string, specifier: string): string {
  const target = relative(REPO_ROOT, resolve(REPO_ROOT, dirname(from), specifier)).split('\\').join('/');
  return target.replace(/\.js$/, '.ts').replace(/\.cjs$/, '.cts');
}

function importGraph(files: readonly string[], read: (file: string) => string, loading = false): ImportGraph {
  return new Map(files.map((file) => [file, [...new Set(staticSpecifiers(file, read(file), loading).map((specifier) => resolveSpecifier(file, specifier)))]]));
}

/** Every circle of the graph, as the modules of one strongly connected component (Tarjan), a module importing itself included. */
function circles(graph: ImportGraph): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const connect = (module: string): void => {
    index.set(module, index.size);
    low.set(module, index.get(module) as number);
    stack.push(module);
    onStack.add(module);
    for (const next of graph.get(module) ?? []) {
      if (!graph.has(next)) continue;
      if (!index.has(next)) {
        connect(next);
        low.set(module, Math.min(low.get(module) as number, low.get(next) as number));
      } else if (onStack.has(next)) {
        low.set(module, Math.min(low.get(module) as number, index.get(next) as number));
      }
    }
    if (low.get(module) !== index.get(module)) return;
    const component: string[] = [];
    let member: string | undefined;
    do {
      member = stack.pop() as string;
      onStack.delete(member);
      component.push(member);
    } while (member !== module);
    if (component.length > 1 || (graph.get(module) ?? []).includes(module)) found.push(component.sort());
  };
  for (const module of graph.keys()) if (!index.has(module)) connect(module);
  return found;
}

/** The modules `entry` reaches through the graph, itself included. */
function reached(graph: ImportGraph, entry: string): Set<string> {
  const seen = new Set<string>();
  const walk = (module: string): void => {
    if (seen.has(module)) return;
    seen.add(module);
    for (const next of graph.get(module) ?? []) walk(next);
  };
  walk(entry);
  return seen;
}

const SRC = sourceFiles('src');
const GRAPH = importGraph(SRC, (file) => readFileSync(join(REPO_ROOT, file), 'utf8'));
/** The imports that load a module at run time (see staticSpecifiers). */
const LOADING = importGraph(SRC, (file) => readFileSync(join(REPO_ROOT, file), 'utf8'), true);

describe('the imports of src/', () => {
  test('the parser finds the imports (a control): type imports, re-exports and import() types count, import() calls do not', () => {
    assert.ok(SRC.length > 100, `only ${SRC.length} modules under src/`);
    const text = [
      "import type { A } from './a.js';",
      "import { b, type B } from '../b.js';",
      "export { c } from './c.js';",
      "let d: import('./d.js').D;",
      "const lazy = () => import('./lazy.js');",
      "import { readFileSync } from 'node:fs';",
      "const cjs = require('./entry.cjs');",
    ].join('\n');
    const graph = importGraph(['src/x/y.ts'], () => text);
    assert.deepEqual(graph.get('src/x/y.ts'), ['src/x/a.ts', 'src/b.ts', 'src/x/c.ts', 'src/x/d.ts'], 'what src/x/y.ts imports');
    const loading = importGraph(['src/x/y.ts'], () => `${text}\nimport { type E } from './e.js';\nexport type { F } from './f.js';`, true);
    assert.deepEqual(loading.get('src/x/y.ts'), ['src/b.ts', 'src/x/c.ts', 'src/x/e.ts'], 'what loads at run time');
  });

  test('the circle finder finds circles (a control): through type imports, and of one module', () => {
    const graph = new Map([
      ['a', ['b']],
      ['b', ['c']],
      ['c', ['a', 'd']],
      ['d', []],
      ['e', ['e']],
    ]);
    assert.deepEqual(circles(graph), [['a', 'b', 'c'], ['e']]);
    assert.deepEqual(circles(new Map([['a', ['b']], ['b', []]])), [], 'no circle in a chain');
  });

  test('no module imports itself back, through any chain of imports (type imports included)', () => {
    assert.deepEqual(circles(GRAPH), [], 'these modules import each other: move what they share to a module both import');
  });
});

describe("the sidecar's start path", () => {
  const START = reached(GRAPH, 'src/sidecar/command.ts');
  const ENGINE = reached(GRAPH, 'src/sidecar/engine.ts');
  /** What runs before the first /healthz: command.ts's imports that load a module. */
  const AT_START = reached(LOADING, 'src/sidecar/command.ts');

  test("holds the server and the sidecar's settings, not the drain, the webhook's settings, the version or the image name", () => {
    for (const module of ['src/sidecar/main.ts', 'src/sidecar/server.ts', 'src/sidecar/journal.ts', 'src/config/sidecar.ts']) assert.ok(AT_START.has(module), `${module} is on it`);
    // main.ts loads the engine with import() once the server listens (src/sidecar/engine-loader.ts).
    for (const module of ['src/sidecar/engine.ts', 'src/sidecar/supervisor.ts', 'src/sidecar/drain.ts', 'src/sidecar/metrics.ts', 'src/envoy/admin-client.ts']) {
      assert.ok(!AT_START.has(module), `${module} is not on it`);
    }
    assert.ok(ENGINE.has('src/envoy/admin-client.ts'), 'the engine reaches the admin client');
    for (const module of ['src/config/webhook.ts', 'src/version.ts', 'src/main.ts']) assert.ok(!START.has(module) && !ENGINE.has(module), `${module} is not in the sidecar`);
  });

  test("is under the lint rule against node:http and node:crypto there, and so is the engine (eslint.config.mjs's SIDECAR_START_PATH)", async () => {
    const eslint = new ESLint({ cwd: REPO_ROOT });
    const uncovered: string[] = [];
    for (const module of [...new Set([...START, ...ENGINE])].sort()) {
      const config = (await eslint.calculateConfigForFile(join(REPO_ROOT, module))) as { rules?: Record<string, unknown> } | undefined;
      const rule = config?.rules?.['no-restricted-imports'];
      const paths = Array.isArray(rule) ? (rule[1] as { paths?: { name: string }[] } | undefined)?.paths?.map((path) => path.name) : undefined;
      if (!(paths?.includes('node:http') === true && paths.includes('node:crypto'))) uncovered.push(module);
    }
    assert.deepEqual(uncovered, [], 'on the start path but not in SIDECAR_START_PATH: add them there');
  });
});

describe('the Envoy emulator (src/emulator/README.md)', () => {
  const isEmulator = (module: string): boolean => module.startsWith('src/emulator/');

  test('no module of the product imports it, type imports included', () => {
    const importing = [...GRAPH].filter(([module, imports]) => !isEmulator(module) && imports.some(isEmulator)).map(([module]) => module);
    assert.deepEqual(importing, [], 'these product modules import the emulator, a stand-in for Envoy the tests use');
  });

  test("eslint.config.mjs forbids it in src/ outside src/emulator/, the sidecar's start path included (a control on the rule)", async () => {
    const eslint = new ESLint({ cwd: REPO_ROOT });
    const lint = async (file: string, specifier: string): Promise<string[]> => {
      const [result] = await eslint.lintText(`export type { EnvoyEmulatorOptions } from '${specifier}';\n`, { filePath: join(REPO_ROOT, file) });
      return (result?.messages ?? []).map((message) => message.ruleId ?? '');
    };
    assert.deepEqual(await lint('src/check/drains.ts', '../emulator/types.js'), ['no-restricted-imports'], 'a product module');
    assert.deepEqual(await lint('src/sidecar/drain.ts', '../emulator/types.js'), ['no-restricted-imports'], "a module on the sidecar's start path");
    assert.deepEqual(await lint('src/main.ts', './emulator/types.js'), ['no-restricted-imports'], 'the entry');
    assert.deepEqual(await lint('src/emulator/cli.ts', './types.js'), [], 'the emulator itself');
    assert.deepEqual(await lint('test/emulator/drain.test.ts', '../../src/emulator/types.js'), [], 'a test');
  });
});

describe('the layering (eslint.config.mjs PURE_CORES and DRAIN_CORE)', () => {
  /** The rules a re-export of `specifier` breaks in `file` (a re-export is checked as an import is, and uses nothing). */
  async function lintReexport(file: string, specifier: string, typeOnly = false): Promise<string[]> {
    const eslint = new ESLint({ cwd: REPO_ROOT });
    const [result] = await eslint.lintText(`export ${typeOnly ? 'type ' : ''}{ Thing } from '${specifier}';\n`, { filePath: join(REPO_ROOT, file) });
    return (result?.messages ?? []).map((message) => message.ruleId ?? '');
  }
  const LAYERING = '@typescript-eslint/no-restricted-imports';

  test('a pure core imports no framework, no I/O and no edge; types are data shapes and allowed', async () => {
    assert.deepEqual(await lintReexport('src/inject/injector.ts', 'node:fs'), [LAYERING], 'the injector reading a file');
    assert.deepEqual(await lintReexport('src/inject/injector.ts', '@kubernetes/client-node'), [LAYERING], 'the injector calling the API server');
    assert.deepEqual(await lintReexport('src/inject/injector.ts', '@kubernetes/client-node', true), [], "a V1Pod type is the pod's shape");
    assert.deepEqual(await lintReexport('src/config/values.ts', '../kube/client.js'), [LAYERING], 'the config module and the Kubernetes client');
    assert.deepEqual(await lintReexport('src/config/reference.ts', './webhook.js'), [], "the config module's own webhook settings are no edge");
    assert.deepEqual(await lintReexport('src/envoy/process/identity.ts', 'node:fs'), [LAYERING], 'the identity rules reading a file');
    assert.deepEqual(await lintReexport('src/sidecar/drain-outcome.ts', './server/routes.js'), [LAYERING], "the outcome's wording and the routes");
  });

  test('the drain and the supervisor know nothing of HTTP or of the routes that start them', async () => {
    assert.deepEqual(await lintReexport('src/sidecar/drain.ts', './server/routes.js'), [LAYERING], 'the drain and the routes');
    assert.deepEqual(await lintReexport('src/sidecar/supervisor.ts', 'undici'), [LAYERING], 'the supervisor and an HTTP client');
    assert.deepEqual(await lintReexport('src/sidecar/drain.ts', '../envoy/admin-errors.js'), [], "the admin API's typed errors are the drain's to know");
    assert.deepEqual(await lintReexport('src/webhook/server.ts', 'fastify'), [], 'an edge imports its framework');
  });
});
