/**
 * `npm run pack:cli`: the npm package a platform team runs without a checkout (`npx envoy-shutdown-manager check`),
 * laid out in dist/cli-package/ and packed into dist/envoy-shutdown-manager-<version>.tgz.
 *
 * It holds what the image holds (the Dockerfile's runtime stage): dist/entry.cjs, the sidecar's bundles and the app's
 * bundle with its chunks, which contain every npm package they use (tools/bundle.mjs), so the package declares no
 * dependencies at all: nothing is fetched at install but the tarball, and nothing of the checkout's 200-odd
 * development packages. Beside them the licences of what is bundled (THIRD_PARTY_NOTICES, sbom.cdx.json), LICENSE,
 * and a README for the package's page. Its manifest is written here from the project's package.json: the same
 * name, version, licence and Node floor; `"type": "module"`, which makes Node load the app's chunks as ES modules.
 *
 * The checkout's package.json stays private: it is the workspace that builds this one (its dependencies are what
 * the bundles are made of, not what the package needs at run time).
 *
 *   node --import tsx tools/cli-package.ts [--out DIR] [--pack-destination DIR]
 */
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { REPO_ROOT } from './sbom.js';

/** What the bundles are (tools/bundle.mjs writes them), copied under the same paths as in the image. */
const PAYLOAD = ['dist/entry.cjs', 'dist/sidecar.cjs', 'dist/sidecar-engine.cjs', 'dist/sidecar-metrics.cjs', 'dist/app', 'dist/licenses'] as const;

interface ProjectManifest {
  readonly name: string;
  readonly version: string;
  readonly description: string;
  readonly license: string;
  readonly engines: { readonly node: string };
  readonly bin: Readonly<Record<string, string>>;
}

/** The package's manifest: the project's identity and Node floor, its bin, no dependencies (all are bundled). */
export function cliManifest(project: ProjectManifest): Record<string, unknown> {
  return {
    name: project.name,
    version: project.version,
    description: project.description,
    license: project.license,
    type: 'module',
    engines: project.engines,
    bin: project.bin,
    repository: { type: 'git', url: 'git+https://github.com/envoy-shutdown-manager/envoy-shutdown-manager.git' },
    keywords: ['envoy', 'kubernetes', 'graceful-shutdown', 'admission-webhook', 'drain'],
    files: ['dist/', 'LICENSE', 'README.md'],
  };
}

/** The package page's README: what the package is and its commands; the project's README is for the checkout. */
function cliReadme(project: ProjectManifest): string {
  return [
    `# ${project.name}`,
    '',
    `${project.description}`,
    '',
    'The command line of the project, without a checkout: every dependency is bundled, so the package installs',
    `nothing else. Node ${project.engines.node}.`,
    '',
    '```sh',
    `npx ${project.name}@${project.version} check                 # is every Envoy pod protected? (read-only; RBAC: manifests/check)`,
    `npx ${project.name}@${project.version} inject -f envoy.yaml  # the manifests with the sidecar, offline`,
    `npx ${project.name}@${project.version} uninject -f envoy.yaml`,
    `npx ${project.name}@${project.version} version`,
    '```',
    '',
    'Documentation: https://github.com/envoy-shutdown-manager/envoy-shutdown-manager',
    '',
  ].join('\n');
}

/** Lays the package out in `out` (emptied first) from a built checkout; returns the manifest written. */
export function layOutCliPackage(out: string, root = REPO_ROOT): Record<string, unknown> {
  const missing = PAYLOAD.filter((path) => !existsSync(join(root, path)));
  if (missing.length > 0) throw new Error(`${missing.join(', ')} missing: run npm run build first`);
  const project = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as ProjectManifest;
  rmSync(out, { recursive: true, force: true });
  mkdirSync(out, { recursive: true });
  for (const path of PAYLOAD) cpSync(join(root, path), join(out, path), { recursive: true });
  cpSync(join(root, 'LICENSE'), join(out, 'LICENSE'));
  writeFileSync(join(out, 'README.md'), cliReadme(project));
  const manifest = cliManifest(project);
  writeFileSync(join(out, 'package.json'), `${JSON.stringify(manifest, null, 2)}\n`);
  return manifest;
}

/** `npm pack` of the laid-out package into `destination`; returns the tarball's path. */
export function packCliPackage(out: string, destination: string): string {
  mkdirSync(destination, { recursive: true });
  const result = spawnSync('npm', ['pack', '--json', '--pack-destination', destination], { cwd: out, encoding: 'utf8', timeout: 120_000 });
  if (result.status !== 0) throw new Error(`npm pack in ${out} exited with ${String(result.status)}: ${result.stderr.trim()}`);
  const [packed] = JSON.parse(result.stdout) as { filename: string }[];
  if (packed === undefined) throw new Error(`npm pack in ${out} reported no tarball: ${result.stdout}`);
  return join(destination, packed.filename);
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const { values } = parseArgs({ options: { out: { type: 'string', default: 'dist/cli-package' }, 'pack-destination': { type: 'string', default: 'dist' } } });
  const out = resolve(values.out);
  layOutCliPackage(out);
  console.log(packCliPackage(out, resolve(values['pack-destination'])));
}
