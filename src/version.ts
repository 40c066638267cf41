/**
 * This project's version and where its image is pushed (Envoy's versions are src/envoy/version.ts'). A module of
 * its own, imported by the webhook's settings (the default sidecar image), the injector (the status annotation),
 * check, --version and the release tools; never by the sidecar, whose bundle leaves --version to main.js
 * (test/architecture.test.ts). test/release/release.test.ts holds the version to package.json's.
 */
export const PROJECT_VERSION = '0.1.0';
/**
 * Where the release workflow (.github/workflows/release.yml) pushes the image, tagged with the version. The release
 * assets pin it by the pushed digest (tools/release-assets.ts); the default below is tag-only, no digest being known
 * when this is built.
 */
export const IMAGE_REPOSITORY = 'ghcr.io/envoy-shutdown-manager/envoy-shutdown-manager';
export const DEFAULT_SIDECAR_IMAGE = `${IMAGE_REPOSITORY}:${PROJECT_VERSION}`;
