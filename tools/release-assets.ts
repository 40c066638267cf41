/**
 * `npm run release:assets`: builds into one directory exactly what the release workflow attaches to a GitHub
 * release (.github/workflows/release.yml runs this same command), so that a reviewer can rebuild and compare:
 *
 *   install.yaml               kubectl kustomize manifests              (TLS from cert-manager)
 *   install-self-signed.yaml   kubectl kustomize manifests/self-signed  (the webhook manages its certificates)
 *   monitoring.yaml            kubectl kustomize manifests/monitoring   (PodMonitors, alerts, dashboard)
 *   sbom.cdx.json              the npm packages bundled into the image (tools/sbom.ts; the image ships the same)
 *   release-notes.md           CHANGELOG.md's section of the version, then how to install and verify it
 *   SHA256SUMS                 of every file above, in `sha256sum -c` format
 *
 *   node --import tsx tools/release-assets.ts --out DIR [--tag vX.Y.Z]
 *
 * The directory is emptied first: what is in it afterwards is what gets published. The kustomize Components (Contour,
 * Envoy Gateway) are not files to download: kustomize fetches them remotely at the tag, and the release notes name
 * their URLs.
 */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { IMAGE_REPOSITORY } from '../src/config/webhook.js';
import { REPO_ROOT, cycloneDx, productionPackages, readLock } from './sbom.js';

export const REPOSITORY = 'envoy-shutdown-manager/envoy-shutdown-manager';

/** Each kustomization built into an asset, and what its header says it is. */
export const MANIFEST_ASSETS = [
  { file: 'install.yaml', dir: 'manifests', what: 'the webhook with TLS from cert-manager (install cert-manager first)' },
  { file: 'install-self-signed.yaml', dir: 'manifests/self-signed', what: 'the webhook managing its own certificates (no cert-manager)' },
  { file: 'monitoring.yaml', dir: 'manifests/monitoring', what: 'PodMonitors, alerts and dashboard (needs the Prometheus Operator CRDs)' },
] as const;

export function downloadUrl(tag: string, file: string): string {
  return `https://github.com/${REPOSITORY}/releases/download/${tag}/${file}`;
}

export function contourComponentUrl(tag: string): string {
  return componentUrl('contour', tag);
}

export function envoyGatewayComponentUrl(tag: string): string {
  return componentUrl('envoy-gateway', tag);
}

/** A Component of manifests/ as kustomize fetches it remotely: this repository at the tag. */
function componentUrl(name: string, tag: string): string {
  return `github.com/${REPOSITORY}//manifests/${name}?ref=${tag}`;
}

/** The only signer a verification accepts: this repository's release workflow, run for that tag. */
export function signerIdentity(tag: string): string {
  return `https://github.com/${REPOSITORY}/.github/workflows/release.yml@refs/tags/${tag}`;
}

export const OIDC_ISSUER = 'https://token.actions.githubusercontent.com';

