/**
 * docs/release.md, held to what the release does: every asset that tools/release-assets.ts builds and the
 * workflow attaches is listed; every cosign check accepts only this repository's release workflow at the tag
 * of the package version, from GitHub's OIDC issuer (no regular expression that any workflow of the
 * organisation would match); the command it tells reviewers to run is the one the workflow runs.
 * SECURITY.md, LICENSE and CHANGELOG.md exist and say what they must.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { IMAGE_REPOSITORY, PROJECT_VERSION } from '../../src/version.js';
import { MANIFEST_ASSETS, changelogSection, contourComponentUrl } from '../../tools/release-assets.js';
import { REPO_ROOT } from '../support/process.js';

const TAG = `v${PROJECT_VERSION}`;
const IDENTITY = `https://github.com/envoy-shutdown-manager/envoy-shutdown-manager/.github/workflows/release.yml@refs/tags/${TAG}`;
const ISSUER = 'https://token.actions.githubusercontent.com';
const doc = readFileSync(join(REPO_ROOT, 'docs', 'release.md'), 'utf8');

/** Each cosign command of a text (continuations joined), and the problems of its signer checks. */
function cosignProblems(text: string): { commands: string[]; problems: string[] } {
  const commands = text
    .replace(/\\\n\s*/g, ' ')
    .split('\n')
    // Commands start a line of a code block; a mention in prose is inline.
    .filter((line) => /^\s*cosign verify/.test(line));
  const problems = commands.flatMap((command) => {
    const found: string[] = [];
    if (/--certificate-identity-regexp|--certificate-oidc-issuer-regexp/.test(command)) found.push(`a regular expression accepts other signers: ${command}`);
    if (!command.includes(`--certificate-identity=${IDENTITY}`)) found.push(`not this workflow at ${TAG}: ${command}`);
    if (!command.includes(`--certificate-oidc-issuer=${ISSUER}`)) found.push(`not GitHub's OIDC issuer: ${command}`);
    return found;
  });
  return { commands, problems };
}

describe('docs/release.md', { timeout: 10_000 }, () => {
  test('lists every asset the release attaches, and the Contour Component at the tag', () => {
    const assets = [...MANIFEST_ASSETS.map((asset) => asset.file), 'sbom.cdx.json', 'release-notes.md', 'SHA256SUMS', 'SHA256SUMS.sigstore.json'];
    for (const asset of assets) assert.ok(doc.includes(`| \`${asset}\` |`), `the table lists ${asset}`);
    for (const asset of MANIFEST_ASSETS) assert.ok(doc.includes(`kubectl kustomize ${asset.dir}`), `${asset.file} says what it is built from`);
    assert.ok(doc.includes(contourComponentUrl(TAG)), 'the doc links the Contour Component at the tag');
    const workflow = readFileSync(join(REPO_ROOT, '.github', 'workflows', 'release.yml'), 'utf8');
    assert.ok(workflow.includes('--bundle dist/release/SHA256SUMS.sigstore.json'), 'the workflow writes the signature the doc lists');
  });

  test("every cosign check names this repository's release workflow at the tag; control: an organisation-wide regexp is refused", () => {
    const { commands, problems } = cosignProblems(doc);
    assert.equal(commands.length, 3, `verify, verify-attestation and verify-blob: ${commands.join('\n')}`);
    assert.deepEqual(problems, []);
    const loose = 'cosign verify IMAGE --certificate-identity-regexp=https://github.com/envoy-shutdown-manager/ --certificate-oidc-issuer=https://token.actions.githubusercontent.com\n';
    assert.ok(cosignProblems(loose).problems.length >= 2, 'the loose regexp is flagged in each check');
    const otherTag = `cosign verify IMAGE --certificate-identity=${IDENTITY.replace(TAG, 'v0.0.0-other')} --certificate-oidc-issuer=${ISSUER}\n`;
    assert.equal(cosignProblems(otherTag).problems.length, 1, 'another tag');
  });

  test('verifies the image by the digest install.yaml pins, and compares the tag with it', () => {
    assert.ok(doc.includes(`cosign verify ${IMAGE_REPOSITORY}:${PROJECT_VERSION}@"$digest" \\\n`), 'cosign verify of the digest');
    assert.ok(doc.includes(`cosign verify-attestation --type cyclonedx ${IMAGE_REPOSITORY}:${PROJECT_VERSION}@"$digest" \\\n`), 'the attestation of the same digest');
    assert.ok(doc.includes(`crane digest ${IMAGE_REPOSITORY}:${PROJECT_VERSION}\n`), 'what the tag names now');
  });

  test('tells reviewers to run the command the workflow runs, and the image paths the Dockerfile ships', () => {
    assert.ok(doc.includes('npm run release:assets -- --digest sha256:'), 'with the digest, as the workflow runs it');
    assert.match(readFileSync(join(REPO_ROOT, '.github', 'workflows', 'release.yml'), 'utf8'), /run: npm run release:assets -- --digest "\$\{DIGEST\}"\n/);
    const dockerfile = readFileSync(join(REPO_ROOT, 'Dockerfile'), 'utf8');
    assert.match(dockerfile, /COPY --from=build \/app\/dist\/licenses \/licenses\n/);
    for (const file of ['/licenses/sbom.cdx.json', '/licenses/THIRD_PARTY_NOTICES', '/licenses/LICENSE']) assert.ok(doc.includes(file), file);
  });
});

describe('the project files a release needs', { timeout: 10_000 }, () => {
  test('LICENSE is the Apache License 2.0 that package.json names; SECURITY.md says how to report privately', () => {
    assert.match(readFileSync(join(REPO_ROOT, 'LICENSE'), 'utf8'), /Apache License\s+Version 2\.0, January 2004[\s\S]*END OF TERMS AND CONDITIONS/);
    const security = readFileSync(join(REPO_ROOT, 'SECURITY.md'), 'utf8');
    assert.match(security, /security\/advisories\/new/);
    assert.match(security, /docs\/release\.md/);
  });

  test("CHANGELOG.md has the package version's section", () => {
    const section = changelogSection(readFileSync(join(REPO_ROOT, 'CHANGELOG.md'), 'utf8'), PROJECT_VERSION);
    assert.match(section, /install\.yaml/);
  });
});
