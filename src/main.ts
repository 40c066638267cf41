#!/usr/bin/env node
/**
 * One image, two modes. `mode=sidecar` runs the drain server injected next to Envoy; anything else (or
 * `mode=webhook`) runs the admission webhook. The commands (COMMANDS below): `inject -f FILE` is the offline
 * injector, `uninject -f FILE` its inverse, `check` reports whether every Envoy pod is protected. Each mode and
 * command is imported lazily so that the sidecar never pays for the webhook's dependencies in memory or start-up
 * time (the sidecar's is one bundled file: see src/sidecar/main.ts). Keep this module's own imports to what every
 * mode needs.
 */
import { processIo } from './cli/io.js';
import { reportFailure, UsageError } from './errors.js';

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

type Command = (args: readonly string[], io: ReturnType<typeof processIo>) => Promise<number>;

/**
 * The commands, each a first argument: loaded only when run. entry.cts restates their names (see there why)
 * and test/sidecar/bundle.test.ts holds both to the same answers.
 */
const COMMANDS: Readonly<Record<string, () => Promise<Command>>> = {
  inject: async () => (await import('./cli/inject.js')).runInjectCommand,
  uninject: async () => (await import('./cli/uninject.js')).runUninjectCommand,
  check: async () => (await import('./cli/check.js')).runCheckCommand,
};

async function main(): Promise<void> {
  const command = process.argv[2] === undefined ? undefined : COMMANDS[process.argv[2]];
  if (command !== undefined) {
    process.exitCode = await (await command())(process.argv.slice(3), processIo());
    return;
  }
  const { mode, args } = splitMode(process.argv.slice(2));
  if (mode === 'sidecar') {
    // The bundle the image runs (see entry.cts), so that this path runs the same code.
    const requireFromHere = process.getBuiltinModule('node:module').createRequire(import.meta.url);
    const { runSidecarCommand } = requireFromHere('./sidecar.cjs') as typeof import('./sidecar/command.js');
    await runSidecarCommand(args);
  } else {
    const { startWebhookFromArgs } = await import('./webhook/main.js');
    await startWebhookFromArgs(args, process.env);
  }
}

// A user-facing error (a bad flag, an unreadable certificate, a port in use) is printed as its message alone.
main().catch((error: unknown) => reportFailure(error));
