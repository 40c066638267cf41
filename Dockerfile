# syntax=docker/dockerfile:1
#
# One image, two modes (see src/entry.cts and src/main.ts): the admission webhook by default, and the drain server that
# the webhook injects next to Envoy when started with the argument `mode=sidecar`.
#
# Base image: node:24-bookworm-slim for every stage. Distroless (gcr.io/distroless/nodejs24-debian12)
# would drop the shell and apt, but its node is not on PATH, it cannot share layers with the build
# stage, and it leaves nothing to debug an Envoy pod's sidecar with. The slim image keeps one base to
# patch; npm and corepack, the parts that pull in most CVE reports, are removed from the runtime below.
# Pin the tags by digest in CI (e.g. node:24-bookworm-slim@sha256:...) for reproducible builds.

# --- build: compile TypeScript with the full dependency tree -------------------------------------
FROM node:24-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
# No dependency needs an install script; refusing them all narrows what a compromised package can do.
RUN --mount=type=cache,target=/root/.npm npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
RUN npm run build

# --- runtime -------------------------------------------------------------------------------------
FROM node:24-bookworm-slim AS runtime
RUN rm -rf /usr/local/lib/node_modules/npm /usr/local/lib/node_modules/corepack \
      /usr/local/bin/npm /usr/local/bin/npx /usr/local/bin/corepack
WORKDIR /app
ENV NODE_ENV=production
# No node_modules: every mode is bundled (package.json bundle:sidecar, bundle:app), so the runtime ships the
# entry point, the sidecar's bundle and the app's bundle with its chunks, and package.json, whose "type":
# "module" makes Node load the app's chunks as ES modules. test/docker/runtime-payload.test.ts starts every
# mode from exactly these files. They stay owned by root: the process (uid 65532) can read its code but not
# change it.
COPY package.json ./
COPY --from=build /app/dist/entry.cjs /app/dist/sidecar.cjs ./dist/
COPY --from=build /app/dist/app ./dist/app
# Numeric, so that the kubelet can enforce runAsNonRoot without looking the name up (65532 is the
# conventional "nonroot" uid, also used by the manifests' securityContext).
USER 65532:65532
# 8443: webhook HTTPS (WEBHOOK_SETTINGS.port); 8090: sidecar drain server (serve-port).
EXPOSE 8443 8090
# Exec form: node is PID 1 and receives SIGTERM itself, which both modes rely on to shut down cleanly.
# entry.cjs starts the sidecar as CommonJS, without Node's ES module loader (see src/entry.cts), and hands
# every other mode to main.js.
ENTRYPOINT ["node", "/app/dist/entry.cjs"]
