/**
 * The lint `npm test` runs first (`npm run lint`): ESLint's and typescript-eslint's recommended rules, without
 * type information, plus the project's own promises below: the sidecar's start path, the emulator kept out of the
 * product, and the sizes issue 34 set (no file of src/ over 600 lines, no function over 80). Versions: eslint 9
 * (10 needs Node 20.19) and typescript-eslint ~8.55 (8.56 on depends on eslint-visitor-keys 5, which needs Node
 * 20.19): the project's floor is 20.18.1, held by test/release/node-version.test.ts.
 *
 * Off, and why:
 * - the type-aware rules (recommendedTypeChecked): about a minute of CPU on this tree instead of 15 s, and some
 *   2,500 findings, most of them no-floating-promises on node:test's describe() and test() and no-unsafe-* on the
 *   tests' parsed JSON: a rewrite, not a fix. tsc --noEmit (strict) runs before the lint anyway;
 * - no-explicit-any in test/: the tests navigate parsed manifests and fixtures as free-form JSON (`type Json =
 *   any`); in src and everywhere else it is on.
 * - no-undef in TypeScript: tsc checks names better (typescript-eslint's advice); on for the plain .mjs files.
 */
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

/** The Node globals the plain JavaScript files (tools/*.mjs, bench/*.mjs, test/support/*.mjs) use. */
const NODE_GLOBALS = Object.fromEntries(
  ['process', 'Buffer', 'URL', 'console', 'setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'setImmediate', 'queueMicrotask', 'structuredClone'].map((name) => [name, 'readonly']),
);

/**
 * What the sidecar loads must not import these (values, that is: `import type` is erased). Its bundles (of
 * src/sidecar/command.ts, and of src/sidecar/engine.ts, which the first loads once it listens) are CommonJS, so
 * each would be a require when its bundle loads: node:http, with an ESM-style load,
 * reads every export and on Node 24 loads undici (12 MiB, src/envoy/admin-client.ts), node:crypto is loaded at
 * the first token check (src/sidecar/server.ts), node:util and node:net are taken with
 * process.getBuiltinModule for the same memory (src/config/settings.ts, src/config/values.ts).
 * test/sidecar/bundle.test.ts checks node:http and node:crypto on the built bundle.
 */
const NOT_AT_SIDECAR_START = ['http', 'crypto', 'util', 'net'].flatMap((name) => [
  { name: `node:${name}`, allowTypeImports: true, message: `not on the sidecar's start path: take it with process.getBuiltinModule('node:${name}') where it is needed (see src/envoy/admin-client.ts).` },
  { name, allowTypeImports: true, message: `not on the sidecar's start path (and spell it node:${name}): see src/envoy/admin-client.ts.` },
]);

/**
 * The Envoy emulator (src/emulator/, see its README.md) stands in for Envoy in the tests, the demo, the proof and the
 * benches; the product never runs it, and the image leaves it out (tsconfig.build.json). So no other module of src/
 * imports it, type imports included: a product module that did would ship, or lean on, a stand-in for Envoy.
 */
const NOT_THE_EMULATOR = [
  { regex: String.raw`^\.{1,2}/(?:.*/)?emulator(?:/|$)`, message: 'the Envoy emulator is for the tests, the demo, the proof and the benches, never the product: see src/emulator/README.md.' },
];

/**
 * The layering: the pure cores decide, the edges do I/O, and a core imports no edge, so that it can be read, tested
 * and reused without a server, a cluster or a socket (docs/development.md#the-source-tree). Types are data shapes
 * and allowed (a V1Pod from @kubernetes/client-node); values are not.
 * - PURE_CORES: the injector, the config module, the rules that tell Envoy processes apart, stats counting, the
 *   outcome's wording, recovery's decision: no network, file, process or framework module at all.
 * - DRAIN_CORE: the drain and the supervisor know Envoy's admin API through an interface, and nothing of HTTP
 *   routes (the sidecar's server lives in src/sidecar/server/).
 * Checked with typescript-eslint's no-restricted-imports, so that it composes with the core rule's blocks below.
 */
export const PURE_CORES = [
  'src/inject/**/*.ts',
  'src/config/**/*.ts',
  'src/envoy/process/identity.ts',
  'src/envoy/stats.ts',
  'src/envoy/arrivals.ts',
  'src/envoy/version.ts',
  'src/sidecar/drain-outcome.ts',
  'src/sidecar/drain-steps.ts',
  'src/sidecar/drain-settings.ts',
  'src/sidecar/needed-stats.ts',
  'src/sidecar/recovery.ts',
  'src/sidecar/load-balancer.ts',
];
export const DRAIN_CORE = [
  'src/sidecar/drain.ts',
  'src/sidecar/drain-process.ts',
  'src/sidecar/drain-log.ts',
  'src/sidecar/drain-admin-failures.ts',
  'src/sidecar/supervisor.ts',
  'src/sidecar/process-follower.ts',
];
const FRAMEWORKS = ['fastify', 'undici', 'pino', 'prom-client', '@kubernetes/client-node'];
const IO_BUILTINS = ['http', 'https', 'http2', 'net', 'tls', 'dgram', 'dns', 'fs', 'fs/promises', 'child_process'];
/** Relative imports that leave the module's folder for an edge, or reach the sidecar's server from src/sidecar/. */
const EDGE_MODULES = [String.raw`^(?:\.\./)+(?:webhook|kube|cli|certs/(?!names)|sidecar/server)(?:/|\.js$)`, String.raw`^\./server(?:/|\.js$)`];
const NOT_IN_A_PURE_CORE = {
  paths: [
    ...FRAMEWORKS.map((name) => ({ name, allowTypeImports: true, message: 'a pure core imports no framework: take what it needs as a parameter, or decide here and let an edge act.' })),
    ...IO_BUILTINS.flatMap((name) => [`node:${name}`, name]).map((name) => ({ name, allowTypeImports: true, message: 'a pure core does no I/O: an edge reads and writes, the core decides.' })),
  ],
  patterns: EDGE_MODULES.map((regex) => ({ regex, allowTypeImports: true, message: 'a pure core imports no edge (the webhook, the Kubernetes client, the CLI, certificates, the sidecar server).' })),
};
const NOT_IN_THE_DRAIN = {
  paths: ['fastify', 'undici', 'node:http', 'node:https', 'http', 'https'].map((name) => ({ name, allowTypeImports: true, message: 'the drain knows nothing of HTTP: it reaches Envoy through EnvoyDrainTarget (src/sidecar/drain.ts).' })),
  patterns: [{ regex: String.raw`^\./server(?:/|\.js$)|^(?:\.\./)+webhook/`, allowTypeImports: true, message: 'the drain knows nothing of the routes that start it (src/sidecar/server/).' }],
};

/**
 * The modules src/sidecar/command.ts and src/sidecar/engine.ts (the sidecar bundles' entries) reach by static
 * imports, besides src/sidecar/ itself. test/architecture.test.ts walks the imports and fails when a module reached
 * is not listed here.
 */
export const SIDECAR_START_PATH = [
  'src/sidecar/**/*.ts',
  'src/envoy/**/*.ts',
  'src/clock.ts',
  'src/errors.ts',
  'src/json.ts',
  'src/config/annotation-names.ts',
  'src/config/drain.ts',
  'src/config/duration.ts',
  'src/config/endpoints.ts',
  'src/config/errors.ts',
  'src/config/label-selector.ts',
  'src/config/quantity.ts',
  'src/config/settings.ts',
  'src/config/sidecar.ts',
  'src/config/values.ts',
];

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', '.bench/**', 'certs/**'] },
  { linterOptions: { reportUnusedDisableDirectives: 'error' } },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    name: 'project',
    rules: {
      // `_`-named bindings are the code's way of leaving a property out of a rest (`{ a: _a, ...rest }`).
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrorsIgnorePattern: '^_', ignoreRestSiblings: true }],
      // verbatimModuleSyntax already requires `type` on an import only types use; this also says it. Both
      // `import type { A }` and `import { type A }` are used. `import('node:http').Agent` in a type is kept: it
      // names a type without an import line (src/envoy/admin-client.ts).
      '@typescript-eslint/consistent-type-imports': ['error', { prefer: 'type-imports', fixStyle: 'inline-type-imports', disallowTypeAnnotations: false }],
      // A `let` assigned once, after a closure that reads it is handed out (src/sidecar/main.ts), stays a `let`.
      'prefer-const': ['error', { ignoreReadBeforeAssign: true }],
    },
  },
  {
    name: 'plain JavaScript',
    files: ['**/*.js', '**/*.mjs', '**/*.cjs'],
    languageOptions: { globals: NODE_GLOBALS },
  },
  {
    name: 'CommonJS entry point',
    // dist/entry.cjs requires the sidecar's CommonJS bundle: require is the point (src/entry.cts).
    files: ['**/*.cts'],
    rules: { '@typescript-eslint/no-require-imports': 'off' },
  },
  {
    name: 'tests',
    files: ['test/**'],
    rules: { '@typescript-eslint/no-explicit-any': 'off' },
  },
  {
    name: 'the product, apart from the emulator',
    files: ['src/**'],
    ignores: ['src/emulator/**'],
    rules: { 'no-restricted-imports': ['error', { patterns: NOT_THE_EMULATOR }] },
  },
  {
    name: 'sidecar start path',
    files: SIDECAR_START_PATH,
    // A later block's options replace an earlier one's for the same rule: the emulator's patterns are repeated here.
    rules: { 'no-restricted-imports': ['error', { paths: NOT_AT_SIDECAR_START, patterns: NOT_THE_EMULATOR }] },
  },
  {
    name: 'layering: pure cores',
    files: PURE_CORES,
    rules: { '@typescript-eslint/no-restricted-imports': ['error', NOT_IN_A_PURE_CORE] },
  },
  {
    name: 'layering: the drain',
    files: DRAIN_CORE,
    rules: { '@typescript-eslint/no-restricted-imports': ['error', NOT_IN_THE_DRAIN] },
  },
  {
    name: 'sizes (issue 34)',
    files: ['src/**'],
    rules: {
      // Lines of the file as `wc -l` counts them, comments and blank lines included.
      'max-lines': ['error', { max: 600, skipBlankLines: false, skipComments: false }],
      'max-lines-per-function': ['error', { max: 80, skipBlankLines: true, skipComments: true }],
    },
  },
);
