/**
 * The lint `npm test` runs first (`npm run lint`): ESLint's and typescript-eslint's recommended rules, without
 * type information, plus the project's own promises below. Versions: eslint 9 (10 needs Node 20.19) and
 * typescript-eslint ~8.55 (8.56 on depends on eslint-visitor-keys 5, which needs Node 20.19): the project's floor
 * is 20.18.1, held by test/release/node-version.test.ts.
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
    name: 'sidecar start path',
    files: SIDECAR_START_PATH,
    rules: { 'no-restricted-imports': ['error', { paths: NOT_AT_SIDECAR_START }] },
  },
);
