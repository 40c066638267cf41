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

export interface JournalEntry {
  /** Start of the Envoy process the steps went to (see EnvoyProcessInfo.startedAtMs); null if unknown. */
  readonly envoyStartedAtMs: number | null;
  readonly healthChecksFailed: boolean;
  /** Set before `drain_listeners` is sent: a crash during that call counts as drained, to be safe. */
  readonly listenersDrained: boolean;
  readonly updatedAt: string;
}

export interface DrainJournal {
  /** False when no directory was given: nothing is kept, and `read` always answers undefined. */
  readonly enabled: boolean;
  readonly location: string | null;
  read(): Promise<JournalEntry | undefined>;
  /** Records that `step` is about to be sent to the Envoy process started at `envoyStartedAtMs`. */
  record(step: DrainStepName, envoyStartedAtMs: number | null, now: number): Promise<void>;
}

const FILE_NAME = 'drain.json';

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
        return undefined; // no journal yet, or unreadable: nothing is known
      }
    },
    async record(step, envoyStartedAtMs, now) {
      // Steps of one drain accumulate; a drain of another process starts a fresh record.
      const sameProcess = current !== undefined && current.envoyStartedAtMs === envoyStartedAtMs;
      const previous = sameProcess ? current : undefined;
      current = {
        envoyStartedAtMs,
        healthChecksFailed: (previous?.healthChecksFailed ?? false) || step === 'fail health checks',
        listenersDrained: (previous?.listenersDrained ?? false) || step === 'drain listeners',
        updatedAt: new Date(now).toISOString(),
      };
      // Write then rename: a crash mid-write leaves the previous record whole, never half a file.
      mkdirSync(directory, { recursive: true });
      const temporary = `${path}.${process.pid}.tmp`;
      writeFileSync(temporary, `${JSON.stringify(current)}\n`, { mode: 0o600 });
      renameSync(temporary, path);
    },
  };
}

/** Anything unreadable is no record: the caller then knows nothing, which it must handle anyway. */
function parseEntry(text: string): JournalEntry | undefined {
  let document: unknown;
  try {
    document = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (!isJsonObject(document)) return undefined;
  const { envoyStartedAtMs, healthChecksFailed, listenersDrained, updatedAt } = document;
  const startedOk = envoyStartedAtMs === null || (typeof envoyStartedAtMs === 'number' && Number.isFinite(envoyStartedAtMs));
  if (!startedOk || typeof healthChecksFailed !== 'boolean' || typeof listenersDrained !== 'boolean' || typeof updatedAt !== 'string') {
    return undefined;
  }
  return { envoyStartedAtMs: envoyStartedAtMs as number | null, healthChecksFailed, listenersDrained, updatedAt };
}