function packageVersion(): string {
  return (JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8')) as { version: string }).version;
}

/** `kubectl kustomize DIR`, or an error naming the directory and kubectl's own message. */
function kustomize(dir: string): string {
  const result = spawnSync('kubectl', ['kustomize', join(REPO_ROOT, dir)], { encoding: 'utf8', timeout: 60_000, maxBuffer: 64 * 1024 * 1024 });
  if (result.error !== undefined) throw new Error(`kubectl kustomize ${dir}: ${result.error.message} (the assets are built with kubectl's kustomize)`);
  if (result.status !== 0) throw new Error(`kubectl kustomize ${dir} exited with ${String(result.status)}: ${result.stderr.trim()}`);
  return result.stdout;
}

function manifestAsset(version: string, tag: string, asset: (typeof MANIFEST_ASSETS)[number]): string {
  const header = [
    `# envoy-shutdown-manager ${version}: ${asset.what}.`,
    `# Built by npm run release:assets from ${asset.dir}/ at ${tag} (kubectl kustomize ${asset.dir}).`,
    `#   kubectl apply -f ${downloadUrl(tag, asset.file)}`,
  ];
  return `${header.join('\n')}\n${kustomize(asset.dir)}`;
}

/**
 * The body of CHANGELOG.md's `## <version>` section (up to the next `## `), or an error: a version without its
 * notes is not released.
 */
export function changelogSection(changelog: string, version: string): string {
  const lines = changelog.split('\n');
  const start = lines.findIndex((line) => new RegExp(`^## \\[?${version.replaceAll('.', '\\.')}\\]?(\\s|$)`).test(line));
  if (start === -1) throw new Error(`CHANGELOG.md has no section "## ${version}": write the release notes of ${version} there first`);
  const end = lines.findIndex((line, index) => index > start && /^## /.test(line));
  const body = lines.slice(start + 1, end === -1 ? undefined : end).join('\n').trim();
  if (body === '') throw new Error(`CHANGELOG.md's section "## ${version}" is empty`);
  return body;
}

function releaseNotes(version: string, tag: string): string {
  const section = changelogSection(readFileSync(join(REPO_ROOT, 'CHANGELOG.md'), 'utf8'), version);
  const install = [
    '## Install',
    '',
    'With cert-manager installed:',
    '',
    '```sh',
    `kubectl apply -f ${downloadUrl(tag, 'install.yaml')}`,
    '```',
    '',
    `Without cert-manager: \`kubectl apply -f ${downloadUrl(tag, 'install-self-signed.yaml')}\`.`,
    `The image: \`${IMAGE_REPOSITORY}:${version}\`. Contour's Envoy, as a kustomize Component: \`${contourComponentUrl(tag)}\`.`,
    `Envoy Gateway's proxies, as a kustomize Component added to the install: \`${envoyGatewayComponentUrl(tag)}\`.`,
    '',
    'Verify the image (signed keyless by this repository\'s release workflow at this tag, every platform):',
    '',
    '```sh',
    `cosign verify ${IMAGE_REPOSITORY}:${version} \\`,
    `  --certificate-identity=${signerIdentity(tag)} \\`,
    `  --certificate-oidc-issuer=${OIDC_ISSUER}`,
    '```',
    '',
    `Every asset is listed in SHA256SUMS, signed the same way (SHA256SUMS.sigstore.json); docs/release.md at ${tag} gives every check.`,
  ];
  return `${section}\n\n${install.join('\n')}\n`;
}

function sha256(path: string): string {
  return createHash('sha256').update(readFileSync(path)).digest('hex');
}

/** SHA256SUMS of every other file in `out`, sorted by name, as `sha256sum` writes it (two spaces). */
function writeChecksums(out: string): void {
  const files = readdirSync(out).filter((file) => file !== 'SHA256SUMS').sort();
  writeFileSync(join(out, 'SHA256SUMS'), files.map((file) => `${sha256(join(out, file))}  ${file}\n`).join(''));
}

/** Builds every asset into `out` (emptied first); returns the file names. */
export function buildReleaseAssets(out: string, tag?: string): string[] {
  const version = packageVersion();
  const releaseTag = tag ?? `v${version}`;
  if (releaseTag !== `v${version}`) throw new Error(`--tag ${releaseTag} is not v${version}, the version in package.json`);
  rmSync(out, { recursive: true, force: true });
  mkdirSync(out, { recursive: true });
  for (const asset of MANIFEST_ASSETS) writeFileSync(join(out, asset.file), manifestAsset(version, releaseTag, asset));
  const lock = readLock();
  writeFileSync(join(out, 'sbom.cdx.json'), `${JSON.stringify(cycloneDx(lock, productionPackages(lock)), null, 2)}\n`);
  writeFileSync(join(out, 'release-notes.md'), releaseNotes(version, releaseTag));
  writeChecksums(out);
  return readdirSync(out).sort();
}

function main(): void {
  const { values } = parseArgs({ options: { out: { type: 'string' }, tag: { type: 'string' } }, strict: true });
  if (values.out === undefined) throw new Error('usage: node --import tsx tools/release-assets.ts --out DIR [--tag vX.Y.Z]');
  const out = resolve(values.out);
  const files = buildReleaseAssets(out, values.tag);
  process.stderr.write(`release assets in ${out}: ${files.join(', ')}\n`);
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) {
  try {
    main();
  } catch (error) {
    process.stderr.write(`tools/release-assets.ts: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exitCode = 1;
  }
}
