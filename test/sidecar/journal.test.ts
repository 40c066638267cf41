/**
 * The drain journal: intents told from accepted steps, progress that never goes back, one record per Envoy
 * process, older formats never misread, and a state directory that cannot be used refused at once with a
 * message naming it (never a start-up that hangs, as Node's recursive mkdir does under /proc).
 */
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readdir, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { unwritableDirectory } from '../support/unwritable-dir.js';
import { describe, test, type TestContext } from 'node:test';
import { EXIT_FAILURE, UserFacingError } from '../../src/errors.js';
import { openJournal, parseEntry, SAME_PROCESS_TOLERANCE_MS, StateDirError, type JournalEntry } from '../../src/sidecar/journal.js';

const ENVOY_STARTED = 1_000_000;
const WALL = Date.parse('2026-11-26T08:00:00.000Z');

async function tempDir(t: TestContext): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'esm-journal-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

async function rawRecord(dir: string): Promise<Record<string, unknown>> {
  return JSON.parse(await readFile(join(dir, 'drain.json'), 'utf8')) as Record<string, unknown>;
}

function entry(fields: Partial<JournalEntry>): JournalEntry {
  return { envoyStartedAtMs: ENVOY_STARTED, healthChecks: null, listenersDrain: null, updatedAt: new Date(WALL).toISOString(), ...fields };
}

describe('drain journal: intents and accepted steps', () => {
  test('a record before a call is an intent, named as one; Envoy\'s OK makes it accepted', async (t) => {
    const dir = await tempDir(t);
    const journal = openJournal(dir);
    assert.equal(journal.enabled, true);
    assert.equal(journal.location, join(dir, 'drain.json'));
    assert.equal(await journal.read(), undefined, 'nothing recorded yet');

    await journal.record('fail-health-checks', 'intended', ENVOY_STARTED, WALL);
    assert.deepEqual(await journal.read(), entry({ healthChecks: 'intended' }));
    const raw = await rawRecord(dir);
    assert.equal(raw['healthChecks'], 'intended');
    assert.ok(!('healthChecksFailed' in raw), 'the file never says the health checks failed when Envoy accepted nothing');

    await journal.record('fail-health-checks', 'accepted', ENVOY_STARTED, WALL + 1_000);
    assert.deepEqual(await journal.read(), entry({ healthChecks: 'accepted', updatedAt: new Date(WALL + 1_000).toISOString() }));
    await journal.record('drain-listeners', 'intended', ENVOY_STARTED, WALL + 2_000);
    assert.deepEqual(await journal.read(), entry({ healthChecks: 'accepted', listenersDrain: 'intended', updatedAt: new Date(WALL + 2_000).toISOString() }));
    await journal.record('drain-listeners', 'accepted', ENVOY_STARTED, WALL + 3_000);
    assert.deepEqual(await journal.read(), entry({ healthChecks: 'accepted', listenersDrain: 'accepted', updatedAt: new Date(WALL + 3_000).toISOString() }));
    assert.deepEqual(await readdir(dir), ['drain.json'], 'no temporary or probe file is left behind');
  });

  test('progress never goes back: a retry\'s intent after an accepted step leaves it accepted', async (t) => {
    const journal = openJournal(await tempDir(t));
    await journal.record('fail-health-checks', 'accepted', ENVOY_STARTED, WALL);
    await journal.record('fail-health-checks', 'intended', ENVOY_STARTED, WALL);
    await journal.record('drain-listeners', 'accepted', ENVOY_STARTED, WALL);
    await journal.record('drain-listeners', 'intended', ENVOY_STARTED, WALL);
    assert.deepEqual(await journal.read(), entry({ healthChecks: 'accepted', listenersDrain: 'accepted' }));
  });

  test('a record for another Envoy process starts afresh; one within the start tolerance is the same process', async (t) => {
    const journal = openJournal(await tempDir(t));
    await journal.record('fail-health-checks', 'accepted', ENVOY_STARTED, WALL);
    await journal.record('drain-listeners', 'intended', ENVOY_STARTED + SAME_PROCESS_TOLERANCE_MS, WALL);
    assert.deepEqual(
      await journal.read(),
      entry({ envoyStartedAtMs: ENVOY_STARTED + SAME_PROCESS_TOLERANCE_MS, healthChecks: 'accepted', listenersDrain: 'intended' }),
      'two estimates of one start, within the tolerance',
    );
    const later = ENVOY_STARTED + 60_000;
    await journal.record('fail-health-checks', 'intended', later, WALL);
    assert.deepEqual(await journal.read(), entry({ envoyStartedAtMs: later, healthChecks: 'intended' }), 'a restarted Envoy: nothing carried over');
  });

  test('steps to an unknown process accumulate with each other, never with a known one', async (t) => {
    const journal = openJournal(await tempDir(t));
    await journal.record('fail-health-checks', 'accepted', null, WALL);
    await journal.record('drain-listeners', 'intended', null, WALL);
    assert.deepEqual(await journal.read(), entry({ envoyStartedAtMs: null, healthChecks: 'accepted', listenersDrain: 'intended' }));
    await journal.record('drain-listeners', 'intended', ENVOY_STARTED, WALL);
    assert.deepEqual(await journal.read(), entry({ listenersDrain: 'intended' }));
  });

  test('a restarted sidecar continues the record an earlier one left for the same process', async (t) => {
    const dir = await tempDir(t);
    const earlier = openJournal(dir);
    await earlier.record('fail-health-checks', 'accepted', ENVOY_STARTED, WALL);
    await earlier.record('drain-listeners', 'intended', ENVOY_STARTED, WALL);
    // The next sidecar of the pod opens the same directory and drains the same Envoy again.
    const next = openJournal(dir);
    assert.deepEqual(await next.read(), entry({ healthChecks: 'accepted', listenersDrain: 'intended' }));
    await next.record('fail-health-checks', 'intended', ENVOY_STARTED, WALL + 5_000);
    assert.deepEqual(
      await next.read(),
      entry({ healthChecks: 'accepted', listenersDrain: 'intended', updatedAt: new Date(WALL + 5_000).toISOString() }),
      'the listeners drain the earlier sidecar sent is not forgotten',
    );
  });

  test('no directory: disabled, reads nothing, records nothing', async () => {
    const journal = openJournal('');
    assert.deepEqual([journal.enabled, journal.location], [false, null]);
    await journal.record('drain-listeners', 'accepted', ENVOY_STARTED, WALL);
    assert.equal(await journal.read(), undefined);
  });
});

