#!/usr/bin/env node
/**
 * Writes the sidecar's compile cache, dist/compile-cache/: the V8 code of its bundles as the sidecar compiles them,
 * which src/entry.cts starts from. It is Node's module compile cache (module.enableCompileCache() and
 * module.flushCompileCache(), Node 22.1+; the Node docs' "Module compile cache"), and valid only for the Node that
 * wrote it: the Dockerfile runs this in the runtime stage, with the node binary that runs the sidecar.
 *
 *   node dist/sidecar-compile-cache.cjs            the cache of the current user
 *   node dist/sidecar-compile-cache.cjs 65532 …    as root: the cache of each user given, each written as that user
 *
 * Node keeps each user's cache in a directory of its own (named by Node's version, the architecture, V8's cache
 * tag and the uid), and the sidecar runs as the image's user, or as Envoy's where it must connect to Envoy's admin
 * socket (Contour's, 65534: src/inject/admin-endpoint.ts). Written as that user, its files (mode 0600) are readable
 * by it alone; the directory stays root's, and the image's filesystem is read-only in a pod anyway: the sidecar
 * only reads it. Any other user, or another Node, starts without it, as before.
 *
 * Only the code V8 compiles when it loads a bundle is cached, not what it compiles later as functions first run:
 * that is how Node makes the cache (right after compiling a module), so requiring each bundle is enough. V8 keeps
 * its flags in the cache and rejects it under others: the bundles are compiled in the sidecar's order, the start
 * bundle with V8's defaults, the others after the flags the sidecar sets before it loads them (src/sidecar/command.ts).
 */
import type * as NodeModule from 'node:module';

/** Node 22.1's API, which @types/node 20 does not declare. */
interface CompileCache {
  enableCompileCache?: (directory: string) => { status: number; message?: string; directory?: string };
  flushCompileCache?: () => void;
  constants?: { compileCacheStatus?: { ENABLED: number } };
}

const fs = require('node:fs') as typeof import('node:fs');
const { join } = require('node:path') as typeof import('node:path');
const DIRECTORY = join(__dirname, 'compile-cache');

function writeOwn(): void {
  const compileCache = require('node:module') as typeof NodeModule & CompileCache;
  const { enableCompileCache, flushCompileCache } = compileCache;
  if (enableCompileCache === undefined || flushCompileCache === undefined) throw new Error(`Node ${process.version} has no module compile cache (22.1+)`);
  const enabled = enableCompileCache(DIRECTORY);
  if (enabled.status !== compileCache.constants?.compileCacheStatus?.ENABLED) throw new Error(`no compile cache in ${DIRECTORY}: ${enabled.message ?? `status ${enabled.status}`}`);
  const { SIDECAR_V8_FLAGS } = require('./sidecar.cjs') as typeof import('./sidecar/command.js');
  const v8 = require('node:v8') as typeof import('node:v8');
  for (const flag of SIDECAR_V8_FLAGS) v8.setFlagsFromString(flag);
  require('./sidecar-engine.cjs');
  require('./sidecar-metrics.cjs');
  flushCompileCache();
  const uid = String(process.getuid?.());
  const own = fs.readdirSync(DIRECTORY).filter((name) => name.endsWith(`-${uid}`));
  const files = own.flatMap((name) => fs.readdirSync(join(DIRECTORY, name)));
  if (files.length < 3) throw new Error(`the compile cache of uid ${uid} holds ${files.length} files, not one per bundle`);
  process.stdout.write(`compile cache of the sidecar for uid ${uid}: ${files.length} files in ${join(DIRECTORY, own[0] ?? '')}\n`);
}

function writeFor(uids: readonly number[]): void {
  if (process.getuid?.() !== 0) throw new Error('writing the compile cache of other users needs root');
  const { spawnSync } = require('node:child_process') as typeof import('node:child_process');
  fs.mkdirSync(DIRECTORY, { recursive: true, mode: 0o755 });
  for (const uid of uids) {
    // Node makes the user's directory itself: the parent is that user's while it writes.
    fs.chownSync(DIRECTORY, uid, uid);
    try {
      const child = spawnSync(process.execPath, [__filename], { uid, gid: uid, stdio: 'inherit' });
      if (child.status !== 0) throw new Error(`writing the compile cache as uid ${uid} failed (${child.error?.message ?? `exit ${String(child.status ?? child.signal)}`})`);
    } finally {
      fs.chownSync(DIRECTORY, 0, 0);
    }
  }
}

try {
  const uids = process.argv.slice(2).map(Number);
  if (uids.some((uid) => !Number.isInteger(uid) || uid < 0)) throw new Error(`uids expected, not ${process.argv.slice(2).join(' ')}`);
  if (uids.length === 0) writeOwn();
  else writeFor(uids);
} catch (error) {
  process.stderr.write(`sidecar-compile-cache: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exitCode = 1;
}
