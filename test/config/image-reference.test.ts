/**
 * Image references with and without a digest, as a release writes them (`repo:0.1.0@sha256:…`) and as users
 * write theirs: the parser, the comparison `check` makes, and the readers of Envoy's image (its release, and
 * whether it is Envoy's image at all), none of which may take a digest's `:` or a registry's port for a tag.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { parseImageReference, sameImage } from '../../src/config/image-reference.js';
import { parseWebhookConfig } from '../../src/config/webhook.js';
import { decideEnvoyDrainFlags, imageRelease } from '../../src/inject/envoy-drain-flags.js';

const DIGEST = `sha256:${'0123456789abcdef'.repeat(4)}`;
const OTHER_DIGEST = `sha256:${'fedcba9876543210'.repeat(4)}`;
const REPO = 'ghcr.io/envoy-shutdown-manager/envoy-shutdown-manager';

describe('parseImageReference', () => {
  const cases: [string, string, string | undefined, string | undefined][] = [
    [`${REPO}:0.1.0`, REPO, '0.1.0', undefined],
    [`${REPO}@${DIGEST}`, REPO, undefined, DIGEST],
    [`${REPO}:0.1.0@${DIGEST}`, REPO, '0.1.0', DIGEST],
    ['envoy', 'envoy', undefined, undefined],
    ['localhost:5000/envoy', 'localhost:5000/envoy', undefined, undefined],
    ['localhost:5000/proxy/envoy:v1.31.2', 'localhost:5000/proxy/envoy', 'v1.31.2', undefined],
    [`localhost:5000/envoy@${DIGEST}`, 'localhost:5000/envoy', undefined, DIGEST],
    [`localhost:5000/envoy:v1.31.2@${DIGEST}`, 'localhost:5000/envoy', 'v1.31.2', DIGEST],
  ];
  for (const [reference, repository, tag, digest] of cases) {
    test(reference, () => assert.deepEqual(parseImageReference(reference), { repository, tag, digest }));
  }
});

describe('sameImage', () => {
  test('pinned references are the same image when their digests are, whatever the tags say', () => {
    assert.ok(sameImage(`${REPO}:0.1.0@${DIGEST}`, `${REPO}@${DIGEST}`), 'a tag beside the digest changes nothing');
    assert.ok(sameImage(`${REPO}:0.1.0@${DIGEST}`, `${REPO}:0.1.0@${DIGEST}`), 'the same reference');
    assert.ok(!sameImage(`${REPO}:0.1.0@${DIGEST}`, `${REPO}:0.1.0@${OTHER_DIGEST}`), 'the same tag, pushed again');
    assert.ok(!sameImage(`${REPO}@${DIGEST}`, `mirror.local/envoy-shutdown-manager@${DIGEST}`), 'another repository');
  });

  test('a pinned and a tag-only reference are not the same (the tag may have moved); tags compare, none meaning latest', () => {
    assert.ok(!sameImage(`${REPO}:0.1.0`, `${REPO}:0.1.0@${DIGEST}`), 'tag-only against pinned: the tag may have moved');
    assert.ok(sameImage(`${REPO}:0.1.0`, `${REPO}:0.1.0`), 'the same tag');
    assert.ok(!sameImage(`${REPO}:0.0.9`, `${REPO}:0.1.0`), 'another tag');
    assert.ok(sameImage('envoy', 'envoy:latest'), 'no tag means latest');
    assert.ok(!sameImage('localhost:5000/envoy', 'localhost:5001/envoy'), 'a port is part of the repository');
  });
});

describe("Envoy's image read through a digest", () => {
  test("imageRelease reads the tag beside a digest, and nothing from a digest alone or a registry's port", () => {
    assert.deepEqual(imageRelease(`envoyproxy/envoy:v1.31.2@${DIGEST}`), imageRelease('envoyproxy/envoy:v1.31.2'));
    assert.notEqual(imageRelease('envoyproxy/envoy:v1.31.2'), null, 'control: a release tag is read');
    assert.equal(imageRelease(`envoyproxy/envoy@${DIGEST}`), null);
    assert.equal(imageRelease('localhost:5000/envoy'), null);
    assert.deepEqual(imageRelease('localhost:5000/envoy:distroless-v1.28.7'), imageRelease('envoyproxy/envoy:distroless-v1.28.7'));
  });

  test("an args-only container of Envoy's image pinned by digest gets the drain flags; another image does not", () => {
    const plan = parseWebhookConfig([], {}).injection.defaults;
    const argsOnly = (image: string): string => decideEnvoyDrainFlags({ name: 'proxy', image, args: ['--config-path', '/e.yaml'] }, plan).action;
    assert.equal(argsOnly(`envoyproxy/envoy@${DIGEST}`), 'add');
    assert.equal(argsOnly(`localhost:5000/envoyproxy/envoy-distroless:v1.31.2@${DIGEST}`), 'add');
    assert.equal(argsOnly(`registry.local/edge/proxy@${DIGEST}`), 'keep');
    assert.equal(argsOnly('envoy.local:5000/edge/proxy:3'), 'keep', "a registry's name is not the image's");
  });
});
