/**
 * The image cannot be built here (no Docker engine), so its invariants are checked on the Dockerfile:
 * multi-stage, Node 24, lock-file installs without dev dependencies, a numeric non-root user, and an
 * exec-form entrypoint at the file the TypeScript build really emits.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { access, readFile } from 'node:fs/promises';
import { join, posix } from 'node:path';
import { describe, it } from 'node:test';
import { POD_DRAIN_SETTINGS } from '../../src/config/drain.js';
import { WEBHOOK_SETTINGS } from '../../src/config/webhook.js';
import { MANIFESTS_DIR, findOne, getObject, resolveKustomization } from '../support/manifests.js';
import { REPO_ROOT } from '../support/process.js';
import { SIDECAR_ENV } from '../../src/inject/sidecar.js';
import { execForm, isInContext, parseCopy, parseDockerfile, runtimeEnv, type Stage } from './dockerfile.js';

const dockerfile = parseDockerfile(await readFile(join(REPO_ROOT, 'Dockerfile'), 'utf8'));
const dockerignore = await readFile(join(REPO_ROOT, '.dockerignore'), 'utf8');
const packageJson = JSON.parse(await readFile(join(REPO_ROOT, 'package.json'), 'utf8')) as {
  type?: string;
  scripts: Record<string, string>;
};
const { stages } = dockerfile;
const final = stages[stages.length - 1] as Stage;
const all = (stage: Stage, keyword: string) => stage.instructions.filter((instruction) => instruction.keyword === keyword);
const NODE_24 = /^(docker\.io\/(library\/)?)?node:24([.-][\w.-]*)?(@sha256:[0-9a-f]{64})?$|^gcr\.io\/distroless\/nodejs24-debian\d+(:[\w.-]+)?(@sha256:[0-9a-f]{64})?$/;
/** Where each kind of base image keeps node: the official images put it on PATH, distroless does not. */
const nodeBinary = (image: string): string => (image.startsWith('gcr.io/distroless/') ? '/nodejs/bin/node' : 'node');

/** WORKDIR in effect at the end of a stage (absolute WORKDIRs only, which is what we write). */
function workdir(stage: Stage): string {
  return all(stage, 'WORKDIR').reduce((dir, instruction) => posix.resolve(dir, instruction.args), '/');
}

function stageNamed(name: string): Stage {
  const stage = stages.find((candidate) => candidate.name === name);
  assert.ok(stage, `a stage named ${name}`);
  return stage;
}