describe('drain journal: what is read back', () => {
  test('the format before intents (healthChecksFailed/listenersDrained booleans) reads as no record', async (t) => {
    const dir = await tempDir(t);
    // As the previous version wrote it: booleans set before each call, the start on the wall clock.
    const old = { envoyStartedAtMs: 1_764_144_000_000, healthChecksFailed: true, listenersDrained: true, updatedAt: '2026-11-26T08:00:00.000Z' };
    await writeFile(join(dir, 'drain.json'), `${JSON.stringify(old)}\n`);
    const journal = openJournal(dir);
    assert.equal(await journal.read(), undefined);
    // Recording over it starts a record of the new format.
    await journal.record('fail-health-checks', 'intended', ENVOY_STARTED, WALL);
    assert.deepEqual(await journal.read(), entry({ healthChecks: 'intended' }));
    assert.equal((await rawRecord(dir))['version'], 2);
  });

  test('a journal the version before step ids wrote (the state dir outlives the container) is read, and recorded on', async (t) => {
    const dir = await tempDir(t);
    // Byte for byte as that version wrote it: step progress under fields of its own, no step label nor id on disk.
    const written = `{"version":2,"envoyStartedAtMs":${ENVOY_STARTED},"healthChecks":"accepted","listenersDrain":"intended","updatedAt":"2026-11-26T08:00:00.000Z"}\n`;
    await writeFile(join(dir, 'drain.json'), written);
    const journal = openJournal(dir);
    assert.deepEqual(await journal.read(), entry({ healthChecks: 'accepted', listenersDrain: 'intended' }));
    await journal.record('drain-listeners', 'accepted', ENVOY_STARTED, WALL);
    assert.deepEqual(await journal.read(), entry({ healthChecks: 'accepted', listenersDrain: 'accepted' }), 'the earlier record goes on');
    assert.equal(await readFile(join(dir, 'drain.json'), 'utf8'), written.replace('"listenersDrain":"intended"', '"listenersDrain":"accepted"'), 'the format is unchanged');
  });

  test('anything unreadable is no record', () => {
    const valid = { version: 2, envoyStartedAtMs: 5, healthChecks: 'accepted', listenersDrain: null, updatedAt: 'x' };
    assert.deepEqual(parseEntry(JSON.stringify(valid)), { envoyStartedAtMs: 5, healthChecks: 'accepted', listenersDrain: null, updatedAt: 'x' });
    for (const [text, why] of [
      ['', 'empty (a write cut short before the rename cannot leave this, but a hand edit can)'],
      ['{"version":2', 'half a document'],
      ['[]', 'not an object'],
      [JSON.stringify({ ...valid, version: 3 }), 'a format from a later version'],
      [JSON.stringify({ ...valid, healthChecks: true }), 'a boolean where a progress belongs'],
      [JSON.stringify({ ...valid, listenersDrain: 'done' }), 'an unknown progress'],
      [JSON.stringify({ ...valid, envoyStartedAtMs: '5' }), 'a start that is no number'],
      [JSON.stringify({ ...valid, updatedAt: undefined }), 'no time'],
    ] as const) {
      assert.equal(parseEntry(text), undefined, why);
    }
  });
});

