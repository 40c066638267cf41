/**
 * `mode=sidecar` as a program, and the entry of the sidecar's start bundle: `npm run build` bundles this module and
 * everything it imports statically into one CommonJS file, dist/sidecar.cjs (esbuild), which both dist/entry.cjs
 * (the image's entry point) and dist/main.js run; it requires dist/sidecar-engine.cjs, the drain, once the server
 * listens. See src/entry.cts for why CommonJS, src/sidecar/main.ts for what the sidecar may import;
 * test/sidecar/bundle.test.ts checks what each bundle loads.
 */
import { reportFailure } from '../errors.js';
import { startSidecarFromArgs } from './main.js';

/**
 * V8's optimizing compilers, off for the sidecar: it answers a handful of small requests, and under a flood
 * they cost it more memory than anything it does. Thousands of requests a second make dozens of Node's HTTP
 * functions hot at once; Maglev (on by default since Node 22) and then TurboFan compile each on V8's worker
 * threads, in zones of a few hundred KiB that live until the busy main thread installs the code. Measured on
 * Node 24.21, 2,000 new connections a second for 4 s (test/sidecar/server-flood.test.ts): heaptrack put 15 of
 * the 18 MiB of malloc'd memory at its peak in Maglev's zones (10 of them allocated on the worker threads, in
 * glibc's per-thread arenas), and the compilers' own code in the node binary added 8 MiB of resident text.
 * Peaks were 79-97 MiB with both compilers, 72-76 MiB without Maglev, 63-64 MiB without either (a bare
 * node:http server: 83 MiB with both, 59 MiB without). The cost is CPU: 0.35-0.42 ms per request instead of
 * 0.26 ms under that flood (Ignition and Sparkplug, the baseline compiler, run everything).
 * Node 20, whose V8 has no Maglev by default: 74 MiB with TurboFan, 65 MiB without.
 *
 * Neither flag is allowed in NODE_OPTIONS, and the image's entry point also serves the webhook, whose
 * throughput they would cost: they are set here, once the server listens (see runSidecarCommand). V8 reads both
 * when it decides to optimize a function, so they take effect set after start: the figures above were measured with
 * them set as the sidecar started, and npm run bench's floods measure them set as it loads its drain.
 */
export const SIDECAR_V8_FLAGS = ['--no-maglev', '--no-turbofan'] as const;

/** Resolves once the server listens (the process then runs until SIGTERM), or once a failure is reported. */
export function runSidecarCommand(args: readonly string[]): Promise<void> {
  return startSidecarFromArgs(args, process.env, {
    // Not at start: every built-in module loaded after a V8 flag changes is compiled from its source, Node's code
    // cache for it refused (V8 checks a hash of its flags): a bare node:http server setting them before it loads
    // node:http took 4 ms more CPU to its first answer and held 0.3 MiB more (Node 24.22, alternating starts), and
    // so did the sidecar. Set before the engine (the drain's code) loads, which is before anything can get hot:
    // at the first request that needs it, or 100 ms after listening (engine-loader.ts).
    beforeEngine: () => {
      const v8 = process.getBuiltinModule('node:v8');
      for (const flag of SIDECAR_V8_FLAGS) v8.setFlagsFromString(flag);
    },
    // A sidecar that cannot drain must not pass for healthy: it exits, and the kubelet restarts it.
    onEngineFailure: () => process.exit(1),
  }).catch(reportFailure);
}
