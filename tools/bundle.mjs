/**
 * The second half of `npm run build`: bundles what tsc wrote into dist/ (esbuild), for the image to run without
 * node_modules.
 *
 * - dist/sidecar.cjs, dist/sidecar-engine.cjs and dist/sidecar-metrics.cjs: the sidecar, CommonJS that dist/entry.cjs
 *   requires without Node's ES module loader (faster to start: src/sidecar/main.ts): what its first /healthz needs,
 *   then its Envoy side (src/sidecar/engine.ts), required once it listens, and its metrics, at the first scrape.
 * - dist/app/: every other mode, ES modules split into chunks that load on demand;
 * - dist/meta/: esbuild's metafiles of both, what test/release/sbom.test.ts holds the SBOM to;
 * - dist/licenses/: the SBOM and licence notices of the npm packages bundled (tools/sbom.ts).
 *
 * It does nothing when the bundles are newer than everything they are made of (what tsc wrote, the lock file,
 * this script): `npm start`, `npm run inject` and the tests that run them call the build again, and a bundle
 * rewritten under a test that runs it at the same moment (npm test runs two test files at once) would be
 * missing or half written. When it does bundle, each bundle is written aside and renamed into place.
 *
 * Plain JavaScript run by node, so that the build needs nothing but tsc and esbuild (the Dockerfile copies it).
 */
import { execFileSync } from 'node:child_process';
import { build } from 'esbuild';
import { existsSync, mkdirSync, readdirSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

const DIST = 'dist';
const STAMP = join(DIST, '.bundled');
const SIDECAR_FILES = ['sidecar.cjs', 'sidecar-engine.cjs', 'sidecar-metrics.cjs'].map((file) => join(DIST, file));
const APP = join(DIST, 'app');
/** What the bundles are made of besides tsc's output. */
const OTHER_INPUTS = ['package-lock.json', 'tools/bundle.mjs', 'tools/sbom.ts', 'LICENSE'];
const META = join(DIST, 'meta');

/** The newest modification time among tsc's output (not the bundles) and the other inputs. */
function newestInputMs() {
  let newest = 0;
  const walk = (directory) => {
    for (const entry of readdirSync(directory, { withFileTypes: true })) {
      const path = join(directory, entry.name);
      if (entry.isDirectory()) {
        if (path !== APP) walk(path);
      } else if (entry.name.endsWith('.js') || entry.name.endsWith('.cjs')) {
        if (!SIDECAR_FILES.includes(path)) newest = Math.max(newest, statSync(path).mtimeMs);
      }
    }
  };
  walk(DIST);
  for (const path of OTHER_INPUTS) if (existsSync(path)) newest = Math.max(newest, statSync(path).mtimeMs);
  return newest;
}

function upToDate() {
  return existsSync(STAMP) && SIDECAR_FILES.every((file) => existsSync(file)) && existsSync(APP) && statSync(STAMP).mtimeMs > newestInputMs();
}

const common = { bundle: true, platform: 'node', target: 'node20', logLevel: 'warning', write: false, metafile: true };

function writeMeta(name, metafile) {
  mkdirSync(META, { recursive: true });
  writeFileSync(join(META, `${name}.json`), JSON.stringify(metafile));
}

/** esbuild's output files, as they would be written under `finalDir`, written under `asideDir` instead. */
function writeAside(outputFiles, finalDir, asideDir) {
  for (const file of outputFiles) {
    const path = join(asideDir, relative(resolve(finalDir), file.path));
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(path, file.contents);
  }
}

/**
 * The sidecar's lazy imports, each left to a bundle of its own that the importing bundle requires when it gets
 * there: src/sidecar/main.ts's `import('./engine.js')` (the drain, loaded once the server listens:
 * src/sidecar/engine-loader.ts) and src/sidecar/engine.ts's `import('./metrics.js')` (prom-client, at the first
 * scrape). Each is a CommonJS bundle too: Node's ES module loader must not be loaded for them.
 */
const SIDECAR_PARTS = [
  { entry: 'sidecar/command.js', file: 'sidecar.cjs', meta: 'sidecar' },
  { entry: 'sidecar/engine.js', file: 'sidecar-engine.cjs', meta: 'sidecar-engine', importedAs: './engine.js', by: 'sidecar/main.js' },
  { entry: 'sidecar/metrics.js', file: 'sidecar-metrics.cjs', meta: 'sidecar-metrics', importedAs: './metrics.js', by: 'sidecar/engine.js' },
];

const sidecarPartsApart = {
  name: 'sidecar-parts-apart',
  setup(build) {
    build.onResolve({ filter: /^\.\/(engine|metrics)\.js$/ }, (args) => {
      const part = SIDECAR_PARTS.find(({ importedAs, by }) => args.path === importedAs && args.importer === resolve(DIST, by));
      return part !== undefined && args.kind === 'dynamic-import' ? { path: `./${part.file}`, external: true } : undefined;
    });
  },
};

/** One CommonJS bundle of the sidecar: `entry` and what it imports statically. */
async function bundleSidecarPart({ entry, file, meta }) {
  const { outputFiles, metafile } = await build({
    ...common,
    entryPoints: [join(DIST, entry)],
    format: 'cjs',
    sourcemap: true,
    outfile: join(DIST, file),
    define: { 'import.meta.url': '__filename' },
    // import() of the parts apart as a require (Promise.resolve().then(() => require(...))).
    supported: { 'dynamic-import': false },
    plugins: [sidecarPartsApart],
  });
  writeMeta(meta, metafile);
  return outputFiles;
}

async function bundleSidecar() {
  const outputFiles = [];
  for (const part of SIDECAR_PARTS) outputFiles.push(...(await bundleSidecarPart(part)));
  const aside = join(DIST, `.sidecar.${process.pid}`);
  writeAside(outputFiles, DIST, aside);
  // The parts loaded later first: a sidecar started between two renames finds the parts its start bundle asks for.
  const order = (name) => SIDECAR_PARTS.findIndex(({ file }) => name.startsWith(file));
  for (const name of readdirSync(aside).sort((a, b) => order(b) - order(a))) renameSync(join(aside, name), join(DIST, name));
  rmSync(aside, { recursive: true, force: true });
}

async function bundleApp() {
  const { outputFiles, metafile } = await build({
    ...common,
    entryPoints: [join(DIST, 'main.js')],
    // debug (of @kubernetes/client-node) tries require('supports-color'), which only devDependencies provide:
    // left out, debug does without colours (see tools/sbom.ts).
    external: ['supports-color'],
    format: 'esm',
    splitting: true,
    outdir: APP,
    chunkNames: 'chunks/[name]-[hash]',
    // The ES module bundle still has CommonJS dependencies that call require.
    banner: { js: "import { createRequire as createRequireForBundle } from 'node:module'; const require = createRequireForBundle(import.meta.url);" },
  });
  writeMeta('app', metafile);
  const aside = `${APP}.${process.pid}.new`;
  rmSync(aside, { recursive: true, force: true });
  writeAside(outputFiles, APP, aside);
  const old = `${APP}.${process.pid}.old`;
  if (existsSync(APP)) renameSync(APP, old);
  renameSync(aside, APP);
  rmSync(old, { recursive: true, force: true });
}

if (!upToDate()) {
  await bundleSidecar();
  await bundleApp();
  execFileSync(process.execPath, ['--import', 'tsx', 'tools/sbom.ts', '--out', join(DIST, 'licenses')], { stdio: 'inherit' });
  writeFileSync(STAMP, '');
}
