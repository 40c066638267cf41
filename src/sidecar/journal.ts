/**
 * The drain journal (docs/glossary.md#journal): one small JSON file in a directory that outlives the sidecar
 * container but not the pod (the injector mounts an emptyDir). For each drain step, for the Envoy process it touches,
 * it records first that the step is *intended* (written before the call, which may reach Envoy even if this process
 * dies before the answer) and then that Envoy *accepted* it, so that a later sidecar can tell "only the health checks
 * were failed" from "the listeners may be draining" (docs/design.md#the-other-paths-restarts-and-an-envoy-left-draining).
 *
 * The directory is checked when the journal is opened, at sidecar start: one that cannot be used is a StateDirError
 * there (the sidecar exits with a message naming it), never a surprise during a drain.
 */
// Synchronous calls: a few hundred bytes, twice per step, in an in-memory emptyDir, and node:fs/promises (with
// the readline and watcher modules it loads) would be loaded by every sidecar at start for them.
import { mkdirSync, readFileSync, renameSync, statSync, unlinkSync, writeFileSync, type Stats } from 'node:fs';
import { join } from 'node:path';
import { UserFacingError } from '../errors.js';
import { isJsonObject } from '../json.js';
import type { DrainStepId } from './drain-steps.js';

/** How far a step got: asked for (the call may have reached Envoy), or answered OK by Envoy. */
export type StepProgress = 'intended' | 'accepted';

export interface JournalEntry {
  /** Start of the Envoy process the steps went to, on the monotonic clock (EnvoyProcessInfo.startedAtMs); null if unknown. */
  readonly envoyStartedAtMs: number | null;
  /** The step 'fail-health-checks' (POST /healthcheck/fail); null: never asked for. */
  readonly healthChecks: StepProgress | null;
  /** The step 'drain-listeners' (POST /drain_listeners); null: never asked for. */
  readonly listenersDrain: StepProgress | null;
  /** Wall-clock ISO time of the last record, for people. */
  readonly updatedAt: string;
}

export interface DrainJournal {
  /** False when no directory was given: nothing is kept, and `read` always answers undefined. */
  readonly enabled: boolean;
  readonly location: string | null;
  read(): Promise<JournalEntry | undefined>;
  /** Records that `step` is about to be sent (intended) or was answered OK (accepted) for the process started at envoyStartedAtMs. */
  record(step: DrainStepId, progress: StepProgress, envoyStartedAtMs: number | null, wallNowMs: number): Promise<void>;
}

/**
 * Two estimates of one process's start differ by up to a second each (Envoy floors its uptime), plus the
 * time an admin call takes: more than this apart, they are two processes.
 */
export const SAME_PROCESS_TOLERANCE_MS = 2_500;

/** Whether two recorded starts name one Envoy process; two unknown starts are taken as one (see `record`). */
export function sameEnvoyStart(a: number | null, b: number | null): boolean {
  if (a === null || b === null) return a === b;
  return Math.abs(a - b) <= SAME_PROCESS_TOLERANCE_MS;
}

/** The directory given to --state-dir cannot hold the journal; `problem` says which part of it fails and how. */
export class StateDirError extends UserFacingError {
  override readonly name = 'StateDirError';
  // Exit 1 (the default), not 2: the flag's value is well formed; the filesystem is at fault, as with a taken port.
  constructor(
    readonly directory: string,
    readonly problem: string,
  ) {
    super(
      `cannot use --state-dir ${directory}: ${problem}. Mount a writable volume there (the injector mounts an emptyDir), ` +
        'or set --state-dir= (empty) to keep no drain journal',
    );
  }
}

const FILE_NAME = 'drain.json';
/**
 * Written in the file so that an older sidecar's format (booleans, a wall-clock start) is never misread. The file
 * keeps each step's progress in a field of its own (healthChecks, listenersDrain), never a step's label nor its id
 * (drain-steps.ts): those can change without touching the format, and a journal that a sidecar of the version
 * before the step ids wrote (the state dir outlives a container restart) is read as it was.
 */
const FORMAT_VERSION = 2;

/** Opens the journal in `directory` ('' for none); throws StateDirError when the directory cannot be used. */
export function openJournal(directory: string): DrainJournal {
  if (directory === '') {
    return { enabled: false, location: null, read: async () => undefined, record: async () => undefined };
  }
  prepareDirectory(directory);
  const path = join(directory, FILE_NAME);
  let last: JournalEntry | undefined;
  return {
    enabled: true,
    location: path,
    read: async () => readEntry(path),
    async record(step, progress, envoyStartedAtMs, wallNowMs) {
      // What an earlier sidecar of this pod recorded counts too: its progress on the same process never goes back.
      last = advance(last ?? readEntry(path), step, progress, envoyStartedAtMs, wallNowMs);
      writeAtomically(path, `${JSON.stringify({ version: FORMAT_VERSION, ...last })}\n`);
    },
  };
}

const RANK: Readonly<Record<StepProgress, number>> = { intended: 1, accepted: 2 };

/** The further of two progresses: accepted stays accepted, whatever is recorded after it. */
function further(a: StepProgress | null, b: StepProgress | null): StepProgress | null {
  if (a === null) return b;
  if (b === null) return a;
  return RANK[b] > RANK[a] ? b : a;
}

/**
 * The entry after recording `progress` of `step`. Steps to one process accumulate; a record for another
 * process starts afresh. Two unknown starts are taken as one process: merging can only make an entry claim
 * more, which makes recovery restart rather than trust, and an entry of an unknown process is never
 * matched to a running Envoy anyway.
 */
