/**
 * docs/development.md "Quick start" as a newcomer runs it: `npm start` says it is compiling when it is, serves the webhook on
 * 127.0.0.1 with development certificates, answers the documented curl, and stops on Ctrl-C (SIGINT to the
 * terminal's process group) or on SIGTERM to npm alone. Certificates go to a temporary directory here
 * (flags after `--`, as the docs allow); test/newcomer/certs.test.ts runs the default paths.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, posix } from 'node:path';
import { parseEnv } from 'node:util';
import { test, type TestContext } from 'node:test';
import { WEBHOOK_SETTINGS } from '../../src/config/webhook.js';
import { freePorts } from '../support/ports.js';
import { REPO_ROOT } from '../support/process.js';
import { httpsRequest } from '../support/webhook.js';
import { waitUntil, within } from '../support/wait.js';
import { doc, docCommands, docSection, portIsFree, spawnNpm, words, type Npm } from './support.js';

/** Where the quick start is written. */
const DOC = 'docs/development.md';

const devEnv = parseEnv(readFileSync(join(REPO_ROOT, 'dev.env'), 'utf8'));

/** `npm start` with its certificates in a temporary directory, listening; its URL and CA. */
async function startWebhook(t: TestContext, extra: readonly string[] = []): Promise<{ npm: Npm; url: string; ca: string; port: number }> {
  const directory = await mkdtemp(join(tmpdir(), 'esm-quick-start-'));
  t.after(() => rm(directory, { recursive: true, force: true }));
  const [port] = (await freePorts(1)) as [number];
  const npm = spawnNpm(['start', '--', `--port=${port}`, `--tls-cert-file=${directory}/tls.crt`, `--tls-key-file=${directory}/tls.key`, ...extra]);
  t.after(() => npm.kill());
  const listening = await npm.json((line) => line.msg === 'webhook listening');
  return { npm, url: String(listening.url), ca: await readFile(join(directory, 'ca.crt'), 'utf8'), port };
}

test('Quick start is npm install, then npm start', () => {
  assert.deepEqual(docCommands(DOC, 'Quick start').slice(0, 2), ['npm install', 'npm start']);
});

test("the documented curl matches what npm start serves: dev.env's address and certificate directory, the default port", () => {
  const curl = docCommands(DOC, 'Quick start')[2] ?? '';
  const certDir = posix.dirname(devEnv.SHUTDOWN_MANAGER_TLS_CERT_FILE ?? '');
  assert.equal(certDir, 'certs/dev');
  assert.ok(curl.includes(`--cacert ${certDir}/ca.crt`), curl);
  assert.ok(curl.includes(`https://${devEnv.SHUTDOWN_MANAGER_ADDRESS}:${WEBHOOK_SETTINGS.port.default}/mutate`), curl);
  assert.ok(docSection(DOC, 'Quick start').includes(`https://${devEnv.SHUTDOWN_MANAGER_ADDRESS}:${WEBHOOK_SETTINGS.port.default}`), "the Quick start curls dev.env's address on the default port");
});

test('npm start serves the webhook on 127.0.0.1, answers the documented curl, and stops on Ctrl-C; it says it compiles at most once', { timeout: 90_000 }, async (t) => {
  const { npm, url, ca, port } = await startWebhook(t);
  // npm test built dist/ first, so there is nothing to compile (when run alone after an edit, it compiles once).
  assert.ok((npm.stderr().match(/^Compiling src\/ into dist\//gm) ?? []).length <= 1, npm.stderr());
  assert.equal(url, `https://127.0.0.1:${port}`);

  // The documented curl: the fixture review, the patch in the answer.
  const curl = docCommands(DOC, 'Quick start')[2] ?? '';
  const fixture = /--data @(\S+)/.exec(curl)?.[1];
  assert.ok(fixture !== undefined, curl);
  const answer = await httpsRequest(`${url}/mutate`, { ca, body: await readFile(join(REPO_ROOT, fixture)), contentType: 'application/json' });
  assert.equal(answer.status, 200, answer.text);
  const patch = JSON.parse(Buffer.from(answer.json().response.patch, 'base64').toString('utf8')) as { path: string; value: unknown }[];
  assert.ok(patch.some((operation) => JSON.stringify(operation.value).includes('"name":"shutdown-manager"')), 'the sidecar is added');

  // Ctrl-C in a terminal: SIGINT to every process of the foreground group.
  process.kill(-(npm.child.pid as number), 'SIGINT');
  await within(npm.exited, 5_000, 'npm exiting after Ctrl-C');
  await waitUntil(() => portIsFree(port), 2_000, 'the webhook releasing its port');
});

test('the build says it compiles only when a source is newer than the last bundling (issue 35: a banner on every command)', async (t) => {
  const tree = await mkdtemp(join(tmpdir(), 'esm-build-notice-'));
  t.after(() => rm(tree, { recursive: true, force: true }));
  await mkdir(join(tree, 'src'), { recursive: true });
  await mkdir(join(tree, 'dist'), { recursive: true });
  const notice = (): string => spawnSync(process.execPath, [join(REPO_ROOT, 'tools', 'build-notice.mjs')], { cwd: tree, encoding: 'utf8', timeout: 10_000 }).stderr;
  const source = join(tree, 'src', 'main.ts');
  await writeFile(source, 'export {};\n');
  assert.match(notice(), /Compiling src\/ into dist\//, 'never built: it says so');
  await writeFile(join(tree, 'dist', '.bundled'), '');
  const stampedAt = new Date();
  await utimes(source, new Date(stampedAt.getTime() - 60_000), new Date(stampedAt.getTime() - 60_000));
  assert.doesNotMatch(notice(), /Compiling/, 'up to date: silent');
  await utimes(source, new Date(stampedAt.getTime() + 60_000), new Date(stampedAt.getTime() + 60_000));
  assert.match(notice(), /Compiling src\/ into dist\//, 'a source newer than the stamp: it says so');
});

test('SIGTERM to npm alone stops the webhook at once (dev.env: no shutdown delay)', { timeout: 90_000 }, async (t) => {
  const { npm, port } = await startWebhook(t);
  npm.child.kill('SIGTERM');
  const { code } = await within(npm.exited, 5_000, 'npm exiting after SIGTERM');
  assert.equal(code, 0, npm.stderr());
  await waitUntil(() => portIsFree(port), 1_000, 'the webhook releasing its port');
});

test('npm start -- --help and npm start -- mode=sidecar --help, as the docs say, list the flags', { timeout: 60_000 }, async () => {
  for (const [command, flag, path] of [
    ['npm start -- --help', '--tls-cert-file', 'docs/reference/webhook.md'],
    ['npm start -- mode=sidecar --help', '--check-interval', 'docs/reference/sidecar.md'],
  ] as const) {
    assert.ok(doc(path).includes(`\`${command}\``), `${path} shows ${command}`);
    const npm = spawnNpm(words(command).slice(1));
    const { code } = await within(npm.exited, 30_000, command);
    assert.equal(code, 0, npm.stderr());
    assert.ok(npm.stdout().includes(`  ${flag}\n`), `${command} lists ${flag}`);
  }
});
