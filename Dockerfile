# syntax=docker/dockerfile:1
#
# One image, two modes (see src/entry.cts and src/main.ts): the admission webhook by default, and the drain server that
# the webhook injects next to Envoy when started with the argument `mode=sidecar`.
#
# Base images, chosen on figures (linux/amd64 compressed sizes; CVE counts from Grype 0.118.0, Sep 2026):
#   node:24.21.0-bookworm-slim                80.8 MB   240 findings, 66 high or critical   glibc, bash, apt, npm, yarn
#   node:24.21.0-alpine                       58.6 MB    32 findings, 22 high or critical   musl, busybox, apk, npm
#   gcr.io/distroless/nodejs24-debian13       ~50 MB    (nodejs24-debian12: 73 findings, 31 high or critical)
#                                                       glibc, libstdc++, libssl, CA certificates, /nodejs/bin/node, nothing else
# The runtime needs the node binary and nothing else: no shell, no package manager, no native addon (every
# mode is bundled). Distroless has exactly that, with glibc like the official builds the tests run on, for
# amd64 and arm64, and its :nonroot tag already runs as 65532. 44.6 MB of its ~50 are the node binary itself
# (gzip of Node 24.21.0's linux-x64 binary, measured); the slim image adds 28 MB of Debian and npm on top, and
# every CVE report against them. The Debian 12 distroless images are no longer built (since Feb 2026).
# Debugging a sidecar without a shell: `kubectl debug -it POD --image=busybox --target=shutdown-manager`.
# The build stage only runs npm, tsc and esbuild, whose output runs anywhere: it runs on the builder's own
# platform ($BUILDPLATFORM), not under emulation, for both architectures.
# Both are pinned by their multi-architecture index digests (sizes from docker-library/repo-info; refresh with
# `docker buildx imagetools inspect IMAGE:TAG`, or let Dependabot do it: .github/dependabot.yml).

# --- build: compile TypeScript with the full dependency tree -------------------------------------
FROM --platform=$BUILDPLATFORM node:24.21.0-trixie-slim@sha256:8ec5d7557396cfe32d21c3f9c13072355ceab22b584578ca4bb28af31120cffe AS build
WORKDIR /app
COPY package.json package-lock.json ./
# No dependency needs an install script; refusing them all narrows what a compromised package can do.
RUN --mount=type=cache,target=/root/.npm npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
# npm run build also writes dist/licenses (tools/sbom.ts): the CycloneDX SBOM of the npm packages it bundles,
# from the lock file just installed, their licence texts read from node_modules, and LICENSE.
COPY LICENSE ./
COPY tools/sbom.ts ./tools/
COPY src ./src
COPY tools/bundle.mjs tools/build-notice.mjs ./tools/
RUN npm run build

# --- runtime -------------------------------------------------------------------------------------
FROM gcr.io/distroless/nodejs24-debian13:nonroot@sha256:9eeb7f5887d0e239e78264b06f7f11d2e14be534050481803a9e4728fcdd278e AS runtime
# The release passes the package version and the commit (.github/workflows/release.yml); a local build says dev.
ARG VERSION=dev
ARG REVISION=unknown
# OCI labels: where the image comes from and under which licence, for registries and scanners (GHCR links the
# package to the repository by image.source).
LABEL org.opencontainers.image.title="envoy-shutdown-manager" \
      org.opencontainers.image.description="Kubernetes mutating webhook that injects a connection-draining shutdown-manager sidecar into Envoy pods, and the drain server itself" \
      org.opencontainers.image.source="https://github.com/envoy-shutdown-manager/envoy-shutdown-manager" \
      org.opencontainers.image.url="https://github.com/envoy-shutdown-manager/envoy-shutdown-manager" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
WORKDIR /app
ENV NODE_ENV=production
# The webhook's young generation, capped at 2 MiB a semi-space (V8's default grows to 32 MiB on Node 24): measured by
# bench/webhook-memory.ts on Node 24.21 (3 runs), its peak under a burst of 50 keep-alive connections fell from
# 142-174 MiB to 115-125 MiB, and at 1,000 reviews a second from 108-111 to 98-105 MiB, at the same CPU per
# review and p99. (A 1 MiB cap did worse under the burst, 139-166 MiB: more survives into the old generation.)
# The injected sidecar's container sets NODE_OPTIONS of its own (SIDECAR_ENV), which replaces this one.
ENV NODE_OPTIONS=--max-semi-space-size=2
# No node_modules: every mode is bundled (tools/bundle.mjs), so the runtime ships the
# entry point, the sidecar's bundles (what it starts with, its drain, its metrics) and the app's bundle with its
# chunks, and package.json, whose "type":
# "module" makes Node load the app's chunks as ES modules. test/docker/runtime-payload.test.ts starts every
# mode from exactly these files. They stay owned by root: the process (uid 65532) can read its code but not
# change it.
COPY package.json ./
COPY --from=build /app/dist/entry.cjs /app/dist/sidecar.cjs /app/dist/sidecar-engine.cjs /app/dist/sidecar-metrics.cjs ./dist/
COPY --from=build /app/dist/app ./dist/app
# What the bundles contain, for scanners and for the licences' sake (the image has no node_modules, so nothing else
# tells): sbom.cdx.json (CycloneDX, every npm package bundled), THIRD_PARTY_NOTICES and this project's LICENSE.
COPY --from=build /app/dist/licenses /licenses
# Numeric, so that the kubelet can enforce runAsNonRoot without looking the name up (65532 is the
# conventional "nonroot" uid, also used by the manifests' securityContext).
USER 65532:65532
# 8443: webhook HTTPS (WEBHOOK_SETTINGS.port); 8090: sidecar drain server (serve-port).
EXPOSE 8443 8090
# Exec form (the runtime has no shell to run any other): node is PID 1 and receives SIGTERM itself, which both
# modes rely on to shut down cleanly.
# entry.cjs starts the sidecar as CommonJS, without Node's ES module loader (see src/entry.cts), and hands
# every other mode to main.js.
ENTRYPOINT ["/nodejs/bin/node", "/app/dist/entry.cjs"]
