/**
 * The release assets, built by the command the release workflow runs (tools/release-assets.ts, spawned, as
 * `npm run release:assets` runs it after the build), then checked as a user and a reviewer would check them:
 * exactly the files the workflow attaches; every object of every manifest valid against the Kubernetes schemas
 * (and cert-manager's and the Prometheus Operator's), with no unknown field; install.yaml being what kustomize
 * builds from manifests/; SHA256SUMS matching every file; the release notes being CHANGELOG.md's section of
 * the version with the install commands at the tag. Controls: the validator refuses a misspelt field, a wrong
 * type and an unknown kind; a tampered file fails its checksum; a tag other than the package version and a
 * version missing from CHANGELOG.md are refused with a message naming them.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { parse, parseAllDocuments } from 'yaml';
import { PROJECT_VERSION } from '../../src/config/webhook.js';
import { changelogSection, contourComponentUrl, downloadUrl, envoyGatewayComponentUrl } from '../../tools/release-assets.js';
import { kubernetesSchemaProblems } from '../support/kubernetes-schemas.js';
import { REPO_ROOT, runNode } from '../support/process.js';

const TAG = `v${PROJECT_VERSION}`;
const TOOL = join(REPO_ROOT, 'tools', 'release-assets.ts');
const ASSETS = ['SHA256SUMS', 'install-self-signed.yaml', 'install.yaml', 'monitoring.yaml', 'release-notes.md', 'sbom.cdx.json'];
let out: string;

function buildAssets(dir: string, extra: readonly string[] = []): ReturnType<typeof runNode> {
  return runNode(['--import', 'tsx', TOOL, '--out', dir, ...extra], { cwd: REPO_ROOT, timeoutMs: 90_000 });
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

  test('install.yaml and install-self-signed.yaml are what kubectl kustomize builds from manifests/ (a header aside)', (t) => {
    for (const [file, dir] of [['install.yaml', 'manifests'], ['install-self-signed.yaml', 'manifests/self-signed']] as const) {
      const kustomized = spawnSync('kubectl', ['kustomize', join(REPO_ROOT, dir)], { encoding: 'utf8', timeout: 30_000 });
      if (kustomized.error !== undefined) return t.skip(`kubectl not available: ${kustomized.error.message}`);
      const text = readFileSync(join(out, file), 'utf8');
      const header = text.split('\n').filter((line) => line.startsWith('#')).slice(0, 3);
      assert.equal(text, `${header.join('\n')}\n${kustomized.stdout}`);
      assert.ok(header.some((line) => line.includes(`kubectl apply -f ${downloadUrl(TAG, file)}`)), `${file} says how to apply it`);
    }
    const kinds = objectsOf('install.yaml').map((object) => (object as { kind: string }).kind);
    assert.ok(kinds.includes('MutatingWebhookConfiguration') && kinds.includes('Certificate') && kinds.includes('Deployment'), kinds.join(', '));
    assert.ok(!objectsOf('install-self-signed.yaml').some((object) => (object as { kind: string }).kind === 'Certificate'), 'self-signed needs no cert-manager');
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
      assert.match(checksumMismatches(copy)[0] as string, /  install\.yaml$/);
    } finally {
      rmSync(copy, { recursive: true, force: true });
    }
  });

  test("release-notes.md is CHANGELOG.md's section of the version, then the install at the tag", () => {
    const notes = readFileSync(join(out, 'release-notes.md'), 'utf8');
    const section = changelogSection(readFileSync(join(REPO_ROOT, 'CHANGELOG.md'), 'utf8'), PROJECT_VERSION);
    assert.ok(section.length > 200, 'the section says what the release holds');
    assert.ok(notes.startsWith(`${section}\n\n## Install\n`), 'the notes open with the section, verbatim');
    assert.ok(notes.includes(`kubectl apply -f ${downloadUrl(TAG, 'install.yaml')}`), "notes.includes(`kubectl apply -f ${downloadUrl(TAG, 'install.yaml')}`)");
    assert.ok(notes.includes(downloadUrl(TAG, 'install-self-signed.yaml')), "notes.includes(downloadUrl(TAG, 'install-self-signed.yaml'))");
    assert.ok(notes.includes(contourComponentUrl(TAG)), 'notes.includes(contourComponentUrl(TAG))');
    assert.ok(notes.includes(`--certificate-identity=https://github.com/envoy-shutdown-manager/envoy-shutdown-manager/.github/workflows/release.yml@refs/tags/${TAG} \\\n`), 'the cosign check names this workflow at the tag');
    assert.ok(notes.includes('--certificate-oidc-issuer=https://token.actions.githubusercontent.com\n'), 'notes.includes(\'--certificate-oidc-issuer=https://token.actions.githubusercontent.com\\n\')');
    assert.equal(contourComponentUrl(TAG), `github.com/envoy-shutdown-manager/envoy-shutdown-manager//manifests/contour?ref=${TAG}`);
    assert.ok(notes.includes(envoyGatewayComponentUrl(TAG)), 'notes.includes(envoyGatewayComponentUrl(TAG))');
    assert.equal(envoyGatewayComponentUrl(TAG), `github.com/envoy-shutdown-manager/envoy-shutdown-manager//manifests/envoy-gateway?ref=${TAG}`);
  });

  test('sbom.cdx.json is the CycloneDX SBOM the image ships (same generator, same bytes)', () => {
    const sbom = JSON.parse(readFileSync(join(out, 'sbom.cdx.json'), 'utf8')) as { bomFormat: string; components: unknown[] };
    assert.equal(sbom.bomFormat, 'CycloneDX');
    assert.ok(sbom.components.length > 50, 'sbom.components.length > 50');
    // npm run build writes the image's copy (dist/licenses); the release's must be byte for byte the same.
    assert.equal(readFileSync(join(out, 'sbom.cdx.json'), 'utf8'), readFileSync(join(REPO_ROOT, 'dist', 'licenses', 'sbom.cdx.json'), 'utf8'));
  });
});

describe('release-assets refusals', { timeout: 120_000 }, () => {
  test('a tag other than v<package version> is refused, naming both; nothing is built', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'release-assets-tag-'));
    try {
      const built = await buildAssets(dir, ['--tag', 'v9.9.9']);
      assert.equal(built.code, 1);
      assert.match(built.stderr, new RegExp(`--tag v9\\.9\\.9 is not v${PROJECT_VERSION.replaceAll('.', '\\.')}, the version in package\\.json`));
      assert.deepEqual(readdirSync(dir), []);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
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
