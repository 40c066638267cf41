#!/usr/bin/env node
/**
 * The image's entry point (the Dockerfile's ENTRYPOINT), in CommonJS. Sidecar mode runs in every Envoy pod, so
 * it starts from here without Node's ES module machinery: its bundle (dist/sidecar.cjs, which requires the rest of
 * the sidecar's bundles when it needs them) is required as CommonJS,
 * which measured 3 MiB less resident memory on Node 24 (1 MiB on Node 20) and a faster start than the same
 * bundle imported as an ES module from dist/main.js. Every other mode and command goes on to the bundle of
 * dist/main.js, dist/app/main.js.
 */
const args = process.argv.slice(2);
// The rule of src/main.ts: a word first (inject, uninject, check, or a mistyped command) is main.js's;
// otherwise the first mode= argument is the mode. --version, in any mode, is main.js's too: the version is
// kept out of the sidecar's bundle. Restated rather than shared: a module of its own for these lines cost every
// sidecar 1.8 MiB of resident memory on Node 24 (measured, alternating starts), and
// test/sidecar/bundle.test.ts holds both to the same answers.
const first = args[0] ?? '';
const firstIsWord = first !== '' && !first.startsWith('-') && !first.startsWith('mode=');
const modeIndex = firstIsWord || args.includes('--version') ? -1 : args.findIndex((arg) => arg.startsWith('mode='));

if (modeIndex !== -1 && args[modeIndex] === 'mode=sidecar') {
  const { runSidecarCommand } = require('./sidecar.cjs') as typeof import('./sidecar/command.js');
  void runSidecarCommand(args.filter((_arg, index) => index !== modeIndex));
} else {
  // The webhook, the commands and self-managed certificates: one ES module bundle with its chunks (esbuild, see
  // tools/bundle.mjs), so that the image ships no node_modules; @kubernetes/client-node is a chunk of
  // its own, loaded only by self-managed certificates and `check`.
  // A path in a variable: the bundle is built after the compiler, which must not look for it.
  const bundle = './app/main.js';
  void import(bundle);
}