describe('drain journal: a state directory that cannot be used is refused at open, at once', () => {
  /** Opens the journal and returns its error; fails the test if it opens, or takes more than a second. */
  function openFails(directory: string): StateDirError {
    const started = performance.now();
    let failure: unknown;
    try {
      openJournal(directory);
    } catch (error) {
      failure = error;
    }
    assert.ok(performance.now() - started < 1_000, 'refused at once');
    assert.ok(failure instanceof StateDirError, `expected a StateDirError, got ${String(failure)}`);
    assert.ok(failure instanceof UserFacingError, 'its message is printed alone, without a stack');
    assert.equal(failure.exitCode, EXIT_FAILURE);
    assert.equal(failure.directory, directory);
    assert.ok(failure.message.startsWith(`cannot use --state-dir ${directory}: `), failure.message);
    assert.match(failure.message, /--state-dir= \(empty\) to keep no drain journal/, 'it says what to do');
    return failure;
  }

  test('missing directories are created, one component at a time', async (t) => {
    const dir = join(await tempDir(t), 'a', 'b', 'c');
    const journal = openJournal(dir);
    assert.ok(statSync(dir).isDirectory(), 'the directory was created');
    await journal.record('fail-health-checks', 'intended', ENVOY_STARTED, WALL);
    assert.deepEqual(await readdir(dir), ['drain.json']);
  });

  test('under /proc, where Node\'s recursive mkdir never returns', () => {
    const failure = openFails('/proc/nonexistent/x');
    assert.match(failure.message, /\/proc\/nonexistent does not exist and cannot be created \(ENOENT: no such file or directory\)/);
  });

  test('under a regular file', async (t) => {
    const file = join(await tempDir(t), 'file');
    await writeFile(file, '');
    const failure = openFails(join(file, 'state'));
    assert.match(failure.message, new RegExp(`: ${file} is not a directory\\.`));
  });

  test('a directory where no file can be written', async (t) => {
    const dir = await unwritableDirectory(t);
    if (dir === undefined) return;
    const failure = openFails(dir);
    assert.match(failure.message, /a file cannot be written and renamed in it \((EACCES: permission denied|EROFS: read-only file system)\)/);
  });

  test('a directory in /proc, where files cannot be created', () => {
    const failure = openFails('/proc');
    assert.match(failure.message, /a file cannot be written and renamed in it \(ENOENT/);
  });

  test('through a symbolic link that loops', async (t) => {
    const loop = join(await tempDir(t), 'loop');
    await symlink(loop, loop);
    const failure = openFails(join(loop, 'state'));
    assert.match(failure.message, new RegExp(`: ${loop} cannot be looked up \\(ELOOP: too many symbolic links encountered\\)`));
  });

  test("the journal's own name taken by a directory", async (t) => {
    const dir = await tempDir(t);
    await mkdir(join(dir, 'drain.json'));
    const failure = openFails(dir);
    assert.match(failure.message, /drain\.json is not a regular file/);
  });

  test('a record whose directory went away fails, for the caller to report', async (t) => {
    const dir = join(await tempDir(t), 'state');
    const journal = openJournal(dir);
    await rm(dir, { recursive: true });
    await assert.rejects(journal.record('fail-health-checks', 'intended', ENVOY_STARTED, WALL), /ENOENT/);
  });
});
