/**
 * The built sidecar (`node dist/entry.cjs mode=sidecar`, as the image runs it) with a --state-dir it cannot
 * use: it exits 1 within 2 s with one line naming the directory and why, before it listens. Under /proc the
 * previous version's recursive mkdir never returned. `npm run build` first.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { unwritableDirectory } from '../support/unwritable-dir.js';
import { describe, test, type TestContext } from 'node:test';
import { EXIT_FAILURE } from '../../src/errors.js';
import { runSidecarToExit } from '../support/sidecar-process.js';

/** The bound the issue sets; a spawned Node takes 0.1-0.3 s to start, more on a busy machine. */
const EXIT_WITHIN_MS = 2_000;

async function tempDir(t: TestContext): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'esm-state-dir-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

async function assertRefused(directory: string, why: RegExp): Promise<void> {
  const started = performance.now();
  // Bounded well above the assertion, so that a hang fails here with its output rather than time out the suite.
  const result = await runSidecarToExit([`--state-dir=${directory}`, '--serve-address=127.0.0.1', '--serve-port=0'], 10_000);
  const elapsedMs = performance.now() - started;
  assert.deepEqual([result.code, result.signal], [EXIT_FAILURE, null], `exit code; stderr: ${result.stderr}`);
  assert.ok(elapsedMs < EXIT_WITHIN_MS, `exited after ${Math.round(elapsedMs)} ms`);
  const lines = result.stderr.trimEnd().split('\n');
  assert.equal(lines.length, 1, `one line, no stack: ${result.stderr}`);
  assert.ok(lines[0]?.startsWith(`envoy-shutdown-manager: cannot use --state-dir ${directory}: `), result.stderr);
  assert.match(result.stderr, why);
  assert.doesNotMatch(result.stdout, /"event":"listening"/, 'refused before it serves');
}

describe('the sidecar with a --state-dir it cannot use', () => {
  test('under /proc: exits 1 at once naming the component that cannot be created', async () => {
    await assertRefused('/proc/nonexistent/x', /\/proc\/nonexistent does not exist and cannot be created \(ENOENT/);
  });

  test('under a regular file: exits 1 at once naming the file', async (t) => {
    const file = join(await tempDir(t), 'file');
    await writeFile(file, '');
    await assertRefused(join(file, 'state'), new RegExp(`${file} is not a directory`));
  });

  test('a directory where no file can be written: exits 1 at once', async (t) => {
    const dir = await unwritableDirectory(t);
    if (dir === undefined) return;
    await assertRefused(dir, /a file cannot be written and renamed in it \((EACCES|EROFS)/);
  });
});
