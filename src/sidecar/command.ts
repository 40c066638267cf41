/**
 * `mode=sidecar` as a program, and the entry of the sidecar's bundle: `npm run build` bundles this module and
 * everything it imports into one CommonJS file, dist/sidecar.cjs (esbuild), which both dist/entry.cjs (the
 * image's entry point) and dist/main.js run. See src/entry.cts for why CommonJS, src/sidecar/main.ts for what
 * the sidecar may import; test/sidecar/bundle.test.ts checks what the bundle loads.
 */
import { reportFailure } from '../errors.js';
import { startSidecarFromArgs } from './main.js';

/** Resolves once the server listens (the process then runs until SIGTERM), or once a failure is reported. */
export function runSidecarCommand(args: readonly string[]): Promise<void> {
  return startSidecarFromArgs(args, process.env).catch(reportFailure);
}
