/**
 * src/version.ts: the project's version and the default sidecar image. test/release/release.test.ts holds the
 * version to package.json's and the image to what the release workflow pushes; here, the contract between the
 * three constants and the image-reference parser the webhook reads the image with.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { parseImageReference } from '../src/config/image-reference.js';
import { WEBHOOK_SETTINGS } from '../src/config/webhook.js';
import { DEFAULT_SIDECAR_IMAGE, IMAGE_REPOSITORY, PROJECT_VERSION } from '../src/version.js';
import { REPO_ROOT } from './support/process.js';

test("the version is package.json's, a plain semver release", () => {
  const packageJson = JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8')) as { version: string };
  assert.equal(PROJECT_VERSION, packageJson.version);
  assert.match(PROJECT_VERSION, /^\d+\.\d+\.\d+$/, 'major.minor.patch, no v prefix');
});

test('the default sidecar image is the repository at the version, tag-only, and the webhook defaults to it', () => {
  const reference = parseImageReference(DEFAULT_SIDECAR_IMAGE);
  assert.deepEqual([reference.repository, reference.tag, reference.digest], [IMAGE_REPOSITORY, PROJECT_VERSION, undefined]);
  assert.match(IMAGE_REPOSITORY, /^ghcr\.io\/[a-z0-9-]+\/envoy-shutdown-manager$/, 'a lowercase GHCR repository, without tag');
  assert.equal(WEBHOOK_SETTINGS['sidecar-image'].default, DEFAULT_SIDECAR_IMAGE);
});