describe('Dockerfile', () => {
  it('is multi-stage, every stage on Node 24, the runtime one last', () => {
    assert.ok(stages.length >= 2, 'a build stage and a runtime stage');
    for (const stage of stages) assert.match(stage.image, NODE_24, `FROM ${stage.image}`);
    for (const stage of stages) assert.match(stage.image, /@sha256:[0-9a-f]{64}$/, `FROM ${stage.image}: pinned by digest, so that a rebuild gets the same base`);
    const names = stages.map((stage) => stage.name).filter((name) => name !== undefined);
    assert.equal(new Set(names).size, names.length, 'stage names are unique');
    assert.equal(dockerfile.global.filter((instruction) => instruction.keyword !== 'ARG').length, 0);
  });

  it('installs from the lock file only; the runtime has no node_modules at all (every mode is bundled)', () => {
    const runs = stages.flatMap((stage) => all(stage, 'RUN').map((run) => ({ stage, run })));
    for (const { run } of runs) {
      assert.doesNotMatch(run.args, /\bnpm\s+(install|i|add)\b/, `line ${run.line}: npm install ignores the lock file`);
      assert.doesNotMatch(run.args, /\byarn\b|\bpnpm\b/, `line ${run.line}: the lock file is npm's`);
    }
    const copied = all(final, 'COPY').map(parseCopy).flatMap((copy) => copy.sources);
    assert.ok(!copied.some((source) => source.includes('node_modules')), `the runtime copies no node_modules: ${copied.join(', ')}`);
    assert.equal(all(final, 'RUN').filter((run) => /\bnpm\b/.test(run.args) && !/rm -rf/.test(run.args)).length, 0, 'nor installs any');
    for (const stage of stages) {
      if (all(stage, 'RUN').some((run) => /\bnpm\s+ci\b/.test(run.args))) {
        const sources = all(stage, 'COPY').map(parseCopy).flatMap((copy) => copy.sources);
        assert.ok(sources.includes('package-lock.json'), `stage ${stage.name ?? stage.image} copies the lock file before npm ci`);
      }
    }
  });

  it('runs as a numeric non-root user, the one the manifests require', async () => {
    const users = all(final, 'USER');
    assert.ok(users.length > 0, 'the runtime stage sets USER');
    const last = users[users.length - 1];
    assert.match(last?.args ?? '', /^\d+(:\d+)?$/, 'numeric, so that runAsNonRoot can be verified');
    const [uid] = (last?.args ?? '').split(':').map(Number);
    assert.ok(uid !== undefined && uid > 0, 'not root');

    const deployment = findOne(await resolveKustomization(MANIFESTS_DIR), 'Deployment');
    const podSecurity = getObject(deployment, ['spec', 'template', 'spec', 'securityContext']);
    assert.equal(podSecurity.runAsUser, uid, 'the Deployment runs as the image user');
  });

  it('starts node on the entry point the TypeScript build emits, in exec form', async () => {
    for (const stage of stages) {
      for (const instruction of [...all(stage, 'ENTRYPOINT'), ...all(stage, 'CMD')]) {
        assert.ok(execForm(instruction), `line ${instruction.line}: ${instruction.keyword} must be exec form`);
      }
    }
    const entrypoints = all(final, 'ENTRYPOINT');
    assert.equal(entrypoints.length, 1);
    const [program, script, ...rest] = execForm(entrypoints[0] as (typeof entrypoints)[number]) ?? [];
    assert.equal(program, nodeBinary(final.image), `the node binary of ${final.image}`);
    assert.deepEqual(rest, [], 'mode and flags come from the pod spec, not the image');
    assert.ok(script !== undefined && posix.isAbsolute(script), 'an absolute script path');

    // Where the build puts the entry point: tsconfig.build.json's outDir, src/entry.cts under its rootDir.
    const tsconfig = JSON.parse(await readFile(join(REPO_ROOT, 'tsconfig.build.json'), 'utf8')) as {
      compilerOptions: { outDir: string; rootDir: string };
    };
    await access(join(REPO_ROOT, tsconfig.compilerOptions.rootDir, 'entry.cts'));
    assert.match(packageJson.scripts.build ?? '', /\btsc -[pb] tsconfig\.build\.json\b/);
    const build = stageNamed('build');
    assert.ok(all(build, 'RUN').some((run) => /\bnpm run build\b/.test(run.args)), 'the build stage runs npm run build');
    const emittedDir = posix.join(workdir(build), tsconfig.compilerOptions.outDir);

    // The runtime copies the emitted entry point from the build stage to where the entrypoint looks.
    const emitted = posix.join(emittedDir, 'entry.cjs');
    const copy = all(final, 'COPY')
      .map(parseCopy)
      .find((candidate) => candidate.from === 'build' && candidate.sources.includes(emitted));
    assert.ok(copy, `the runtime copies ${emitted} from the build stage`);
    const copiedTo = posix.resolve(workdir(final), copy.destination);
    assert.equal(script, copy.destination.endsWith('/') ? posix.join(copiedTo, 'entry.cjs') : copiedTo);
  });

  it('ships package.json next to dist, for "type": "module"', () => {
    assert.equal(packageJson.type, 'module');
    const copied = all(final, 'COPY')
      .map(parseCopy)
      .filter((copy) => copy.from === undefined);
    assert.deepEqual(
      copied.flatMap((copy) => copy.sources),
      ['package.json'],
      'only package.json comes from the context into the runtime (no sources, tests or keys)',
    );
    assert.equal(posix.resolve(workdir(final), (copied[0] as { destination: string }).destination), workdir(final));
  });

  it('sets NODE_ENV=production and exposes the webhook and sidecar ports', () => {
    assert.ok(all(final, 'ENV').some((env) => /^NODE_ENV(=|\s+)production$/.test(env.args)), 'the final stage sets NODE_ENV=production');
    const exposed = all(final, 'EXPOSE').flatMap((expose) => expose.args.split(/\s+/)).map((port) => port.replace(/\/tcp$/, ''));
    assert.ok(exposed.includes(String(WEBHOOK_SETTINGS.port.default)), 'the webhook port is exposed');
    assert.ok(exposed.includes(String(POD_DRAIN_SETTINGS['serve-port'].default)), "the sidecar's serve port is exposed");
  });

  it('runs nothing in the runtime stage when its base has no shell (distroless)', () => {
    if (nodeBinary(final.image) === 'node') return;
    const runs = all(final, 'RUN').filter((run) => execForm(run) === undefined);
    assert.deepEqual(runs.map((run) => `line ${run.line}: RUN ${run.args}`), [], 'a shell-form RUN needs /bin/sh');
  });

  it("sets the webhook's V8 options for the image, which the injected sidecar's own replace", () => {
    const options = runtimeEnv(dockerfile)['NODE_OPTIONS'];
    assert.ok(options !== undefined, 'the image sets NODE_OPTIONS for webhook mode (bench/webhook-memory.ts measures it)');
    assert.match(options, /^--max-semi-space-size=\d+$/);
    // A container's env replaces the image's variable of the same name: the sidecar never runs with the webhook's.
    assert.ok(SIDECAR_ENV.some(({ name }) => name === 'NODE_OPTIONS'), 'the injector writes NODE_OPTIONS for the sidecar');
  });

  it('reads ENV as Docker does: several pairs on a line, quotes, the legacy form, later ones winning', () => {
    const parsed = parseDockerfile('FROM node:24 AS build\nFROM x\nENV A=1 B="two words" \nENV D value with spaces\nENV A=3\n');
    assert.deepEqual(runtimeEnv(parsed), { A: '3', B: 'two words', D: 'value with spaces' });
  });

  it('labels the image as OCI says: title, description, source, licence (package.json\'s), version and revision from build args', () => {
    const labels: Record<string, string> = {};
    for (const label of all(final, 'LABEL')) {
      for (const pair of label.args.matchAll(/([\w.-]+)="((?:[^"\\]|\\.)*)"/g)) labels[pair[1] as string] = pair[2] as string;
    }
    const { license, description } = JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8')) as { license: string; description: string };
    assert.equal(labels['org.opencontainers.image.source'], 'https://github.com/envoy-shutdown-manager/envoy-shutdown-manager');
    assert.equal(labels['org.opencontainers.image.licenses'], license);
    assert.equal(labels['org.opencontainers.image.title'], 'envoy-shutdown-manager');
    assert.equal(`${labels['org.opencontainers.image.description'] ?? ''}.`, description);
    assert.equal(labels['org.opencontainers.image.version'], '${VERSION}');
    assert.equal(labels['org.opencontainers.image.revision'], '${REVISION}');
    const args = all(final, 'ARG').map((arg) => arg.args.split('=')[0]);
    assert.ok(args.includes('VERSION') && args.includes('REVISION'), 'declared in the runtime stage, where LABEL reads them');
  });

  it('ships /licenses (SBOM, notices, LICENSE) that npm run build writes in the build stage from the lock file', async () => {
    const copy = all(final, 'COPY')
      .map(parseCopy)
      .find((candidate) => candidate.from === 'build' && candidate.sources.includes(posix.join(workdir(stageNamed('build')), 'dist', 'licenses')));
    assert.ok(copy, 'the runtime copies dist/licenses from the build stage');
    assert.equal(copy.destination, '/licenses');
    assert.match(packageJson.scripts.build ?? '', /node tools\/bundle\.mjs$/);
    assert.match(readFileSync(new URL('../../tools/bundle.mjs', import.meta.url), 'utf8'), /'tools\/sbom\.ts', '--out', join\(DIST, 'licenses'\)/);
    assert.match(packageJson.scripts['build:licenses'] ?? '', /tools\/sbom\.ts --out dist\/licenses$/);
    const sources = all(stageNamed('build'), 'COPY').map(parseCopy).flatMap((candidate) => candidate.sources);
    for (const needed of ['LICENSE', 'tools/sbom.ts', 'tools/bundle.mjs', 'package-lock.json']) assert.ok(sources.includes(needed), `the build stage copies ${needed}`);
    await access(join(REPO_ROOT, 'LICENSE'));
  });

  it('never downloads with ADD', () => {
    for (const stage of stages) {
      for (const add of all(stage, 'ADD')) assert.doesNotMatch(add.args, /https?:\/\//, `line ${add.line}`);
    }
  });
});

