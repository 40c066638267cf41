#!/usr/bin/env node
/**
 * One image, two modes. `mode=sidecar` runs the drain server injected next to Envoy; anything else
 * (or `mode=webhook`) runs the admission webhook. `inject -f FILE` is the offline injector. Each mode is imported lazily so that the sidecar
 * never pays for the webhook's dependencies in memory or start-up time (the sidecar's is one bundled file: see
 * src/sidecar/main.ts). Keep this module's own imports to what every mode needs.
 */
import { processIo } from './cli/io.js';
import { describeFailure, UsageError } from './errors.js';

type Mode = 'webhook' | 'sidecar';

function splitMode(argv: readonly string[]): { mode: Mode; args: string[] } {
  const args = [...argv];
  const index = args.findIndex((arg) => arg.startsWith('mode='));
  if (index === -1) return { mode: 'webhook', args };
  const [modeArg] = args.splice(index, 1);
  const mode = modeArg?.slice('mode='.length);
  if (mode !== 'webhook' && mode !== 'sidecar') {
    throw new UsageError(`unknown ${modeArg}; expected mode=webhook (the default) or mode=sidecar`);
  }
  return { mode, args };
}

async function main(): Promise<void> {
  if (process.argv[2] === 'inject') {
    const { runInjectCommand } = await import('./cli/inject.js');
    process.exitCode = await runInjectCommand(process.argv.slice(3), processIo());
    return;
  }
  const { mode, args } = splitMode(process.argv.slice(2));
  if (mode === 'sidecar') {
    const { startSidecarFromArgs } = await import('./sidecar/main.js');
    await startSidecarFromArgs(args, process.env);
  } else {
    const { startWebhookFromArgs } = await import('./webhook/main.js');
    await startWebhookFromArgs(args, process.env);
  }
}

// A user-facing error (a bad flag, an unreadable certificate, a port in use) is printed as its message alone.
main().catch((error: unknown) => {
  const { text, exitCode } = describeFailure(error);
  process.stderr.write(`envoy-shutdown-manager: ${text}\n`);
  process.exitCode = exitCode;
});
