/** A directory no file can be written in, for tests of an unusable --state-dir. */
import { statSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestContext } from 'node:test';

/**
 * chmod does not stop root: a sysfs directory does (EACCES for everyone), as a read-only volume would (EROFS).
 * Undefined (and the test skipped) when running as root without /sys/kernel.
 */
export async function unwritableDirectory(t: TestContext): Promise<string | undefined> {
  if (process.getuid?.() !== 0) {
    const parent = await mkdtemp(join(tmpdir(), 'esm-unwritable-'));
    t.after(() => rm(parent, { recursive: true, force: true }));
    const dir = join(parent, 'read-only');
    await mkdir(dir);
    await chmod(dir, 0o555);
    return dir;
  }
  if (statSync('/sys/kernel', { throwIfNoEntry: false })?.isDirectory() === true) return '/sys/kernel';
  t.skip('running as root without /sys/kernel: no directory refuses root');
  return undefined;
}
