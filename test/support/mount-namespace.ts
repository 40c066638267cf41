/**
 * A process with its own view of the filesystem, as a container has: a directory (a pod volume) or a file
 * (/etc/hosts) bound at a path only that process sees, with util-linux's `unshare --mount` and `mount --bind`.
 * That is what the kubelet does for a volumeMount, so a test can start the sidecar with exactly the args a pod
 * spec gives it (`--admin-address=unix:/admin/admin.sock`) and have it find, or not find, the socket there.
 *
 * Needs root (or a user namespace) and a kernel that allows mount namespaces: `mountNamespaceProblem()` says
 * why not, for the test to skip with that reason rather than pass without having run.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, rmdirSync } from 'node:fs';
import { REPO_ROOT } from './process.js';

export interface Bind {
  /** What the host has: the volume's directory, or a file. */
  readonly source: string;
  /** Where the process sees it: the volumeMount's mountPath, or /etc/hosts. */
  readonly target: string;
}

let probed: string | undefined | null = null;

/** Why mount namespaces cannot be made here, or undefined when they can (probed once). */
export function mountNamespaceProblem(): string | undefined {
  if (probed !== null) return probed;
  const result = spawnSync('unshare', ['--mount', '--propagation', 'private', '--', 'sh', '-c', 'mount --bind / /mnt'], { encoding: 'utf8', timeout: 5_000 });
  probed = result.status === 0 ? undefined : `cannot make a mount namespace here (unshare --mount: ${(result.error?.message ?? result.stderr.trim()) || `exit ${String(result.status)}`})`;
  return probed;
}

/**
 * The launcher (see StartOptions in process.ts) that runs a command with `binds` mounted in a private mount
 * namespace, then execs it: the same process, so signals reach it.
 */
export function mountNamespaceLauncher(binds: readonly Bind[], user?: RunAs): string[] {
  const script = 'while [ "$1" != -- ]; do mount --bind "$1" "$2" || exit 97; shift 2; done; shift; exec "$@"';
  // Mounting needs root; the container's user (runAsUser, runAsGroup) is taken only after, as runc does.
  const dropTo = user?.uid === undefined ? [] : ['setpriv', `--reuid=${user.uid}`, `--regid=${user.gid ?? user.uid}`, '--clear-groups'];
  return ['unshare', '--mount', '--propagation', 'private', '--', 'sh', '-c', script, 'sh', ...binds.flatMap(({ source, target }) => [source, target]), '--', ...dropTo];
}

/** A container's runAsUser and runAsGroup. */
export interface RunAs {
  readonly uid?: number;
  readonly gid?: number;
}

/**
 * Makes sure each directory mount point exists in the host's filesystem (a mount needs one), and returns what
 * removes those it had to create: the caller runs it when done.
 */
export function ensureMountPoints(directories: readonly string[]): () => void {
  const created = directories.filter((directory) => !existsSync(directory));
  for (const directory of created) mkdirSync(directory, { recursive: true });
  return () => {
    for (const directory of created.reverse()) {
      try {
        rmdirSync(directory);
      } catch {
        // not empty or gone: leave it
      }
    }
  };
}

/**
 * Why a process cannot run as `uid` here, or undefined when it can: root is needed to change user, and the node
 * binary (and every directory above it) must be executable by that user, which a private temporary
 * directory is not.
 */
export function runAsProblem(uid: number): string | undefined {
  if (process.getuid?.() !== 0) return 'needs root to run a process as another user';
  const result = spawnSync(process.execPath, ['-e', ''], { uid, gid: uid, timeout: 5_000 });
  if (result.error !== undefined || result.status !== 0) {
    return `${process.execPath} cannot run as uid ${uid} (${result.error?.message ?? `exit ${String(result.status)}`}): make it and its directories executable by others`;
  }
  // The processes load the repository's code (tsx, dist/): a checkout in a private directory is out of reach.
  const repository = spawnSync(process.execPath, ['--import', 'tsx', '-e', ''], { uid, gid: uid, cwd: REPO_ROOT, timeout: 10_000 });
  if (repository.status !== 0) return `uid ${uid} cannot read the repository at ${REPO_ROOT}: make it and its directories readable by others`;
  return undefined;
}
