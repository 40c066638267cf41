/**
 * `npm test` runs two test files at once (--test-concurrency=2, on 2 cores). Some files load the machine (floods,
 * fleets of Envoys, thousands of admin calls) and some time it (a probe answered within 1 s, a flood reaching its
 * rate): two of those at once starve each other, and a bound measures the machine, not the code. Such a file calls
 * `runsAlone()` at its top level: it holds a lock that every other such file waits for, so that at most one of them
 * runs at a time, beside a light file at most.
 *
 * The lock is a directory (mkdir is atomic) holding the owner's process id; one whose owner has exited (a test
 * process killed mid-run) is taken over. The wait is bounded: a file that waits longer than WAIT_LIMIT_MS fails,
 * naming the process that holds the lock.
 */
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before } from 'node:test';
import { REPO_ROOT } from './process.js';

/** Longer than the longest file that takes the lock, with every other one ahead of it. */
const WAIT_LIMIT_MS = 10 * 60_000;
const POLL_MS = 100;
const LOCK_DIR = join(tmpdir(), `esm-tests-alone-${createHash('sha256').update(REPO_ROOT).digest('hex').slice(0, 12)}`);
const OWNER_FILE = join(LOCK_DIR, 'pid');

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** The lock's owner, or undefined when there is none (or it is being created or removed). */
function owner(): number | undefined {
  try {
    const pid = Number(readFileSync(OWNER_FILE, 'utf8'));
    return Number.isInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

function tryTake(): boolean {
  try {
    mkdirSync(LOCK_DIR);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    const pid = owner();
    // An owner that exited without releasing (killed): take the lock over. No pid yet: it is being written.
    if (pid !== undefined && !isAlive(pid)) rmSync(LOCK_DIR, { recursive: true, force: true });
    return false;
  }
  writeFileSync(OWNER_FILE, String(process.pid));
  return true;
}

async function take(): Promise<void> {
  const deadline = performance.now() + WAIT_LIMIT_MS;
  while (!tryTake()) {
    if (performance.now() > deadline) throw new Error(`waited ${WAIT_LIMIT_MS / 1000} s for ${LOCK_DIR}, held by process ${owner() ?? '?'}`);
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}

function release(): void {
  if (owner() === process.pid) rmSync(LOCK_DIR, { recursive: true, force: true });
}

/** Call at the top level of a test file that loads or times the machine: see the header. */
export function runsAlone(): void {
  before(take);
  after(release);
  // A file killed by the runner's timeout runs no after hook: its lock is taken over once its process is gone.
  process.once('exit', release);
}
