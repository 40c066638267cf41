/**
 * The drain journal: one small JSON file in a directory that outlives the sidecar container but not the
 * pod (the injector mounts an emptyDir). Before each drain step is sent, the drain records which Envoy
 * process it is about to touch and which steps it has sent. A sidecar that starts later reads it back to
 * tell "only the health checks were failed" (undone by POST /healthcheck/ok) from "the listeners were
 * drained" (irreversible: Envoy must be restarted). Envoy itself does not say which: `drain_listeners`
 * leaves `/server_info` LIVE, and no stat shows it.
 */
// Synchronous calls: a few hundred bytes, twice per drain, in an in-memory emptyDir, and node:fs/promises (with
// the readline and watcher modules it loads) would be loaded by every sidecar at start for them.
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { isJsonObject } from '../json.js';
import type { DrainStepName } from './drain.js';

export type StepProgress = 'intended' | 'accepted';

export interface JournalEntry {
  /** Start of the Envoy process the steps went to, on the monotonic clock (EnvoyProcessInfo.startedAtMs); null if unknown. */
  readonly envoyStartedAtMs: number | null;
  readonly healthChecks: StepProgress | null;
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
  record(step: DrainStepName, progress: StepProgress, envoyStartedAtMs: number | null, wallNowMs: number): Promise<void>;
}

const FILE_NAME = 'drain.json';

const RANK: Record<StepProgress, number> = { intended: 1, accepted: 2 };

function further(a: StepProgress | null, b: StepProgress | null): StepProgress | null {
  if (a === null) return b;
  if (b === null) return a;
  return RANK[a] >= RANK[b] ? a : b;
}

export function openJournal(directory: string): DrainJournal {
  if (directory === '') {
    return { enabled: false, location: null, read: async () => undefined, record: async () => undefined };
  }
  const path = join(directory, FILE_NAME);
  let current: JournalEntry | undefined;
  return {
    enabled: true,
    location: path,
    read: async () => {
      try {
        return parseEntry(readFileSync(path, 'utf8'));
      } catch {
        return undefined;
      }
    },
    async record(step, progress, envoyStartedAtMs, wallNowMs) {
      const previous = current !== undefined && current.envoyStartedAtMs === envoyStartedAtMs ? current : undefined;
      current = {
        envoyStartedAtMs,
        healthChecks: step === 'fail health checks' ? further(previous?.healthChecks ?? null, progress) : (previous?.healthChecks ?? null),
        listenersDrain: step === 'drain listeners' ? further(previous?.listenersDrain ?? null, progress) : (previous?.listenersDrain ?? null),
        updatedAt: new Date(wallNowMs).toISOString(),
      };
      mkdirSync(directory, { recursive: true });
      const temporary = `${path}.${process.pid}.tmp`;
      writeFileSync(temporary, `${JSON.stringify(current)}\n`, { mode: 0o600 });
      renameSync(temporary, path);
    },
  };
}

function progressOf(value: unknown): StepProgress | null | undefined {
  return value === null || value === 'intended' || value === 'accepted' ? value : undefined;
}

function parseEntry(text: string): JournalEntry | undefined {
  let document: unknown;
  try {
    document = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (!isJsonObject(document)) return undefined;
  const { envoyStartedAtMs, updatedAt } = document;
  const healthChecks = progressOf(document['healthChecks']);
  const listenersDrain = progressOf(document['listenersDrain']);
  const startedOk = envoyStartedAtMs === null || (typeof envoyStartedAtMs === 'number' && Number.isFinite(envoyStartedAtMs));
  if (!startedOk || healthChecks === undefined || listenersDrain === undefined || typeof updatedAt !== 'string') return undefined;
  return { envoyStartedAtMs: envoyStartedAtMs as number | null, healthChecks, listenersDrain, updatedAt };
}
