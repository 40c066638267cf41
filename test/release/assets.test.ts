/**
 * The release assets, built by the command the release workflow runs (tools/release-assets.ts, spawned, as
 * `npm run release:assets` runs it after the build), then checked as a user and a reviewer would check them:
 * exactly the files the workflow attaches; every object of every manifest valid against the Kubernetes schemas
 * (and cert-manager's and the Prometheus Operator's), with no unknown field; install.yaml being what kustomize
 * builds from manifests/; SHA256SUMS matching every file; the release notes being CHANGELOG.md's section of
 * the version with the install commands at the tag. The image pinned by the digest given (--digest): the webhook
 * runs it and injects it (its Deployment's image, and the sidecar image an Envoy pod gets from the injector
 * configured as that Deployment configures it), no tag-only reference of it left; the notes name the digest and
 * the command that rebuilds the same bytes, which it does. Controls: the validator refuses a misspelt field, a
 * wrong type and an unknown kind; a tampered file fails its checksum; a tag other than the package version, a
 * version missing from CHANGELOG.md, a missing or malformed digest are refused with a message naming them.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { parse, parseAllDocuments } from 'yaml';
import { parseWebhookConfig } from '../../src/config/webhook.js';
import { IMAGE_REPOSITORY, PROJECT_VERSION } from '../../src/version.js';
import { injectPod } from '../../src/inject/injector.js';
import { changelogSection, contourComponentUrl, downloadUrl, envoyGatewayComponentUrl, parseDigest } from '../../tools/release-assets.js';
import { kubernetesSchemaProblems } from '../support/kubernetes-schemas.js';
import { REPO_ROOT, runNode } from '../support/process.js';

const TAG = `v${PROJECT_VERSION}`;
const TOOL = join(REPO_ROOT, 'tools', 'release-assets.ts');
const ASSETS = ['SHA256SUMS', 'install-self-signed.yaml', 'install.yaml', 'monitoring.yaml', 'release-notes.md', 'sbom.cdx.json'];
const INSTALLS = ['install.yaml', 'install-self-signed.yaml'];
const DIGEST = `sha256:${'5e1ea5ed'.repeat(8)}`;
const PINNED = `${IMAGE_REPOSITORY}:${PROJECT_VERSION}@${DIGEST}`;
let out: string;

/** The tool as the workflow runs it: with --digest DIGEST unless `args` say otherwise. */
function buildAssets(dir: string, args: readonly string[] = ['--digest', DIGEST]): ReturnType<typeof runNode> {
  return runNode(['--import', 'tsx', TOOL, '--out', dir, ...args], { cwd: REPO_ROOT, timeoutMs: 90_000 });
}

function objectsOf(file: string): unknown[] {
  return parseAllDocuments(readFileSync(join(out, file), 'utf8')).map((document) => {
    assert.deepEqual(document.errors.map(String), [], `${file}: YAML errors`);
    return document.toJS() as unknown;
  });
}

/** The lines of SHA256SUMS that do not match the files beside it (sha256sum -c's verdict). */
function checksumMismatches(dir: string): string[] {
  const lines = readFileSync(join(dir, 'SHA256SUMS'), 'utf8').trimEnd().split('\n');
  return lines.filter((line) => {
    const [hash, file] = line.split('  ');
    return createHash('sha256').update(readFileSync(join(dir, file as string))).digest('hex') !== hash;
  });
}

