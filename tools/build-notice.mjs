/**
 * `npm run build`'s first step: says that compiling may take a while, only when it will compile. A command that
 * builds first (npm start, npm run check, ...) on an up-to-date dist/ prints nothing of the build (issue 35: a
 * "Compiling..." banner on every run, twice for npm start). Stale means a source, tsconfig, the lock file or the
 * bundler is newer than the last bundling's stamp (tools/bundle.mjs writes dist/.bundled), or there is none.
 * Plain JavaScript run by node, as tools/bundle.mjs, so that the build needs nothing else.
 */
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

const STAMP = join('dist', '.bundled');
const INPUTS = ['src', 'tsconfig.json', 'tsconfig.build.json', 'package-lock.json', 'tools/bundle.mjs'];

/** The newest modification time under `path` (a file or a directory walked whole), 0 when it does not exist. */
function newestMs(path) {
  if (!existsSync(path)) return 0;
  const stat = statSync(path);
  if (!stat.isDirectory()) return stat.mtimeMs;
  return readdirSync(path).reduce((newest, name) => Math.max(newest, newestMs(join(path, name))), stat.mtimeMs);
}

const stampMs = existsSync(STAMP) ? statSync(STAMP).mtimeMs : 0;
if (INPUTS.some((input) => newestMs(input) > stampMs)) {
  process.stderr.write('Compiling src/ into dist/ (tsc -b: up to a minute the first time, a second or two when little changed)...\n');
}
