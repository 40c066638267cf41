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
 *   node --import tsx tools/release-assets.ts --out DIR --digest sha256:<hex> [--tag vX.Y.Z]
 *
 * --digest is the digest of the image the release workflow pushed (docker/build-push-action's output), so the image
 * is pushed before the assets are built. install.yaml and install-self-signed.yaml run the webhook as
 * `<repository>:<version>@<digest>` and inject that same reference into every Envoy pod (--sidecar-image): a tag
 * pushed again changes neither. The tag stays beside the digest for people and tools to read (kubectl get pods,
 * check's skew report, Renovate, which updates both); Kubernetes pulls by the digest alone. There is no build without
 * a digest: the assets exist to be published, and a tag-only install is what the digest is there to prevent
 * (`kubectl kustomize manifests` shows the manifests as they are). A reviewer rebuilds with the digest the release
 * notes name and gets the same bytes.
 *
 * The directory is emptied first: what is in it afterwards is what gets published. The kustomize Components (Contour,
 * Envoy Gateway) are not files to download: kustomize fetches them remotely at the tag, and the release notes name
 * their URLs.
 */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { envName } from '../src/config/settings.js';
import { IMAGE_REPOSITORY } from '../src/version.js';
import { REPO_ROOT, cycloneDx, productionPackages, readLock } from './sbom.js';

export const REPOSITORY = 'envoy-shutdown-manager/envoy-shutdown-manager';

/**
 * Each kustomization built into an asset, and what its header says it is. `runsWebhook`: it holds the webhook's
 * Deployment, whose image and --sidecar-image are pinned to the digest (the build fails if they cannot be).
 */
export const MANIFEST_ASSETS = [
  { file: 'install.yaml', dir: 'manifests', what: 'the webhook with TLS from cert-manager (install cert-manager first)', runsWebhook: true },
  { file: 'install-self-signed.yaml', dir: 'manifests/self-signed', what: 'the webhook managing its own certificates (no cert-manager)', runsWebhook: true },
  { file: 'monitoring.yaml', dir: 'manifests/monitoring', what: 'PodMonitors, alerts and dashboard (needs the Prometheus Operator CRDs)', runsWebhook: false },
] as const;

const DIGEST_FORM = 'sha256:<64 lowercase hex digits>';

/** The digest given to --digest, or an error naming the flag, what is wrong with the value and the form expected. */
export function parseDigest(value: string | undefined): string {
  if (value === undefined) {
    throw new Error(
      `--digest is required: the digest (${DIGEST_FORM}) of the image pushed for this release, which install.yaml runs and injects; release.yml passes the one its build pushed, a reviewer rebuilding takes it from the release notes`,
    );
  }
  const hex = value.slice('sha256:'.length);
  const wrong = value.includes('@')
    ? 'is an image reference: pass only what follows its @'
    : !value.startsWith('sha256:')
      ? 'does not start with sha256:'
      : hex.length !== 64
        ? `has ${hex.length} characters after sha256:, not 64`
        : !/^[0-9a-f]{64}$/.test(hex)
          ? 'has characters other than 0-9 and a-f after sha256:'
          : undefined;
  if (wrong !== undefined) throw new Error(`--digest ${JSON.stringify(value)} ${wrong}; expected ${DIGEST_FORM}, as docker buildx reports the pushed image's`);
  return value;
}

/** The reference a release runs and injects: the tag for people to read, the digest for the runtime to pull. */
export function pinnedImage(version: string, digest: string): string {
  return `${IMAGE_REPOSITORY}:${version}@${digest}`;
}

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

/** `kubectl kustomize DIR` (an absolute path), or an error naming `name` and kubectl's own message. */
function kustomize(dir: string, name: string): string {
  const result = spawnSync('kubectl', ['kustomize', dir], { encoding: 'utf8', timeout: 60_000, maxBuffer: 64 * 1024 * 1024 });
  if (result.error !== undefined) throw new Error(`kubectl kustomize ${name}: ${result.error.message} (the assets are built with kubectl's kustomize)`);
  if (result.status !== 0) throw new Error(`kubectl kustomize ${name} exited with ${String(result.status)}: ${result.stderr.trim()}`);
  return result.stdout;
}

/**
 * The kustomization of `dir` with the project's image pinned: an overlay, written to a temporary directory, whose
 * images transformer rewrites every container's `image:` of the repository to `<repository>:<version>@<digest>`,
 * and whose replacement then copies the webhook container's (rewritten) image into its SHUTDOWN_MANAGER_SIDECAR_IMAGE,
 * which no images transformer touches, being a plain value. A replacement whose target is missing fails the build:
 * if the Deployment stops naming the sidecar image there, no asset injects a tag-only image unnoticed.
 */
function overlayPinning(dir: string, version: string, digest: string, overlay: string): string {
  const webhookImage = 'spec.template.spec.containers.[name=webhook]';
  const deployment = ['      kind: Deployment', '      name: envoy-shutdown-manager'];
  return [
    'apiVersion: kustomize.config.k8s.io/v1beta1',
    'kind: Kustomization',
    'resources:',
    // kustomize takes no absolute path here.
    `  - ${relative(overlay, join(REPO_ROOT, dir))}`,
    'images:',
    `  - name: ${IMAGE_REPOSITORY}`,
    `    newTag: "${version}"`,
    `    digest: ${digest}`,
    'replacements:',
    '  - source:',
    ...deployment,
    `      fieldPath: ${webhookImage}.image`,
    '    targets:',
    '      - select:',
    ...deployment.map((line) => `    ${line}`),
    '        fieldPaths:',
    `          - ${webhookImage}.env.[name=${envName('sidecar-image')}].value`,
    '',
  ].join('\n');
}

function kustomizePinned(dir: string, version: string, digest: string): string {
  const overlay = mkdtempSync(join(tmpdir(), 'release-assets-overlay-'));
  try {
    writeFileSync(join(overlay, 'kustomization.yaml'), overlayPinning(dir, version, digest, overlay));
    return kustomize(overlay, `${dir} (pinned to ${digest})`);
  } finally {
    rmSync(overlay, { recursive: true, force: true });
  }
}

function manifestAsset(version: string, tag: string, digest: string, asset: (typeof MANIFEST_ASSETS)[number]): string {
  const header = [
    `# envoy-shutdown-manager ${version}: ${asset.what}.`,
    asset.runsWebhook
      ? `# Built by npm run release:assets from ${asset.dir}/ at ${tag}: kubectl kustomize ${asset.dir}, the image pinned to ${pinnedImage(version, digest)}.`
      : `# Built by npm run release:assets from ${asset.dir}/ at ${tag} (kubectl kustomize ${asset.dir}).`,
    `#   kubectl apply -f ${downloadUrl(tag, asset.file)}`,
  ];
  const manifests = asset.runsWebhook ? kustomizePinned(asset.dir, version, digest) : kustomize(join(REPO_ROOT, asset.dir), asset.dir);
  return `${header.join('\n')}\n${manifests}`;
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

function releaseNotes(version: string, tag: string, digest: string): string {
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
    `The image: \`${pinnedImage(version, digest)}\`. Both installs run it and inject it into every Envoy pod by this digest, so a tag pushed again changes neither.`,
    `Contour's Envoy, as a kustomize Component: \`${contourComponentUrl(tag)}\`.`,
    `Envoy Gateway's proxies, as a kustomize Component added to the install: \`${envoyGatewayComponentUrl(tag)}\`.`,
    '',
    'Verify the image by that digest (signed keyless by this repository\'s release workflow at this tag, every platform):',
    '',
    '```sh',
    `cosign verify ${pinnedImage(version, digest)} \\`,
    `  --certificate-identity=${signerIdentity(tag)} \\`,
    `  --certificate-oidc-issuer=${OIDC_ISSUER}`,
    '```',
    '',
    `Every asset is listed in SHA256SUMS, signed the same way (SHA256SUMS.sigstore.json); docs/release.md at ${tag} gives every check.`,
    'The assets rebuild byte for byte from the tag and the digest:',
    '',
    '```sh',
    `git checkout ${tag} && npm ci`,
    `npm run release:assets -- --digest ${digest}`,
    '```',
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

/** Builds every asset into `out` (emptied first), the image pinned to `digest` (--digest); returns the file names. */
export function buildReleaseAssets(out: string, digest: string | undefined, tag?: string): string[] {
  const version = packageVersion();
  const releaseTag = tag ?? `v${version}`;
  if (releaseTag !== `v${version}`) throw new Error(`--tag ${releaseTag} is not v${version}, the version in package.json`);
  const imageDigest = parseDigest(digest);
  rmSync(out, { recursive: true, force: true });
  mkdirSync(out, { recursive: true });
  for (const asset of MANIFEST_ASSETS) writeFileSync(join(out, asset.file), manifestAsset(version, releaseTag, imageDigest, asset));
  const lock = readLock();
  writeFileSync(join(out, 'sbom.cdx.json'), `${JSON.stringify(cycloneDx(lock, productionPackages(lock)), null, 2)}\n`);
  writeFileSync(join(out, 'release-notes.md'), releaseNotes(version, releaseTag, imageDigest));
  writeChecksums(out);
  return readdirSync(out).sort();
}

function main(): void {
  const { values } = parseArgs({ options: { out: { type: 'string' }, digest: { type: 'string' }, tag: { type: 'string' } }, strict: true });
  if (values.out === undefined) throw new Error('usage: node --import tsx tools/release-assets.ts --out DIR --digest sha256:<hex> [--tag vX.Y.Z]');
  const out = resolve(values.out);
  const files = buildReleaseAssets(out, values.digest, values.tag);
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