describe('.dockerignore', () => {
  it('sends every file the Dockerfile copies from the context', async () => {
    const sources = stages.flatMap((stage) =>
      all(stage, 'COPY')
        .map(parseCopy)
        .filter((copy) => copy.from === undefined)
        .flatMap((copy) => copy.sources),
    );
    assert.ok(sources.length > 0, 'the Dockerfile copies files from the context');
    for (const source of sources) {
      await access(join(REPO_ROOT, source));
      assert.ok(isInContext(dockerignore, source), `${source} is excluded by .dockerignore`);
    }
    assert.ok(isInContext(dockerignore, 'src/main.ts'), 'src/main.ts is sent to the build');
    assert.ok(isInContext(dockerignore, 'src/certs/generate.ts'), 'src/certs/generate.ts is sent to the build');
  });

  it('keeps keys, git history, local builds and tests out of the context', () => {
    for (const path of ['certs/tls.key', 'certs/ca.crt', 'certs/ca.key', '.git/HEAD', 'node_modules/yaml/package.json', 'dist/main.js', 'test/cli/certs.test.ts', 'manifests/base/deployment.yaml']) {
      assert.equal(isInContext(dockerignore, path), false, `${path} must not be sent to the builder`);
    }
  });
});

describe("the base images' sizes in the docs are the Dockerfile's (where they were measured)", () => {
  /** A size in MB from the Dockerfile's table row or comment that `pattern` finds. */
  const fromDockerfile = (pattern: RegExp): number => {
    const found = pattern.exec(readFileSync(join(REPO_ROOT, 'Dockerfile'), 'utf8'))?.[1];
    assert.ok(found !== undefined, `the Dockerfile states ${String(pattern)}`);
    return Number(found);
  };
  const slim = fromDockerfile(/^#\s+node:[\d.]+-bookworm-slim\s+([\d.]+) MB/m);
  const distroless = fromDockerfile(/^#\s+gcr\.io\/distroless\/nodejs24-debian13\s+~([\d.]+) MB/m);
  const nodeBinaryMb = fromDockerfile(/([\d.]+) MB of its ~\d+ are the node binary/);

  it('docs/install.md: the distroless and slim sizes, rounded', () => {
    const install = readFileSync(join(REPO_ROOT, 'docs', 'install.md'), 'utf8');
    const [, ours, theirs] = /about (\d+) MB compressed against (\d+) MB for `node:24-bookworm-slim`/.exec(install) ?? [];
    assert.equal(Number(ours), Math.round(distroless), 'the distroless size');
    assert.equal(Number(theirs), Math.round(slim), 'the slim size');
  });

  it('docs/performance.md: the same, and the node binary', () => {
    const performance = readFileSync(join(REPO_ROOT, 'docs', 'performance.md'), 'utf8');
    const [, ours, binary, theirs] = /\(about (\d+) MB compressed, ([\d.]+) MB of\s+it the node binary; `node:24-bookworm-slim` is ([\d.]+) MB\)/.exec(performance) ?? [];
    assert.equal(Number(ours), Math.round(distroless), 'the distroless size');
    assert.equal(Number(binary), nodeBinaryMb, 'the node binary');
    assert.equal(Number(theirs), slim, 'the slim size');
  });
});