function advance(
  previous: JournalEntry | undefined,
  step: DrainStepId,
  progress: StepProgress,
  envoyStartedAtMs: number | null,
  wallNowMs: number,
): JournalEntry {
  const same = previous !== undefined && sameEnvoyStart(previous.envoyStartedAtMs, envoyStartedAtMs) ? previous : undefined;
  return {
    envoyStartedAtMs,
    healthChecks: further(same?.healthChecks ?? null, step === 'fail-health-checks' ? progress : null),
    listenersDrain: further(same?.listenersDrain ?? null, step === 'drain-listeners' ? progress : null),
    updatedAt: new Date(wallNowMs).toISOString(),
  };
}

/** No journal yet, or unreadable: nothing is known, which the reader must handle anyway. */
function readEntry(path: string): JournalEntry | undefined {
  try {
    return parseEntry(readFileSync(path, 'utf8'));
  } catch {
    return undefined;
  }
}

/**
 * Anything unreadable is no record. So is the format before intents were told apart from accepted steps
 * (`healthChecksFailed`/`listenersDrained` booleans, without `version`): its process start was on the wall
 * clock, which cannot be compared with the monotonic starts of today, so it cannot be tied to any Envoy
 * process, and a record tied to none tells recovery nothing. Reading it as no record gives the same
 * decision without pretending to know more (its booleans were written before each call: intents at best).
 */
export function parseEntry(text: string): JournalEntry | undefined {
  let document: unknown;
  try {
    document = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (!isJsonObject(document) || document['version'] !== FORMAT_VERSION) return undefined;
  const { envoyStartedAtMs, healthChecks, listenersDrain, updatedAt } = document;
  const startedOk = envoyStartedAtMs === null || (typeof envoyStartedAtMs === 'number' && Number.isFinite(envoyStartedAtMs));
  if (!startedOk || !isProgress(healthChecks) || !isProgress(listenersDrain) || typeof updatedAt !== 'string') return undefined;
  return { envoyStartedAtMs: envoyStartedAtMs as number | null, healthChecks, listenersDrain, updatedAt };
}

function isProgress(value: unknown): value is StepProgress | null {
  return value === null || value === 'intended' || value === 'accepted';
}

/** Write then rename: a crash mid-write leaves the previous record whole, never half a file. */
function writeAtomically(path: string, text: string): void {
  const temporary = `${path}.${process.pid}.tmp`;
  writeFileSync(temporary, text, { mode: 0o600 });
  try {
    renameSync(temporary, path);
  } catch (error) {
    try {
      unlinkSync(temporary);
    } catch {
      // the rename's error is the one to report
    }
    throw error;
  }
}

/**
 * Makes `directory` usable or throws StateDirError saying why. A bounded walk, one component at a time,
 * rather than mkdirSync's `recursive`: under /proc, mkdir answers ENOENT for a missing parent that it also
 * refuses to create, and Node's recursive mkdir then retries the child forever. Here each component costs
 * at most a stat, a mkdir and a stat, and the first that fails ends the walk.
 */
function prepareDirectory(directory: string): void {
  const components = directory.split('/').filter((part) => part !== '' && part !== '.');
  let prefix = '';
  for (const component of components) {
    prefix = `${prefix}/${component}`;
    const problem = ensureDirectory(prefix);
    if (problem !== undefined) throw new StateDirError(directory, problem);
  }
  const problem = checkWritable(directory);
  if (problem !== undefined) throw new StateDirError(directory, problem);
}

/** Undefined when `path` is (now) a directory; otherwise what is wrong with it. */
function ensureDirectory(path: string): string | undefined {
  const found = statOf(path);
  if (found instanceof Error) {
    if (codeOf(found) !== 'ENOENT') return `${path} cannot be looked up (${errnoText(found)})`;
  } else {
    return found.isDirectory() ? undefined : `${path} is not a directory`;
  }
  try {
    mkdirSync(path, { mode: 0o700 });
    return undefined;
  } catch (error) {
    // Created meanwhile by someone else: as good as created here.
    const again = statOf(path);
    if (!(again instanceof Error) && again.isDirectory()) return undefined;
    return `${path} does not exist and cannot be created (${errnoText(error)})`;
  }
}

/**
 * Records are written and renamed into place, so that is what is tried, under a name of its own (never the
 * journal's, which may hold an earlier sidecar's record). The journal's own name must not be taken by
 * something a file cannot replace.
 */
function checkWritable(directory: string): string | undefined {
  const journal = statOf(join(directory, FILE_NAME));
  if (!(journal instanceof Error) && !journal.isFile()) return `${join(directory, FILE_NAME)} is not a regular file`;
  const probe = join(directory, `.probe.${process.pid}`);
  try {
    writeAtomically(probe, 'probe\n');
  } catch (error) {
    return `a file cannot be written and renamed in it (${errnoText(error)})`;
  }
  try {
    unlinkSync(probe);
  } catch {
    // A probe left behind is a few bytes in the pod's own volume: not worth refusing to start for.
  }
  return undefined;
}

function statOf(path: string): Stats | Error {
  try {
    return statSync(path);
  } catch (error) {
    return error instanceof Error ? error : new Error(String(error));
  }
}

function codeOf(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : undefined;
}

/** `EACCES: permission denied`: the code a person can search for, then Node's words for it. */
function errnoText(error: unknown): string {
  const code = codeOf(error);
  const message = error instanceof Error ? error.message : String(error);
  // Node's messages read "EACCES: permission denied, mkdir '/x'": the path is said already.
  const words = message.replace(/^[A-Z]+: /, '').replace(/, \w+ '.*'$/, '');
  return code === undefined ? words : `${code}: ${words}`;
}