describe('the release assets, as npm run release:assets builds them', { timeout: 180_000 }, () => {
  before(async () => {
    out = mkdtempSync(join(tmpdir(), 'release-assets-'));
    // A stale file must not be published: the command empties its directory first.
    writeFileSync(join(out, 'stale.yaml'), 'kind: Stale\n');
    const built = await buildAssets(out);
    assert.equal(built.code, 0, `tools/release-assets.ts failed: ${built.stderr}`);
  });
  after(() => rmSync(out, { recursive: true, force: true }));

  test('are exactly the files the release workflow attaches', () => {
    assert.deepEqual(readdirSync(out).sort(), ASSETS);
    const script = (JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts['release:assets'];
    assert.equal(script, 'npm run -s build && node --import tsx tools/release-assets.ts --out dist/release', 'the command this test spawns, after the build');
  });

  for (const file of ASSETS.filter((asset) => asset.endsWith('.yaml'))) {
    test(`${file}: every object is valid against the Kubernetes schemas, no unknown field`, async () => {
      const objects = objectsOf(file);
      assert.ok(objects.length >= 4, `${file} has its objects (${objects.length})`);
      const problems = (await Promise.all(objects.map((object, index) => kubernetesSchemaProblems(object, `${file} document ${index + 1}`)))).flat();
      assert.deepEqual(problems, []);
    });
  }

  test('install.yaml and install-self-signed.yaml are what kubectl kustomize builds from manifests/ (a header aside), the image pinned: the two lines naming it, nothing else', (t) => {
    for (const [file, dir] of [['install.yaml', 'manifests'], ['install-self-signed.yaml', 'manifests/self-signed']] as const) {
      const kustomized = spawnSync('kubectl', ['kustomize', join(REPO_ROOT, dir)], { encoding: 'utf8', timeout: 30_000 });
      if (kustomized.error !== undefined) return t.skip(`kubectl not available: ${kustomized.error.message}`);
      const text = readFileSync(join(out, file), 'utf8');
      const header = text.split('\n').filter((line) => line.startsWith('#')).slice(0, 3);
      const tagOnly = `${IMAGE_REPOSITORY}:${PROJECT_VERSION}\n`;
      assert.equal(kustomized.stdout.split(tagOnly).length - 1, 2, `manifests/ name the image twice: the webhook's image and its sidecar image (${file})`);
      assert.equal(text, `${header.join('\n')}\n${kustomized.stdout.replaceAll(tagOnly, `${PINNED}\n`)}`);
      assert.ok(header.some((line) => line.includes(`kubectl apply -f ${downloadUrl(TAG, file)}`)), `${file} says how to apply it`);
      assert.ok(header.some((line) => line.includes(PINNED)), `${file} says which image it pins`);
    }
    const kinds = objectsOf('install.yaml').map((object) => (object as { kind: string }).kind);
    assert.ok(kinds.includes('MutatingWebhookConfiguration') && kinds.includes('Certificate') && kinds.includes('Deployment'), kinds.join(', '));
    assert.ok(!objectsOf('install-self-signed.yaml').some((object) => (object as { kind: string }).kind === 'Certificate'), 'self-signed needs no cert-manager');
  });

  for (const file of INSTALLS) {
    test(`${file}: the webhook runs the image pinned by the digest, and injects that same reference into an Envoy pod`, () => {
      const deployment = objectsOf(file).find((object) => (object as { kind: string }).kind === 'Deployment') as {
        spec: { template: { spec: { containers: { name: string; image: string; args?: string[]; env?: { name: string; value?: string }[] }[] } } };
      };
      const webhook = deployment.spec.template.spec.containers.find((container) => container.name === 'webhook');
      assert.ok(webhook, 'the webhook container');
      assert.equal(webhook.image, PINNED);
      // The webhook's configuration as it starts in that container: its flags, then its literal variables.
      const args = (webhook.args ?? []).filter((arg) => !arg.startsWith('mode='));
      const env = Object.fromEntries((webhook.env ?? []).flatMap((variable) => (variable.value === undefined ? [] : [[variable.name, variable.value]])));
      const config = parseWebhookConfig(args, env);
      const envoyPod = {
        metadata: { name: 'envoy', namespace: 'edge', labels: { app: 'envoy' } },
        spec: { containers: [{ name: 'envoy', image: 'envoyproxy/envoy:v1.31.2', args: ['-c', '/etc/envoy/envoy.yaml', '--admin-address-path', '/tmp/admin'] }] },
      };
      const outcome = injectPod(envoyPod, config.injection, 'token');
      assert.equal(outcome.action, 'inject', JSON.stringify(outcome));
      const containers = outcome.action === 'inject' ? [...(outcome.pod.spec?.containers ?? []), ...(outcome.pod.spec?.initContainers ?? [])] : [];
      assert.equal(containers.find((container) => container.name === 'shutdown-manager')?.image, PINNED);
    });
  }

  test('no asset names the image by tag only: every reference to its repository carries the digest', () => {
    // The notes open with CHANGELOG.md's section, prose written before any digest existed; what follows is how to
    // install and verify, which must pin.
    const section = changelogSection(readFileSync(join(REPO_ROOT, 'CHANGELOG.md'), 'utf8'), PROJECT_VERSION);
    const instructions = (file: string): string => readFileSync(join(out, file), 'utf8').slice(file === 'release-notes.md' ? section.length : 0);
    for (const file of ASSETS.filter((asset) => asset !== 'SHA256SUMS')) {
      // The repository, then its tag and digest if any (a reference's grammar: a sentence's full stop is not in it).
      const reference = new RegExp(`${IMAGE_REPOSITORY.replaceAll('.', '\\.')}(?::[\\w.-]+)?(?:@sha256:[0-9a-f]+)?`, 'g');
      const references = instructions(file).match(reference) ?? [];
      const unpinned = references.filter((found) => found !== PINNED);
      assert.deepEqual(unpinned, [], file);
      if (INSTALLS.includes(file)) assert.ok(references.length >= 3, `${file}: its header, the image and the sidecar image (${references.length})`);
      if (file === 'release-notes.md') assert.ok(references.length >= 2, `the notes name the image and verify it (${references.length})`);
    }
  });

  test("docs/release.md's command that reads the digest out of install.yaml reads this one", (t) => {
    const line = readFileSync(join(REPO_ROOT, 'docs', 'release.md'), 'utf8').split('\n').find((candidate) => candidate.startsWith('digest=$('));
    assert.ok(line, 'docs/release.md reads the digest out of install.yaml');
    const read = spawnSync('bash', ['-c', `${line}\nprintf %s "$digest"`], { cwd: out, encoding: 'utf8', timeout: 10_000 });
    if (read.error !== undefined) return t.skip(`bash not available: ${read.error.message}`);
    assert.equal(read.stdout, DIGEST, read.stderr);
  });

  test('rebuilt with the same digest, every asset is byte for byte the same; with another digest, only what names it differs', async () => {
    const again = mkdtempSync(join(tmpdir(), 'release-assets-again-'));
    try {
      assert.equal((await buildAssets(again)).code, 0);
      assert.equal(readFileSync(join(again, 'SHA256SUMS'), 'utf8'), readFileSync(join(out, 'SHA256SUMS'), 'utf8'));
      const other = `sha256:${'0'.repeat(64)}`;
      assert.equal((await buildAssets(again, ['--digest', other])).code, 0);
      const changed = ASSETS.filter((file) => readFileSync(join(again, file), 'utf8') !== readFileSync(join(out, file), 'utf8'));
      assert.deepEqual(changed, ['SHA256SUMS', 'install-self-signed.yaml', 'install.yaml', 'release-notes.md']);
      assert.ok(readFileSync(join(again, 'install.yaml'), 'utf8').includes(`${IMAGE_REPOSITORY}:${PROJECT_VERSION}@${other}\n`), 'the other digest pinned');
    } finally {
      rmSync(again, { recursive: true, force: true });
    }
  });

  test('SHA256SUMS lists every other asset, each hash right; control: a tampered file fails', () => {
    const listed = readFileSync(join(out, 'SHA256SUMS'), 'utf8').trimEnd().split('\n').map((line) => line.split('  ')[1]);
    assert.deepEqual(listed, ASSETS.filter((asset) => asset !== 'SHA256SUMS'));
    assert.deepEqual(checksumMismatches(out), []);
    const copy = mkdtempSync(join(tmpdir(), 'release-assets-tampered-'));
    try {
      for (const file of ASSETS) writeFileSync(join(copy, file), readFileSync(join(out, file)));
      writeFileSync(join(copy, 'install.yaml'), `${readFileSync(join(copy, 'install.yaml'), 'utf8')}# tampered\n`);
      assert.equal(checksumMismatches(copy).length, 1);
      assert.match(checksumMismatches(copy)[0] as string, / {2}install\.yaml$/);
    } finally {
      rmSync(copy, { recursive: true, force: true });
    }
  });

  test("release-notes.md is CHANGELOG.md's section of the version, then the install at the tag", () => {
    const notes = readFileSync(join(out, 'release-notes.md'), 'utf8');
    const section = changelogSection(readFileSync(join(REPO_ROOT, 'CHANGELOG.md'), 'utf8'), PROJECT_VERSION);
    assert.ok(section.length > 200, 'the section says what the release holds');
    assert.ok(notes.startsWith(`${section}\n\n## Install\n`), 'the notes open with the section, verbatim');
    assert.ok(notes.includes(`kubectl apply -f ${downloadUrl(TAG, 'install.yaml')}`), 'the notes apply install.yaml at the tag');
    assert.ok(notes.includes(downloadUrl(TAG, 'install-self-signed.yaml')), 'the notes link install-self-signed.yaml at the tag');
    assert.ok(notes.includes(contourComponentUrl(TAG)), 'the notes link the Contour Component at the tag');
    assert.ok(notes.includes(`--certificate-identity=https://github.com/envoy-shutdown-manager/envoy-shutdown-manager/.github/workflows/release.yml@refs/tags/${TAG} \\\n`), 'the cosign check names this workflow at the tag');
    assert.ok(notes.includes('--certificate-oidc-issuer=https://token.actions.githubusercontent.com\n'), 'the cosign check pins the GitHub OIDC issuer');
    assert.equal(contourComponentUrl(TAG), `github.com/envoy-shutdown-manager/envoy-shutdown-manager//manifests/contour?ref=${TAG}`);
    assert.ok(notes.includes(envoyGatewayComponentUrl(TAG)), 'the notes link the Envoy Gateway Component at the tag');
    assert.ok(notes.includes(`The image: \`${PINNED}\`.`), 'the notes name the image by its digest');
    assert.ok(notes.includes(`cosign verify ${PINNED} \\\n`), 'the cosign check is of that digest');
    assert.ok(notes.includes(`\`\`\`sh\ngit checkout ${TAG} && npm ci\nnpm run release:assets -- --digest ${DIGEST}\n\`\`\``), 'the command that rebuilds these bytes');
    assert.equal(envoyGatewayComponentUrl(TAG), `github.com/envoy-shutdown-manager/envoy-shutdown-manager//manifests/envoy-gateway?ref=${TAG}`);
  });

  test('sbom.cdx.json is the CycloneDX SBOM the image ships (same generator, same bytes)', () => {
    const sbom = JSON.parse(readFileSync(join(out, 'sbom.cdx.json'), 'utf8')) as { bomFormat: string; components: unknown[] };
    assert.equal(sbom.bomFormat, 'CycloneDX');
    assert.ok(sbom.components.length > 50, `the SBOM lists the dependencies: ${sbom.components.length}`);
    // npm run build writes the image's copy (dist/licenses); the release's must be byte for byte the same.
    assert.equal(readFileSync(join(out, 'sbom.cdx.json'), 'utf8'), readFileSync(join(REPO_ROOT, 'dist', 'licenses', 'sbom.cdx.json'), 'utf8'));
  });
});

describe('release-assets refusals', { timeout: 120_000 }, () => {
  test('a tag other than v<package version> is refused, naming both; nothing is built', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'release-assets-tag-'));
    try {
      const built = await buildAssets(dir, ['--digest', DIGEST, '--tag', 'v9.9.9']);
      assert.equal(built.code, 1);
      assert.match(built.stderr, new RegExp(`--tag v9\\.9\\.9 is not v${PROJECT_VERSION.replaceAll('.', '\\.')}, the version in package\\.json`));
      assert.deepEqual(readdirSync(dir), []);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('without --digest, or with a malformed one, nothing is built, and the message names the flag and what is wrong', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'release-assets-digest-'));
    try {
      const missing = await buildAssets(dir, []);
      assert.equal(missing.code, 1);
      assert.match(missing.stderr, /^tools\/release-assets\.ts: --digest is required: the digest \(sha256:<64 lowercase hex digits>\) of the image pushed for this release/);
      const malformed = await buildAssets(dir, ['--digest', 'sha256:abc']);
      assert.equal(malformed.code, 1);
      assert.match(malformed.stderr, /--digest "sha256:abc" has 3 characters after sha256:, not 64; expected sha256:<64 lowercase hex digits>/);
      assert.deepEqual(readdirSync(dir), []);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('a digest is sha256: and 64 lowercase hex digits; each other form is refused saying why', () => {
    assert.equal(parseDigest(DIGEST), DIGEST);
    const hex = DIGEST.slice('sha256:'.length);
    const refusals: [string, RegExp][] = [
      [hex, /does not start with sha256:/],
      [DIGEST.toUpperCase(), /does not start with sha256:/],
      [`sha256:${hex.toUpperCase()}`, /has characters other than 0-9 and a-f after sha256:/],
      [`sha256:${hex.slice(1)}g`, /has characters other than 0-9 and a-f after sha256:/],
      [`${DIGEST}0`, /has 65 characters after sha256:, not 64/],
      [`sha512:${hex}${hex}`, /does not start with sha256:/],
      [`${IMAGE_REPOSITORY}@${DIGEST}`, /is an image reference: pass only what follows its @/],
      ['', /--digest "" does not start with sha256:/],
    ];
    for (const [value, message] of refusals) assert.throws(() => parseDigest(value), message, value);
  });

  test('a version without its CHANGELOG.md section has no release notes', () => {
    const changelog = '# Changelog\n\n## 0.2.0\n\nLater.\n\n## 0.1.0\n\nFirst.\n';
    assert.equal(changelogSection(changelog, '0.1.0'), 'First.');
    assert.equal(changelogSection(changelog, '0.2.0'), 'Later.');
    assert.throws(() => changelogSection(changelog, '0.1.1'), /CHANGELOG\.md has no section "## 0\.1\.1"/);
    assert.throws(() => changelogSection('## 0.1.0\n\n## 0.0.9\nx\n', '0.1.0'), /section "## 0\.1\.0" is empty/);
    assert.throws(() => changelogSection('## 0.1.0x\nx\n', '0.1.0'), /no section/, 'a version is matched whole');
  });
});

describe('the schema check itself (controls)', { timeout: 30_000 }, () => {
  const deployment = (): Record<string, unknown> =>
    parse(
      'apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d, namespace: n}\nspec:\n  selector: {matchLabels: {app: a}}\n  template:\n    metadata: {labels: {app: a}}\n    spec:\n      containers:\n        - {name: c, image: i, ports: [{containerPort: 80}]}\n',
    ) as Record<string, unknown>;

  test('a valid Deployment passes', async () => {
    assert.deepEqual(await kubernetesSchemaProblems(deployment(), 'd'), []);
  });

  test('a misspelt field, a wrong type, a missing required field, an unknown kind and a bad CRD object are refused', async () => {
    const misspelt = deployment();
    (misspelt as { spec: { template: { spec: { containers: Record<string, unknown>[] } } } }).spec.template.spec.containers[0]!['imagePullPolicyy'] = 'Always';
    assert.match((await kubernetesSchemaProblems(misspelt, 'd')).join('\n'), /spec\.template\.spec\.containers\[0\]\.imagePullPolicyy: unknown field/);
    const wrongType = deployment();
    (wrongType as { spec: Record<string, unknown> }).spec['replicas'] = 'two';
    assert.match((await kubernetesSchemaProblems(wrongType, 'd')).join('\n'), /replicas must be integer/);
    const noSelector = deployment();
    delete (noSelector as { spec: Record<string, unknown> }).spec['selector'];
    assert.match((await kubernetesSchemaProblems(noSelector, 'd')).join('\n'), /selector/);
    assert.match((await kubernetesSchemaProblems({ apiVersion: 'apps/v1', kind: 'Deploymnet', metadata: { name: 'x' } }, 'k')).join('\n'), /no schema for apps\/v1 Deploymnet/);
    const certificate = { apiVersion: 'cert-manager.io/v1', kind: 'Certificate', metadata: { name: 'c' }, spec: { secretName: 's', issuerRef: { name: 'i' }, duration: 90 } };
    assert.match((await kubernetesSchemaProblems(certificate, 'c')).join('\n'), /duration must be string/);
  });
});
