#!/usr/bin/env node
/**
 * One image, two modes. `mode=sidecar` runs the drain server injected next to Envoy; anything else (or
 * `mode=webhook`) runs the admission webhook. The commands (COMMANDS below): `inject FILE...` writes the
 * webhook's opt-in into manifests (with --manual, the offline injector), `uninject FILE...` its inverse, `check` reports whether every Envoy pod is protected. `--version`
 * works in every mode and command; `--help` alone (no mode, no command) lists them all. Each mode and
 * command is imported lazily so that the sidecar never pays for the webhook's dependencies in memory or start-up
 * time (the sidecar's is one bundled file: see src/sidecar/main.ts). Keep this module's own imports to what every
 * mode needs.
 */
import { processIo } from './cli/io.js';
import { closestName } from './config/settings.js';
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
 * The commands, each a first argument: loaded only when run. A first argument that is a word is always a
 * command (or a mistyped one), never a mode: entry.cts hands every such word to this module by the same rule,
 * and test/sidecar/bundle.test.ts holds both to the same answers.
 */
const COMMANDS: Readonly<Record<string, () => Promise<Command>>> = {
  inject: async () => (await import('./cli/inject.js')).runInjectCommand,
  uninject: async () => (await import('./cli/uninject.js')).runUninjectCommand,
  check: async () => (await import('./cli/check.js')).runCheckCommand,
  // kubectl's and helm's spelling of --version.
  version: async () => async () => {
    await printVersion();
    return 0;
  },
};

/** `envoy-shutdown-manager --help` (no mode, no command): what there is to run, one line each. */
const OVERVIEW = `Usage: envoy-shutdown-manager [mode=webhook|mode=sidecar] [flags]
       envoy-shutdown-manager inject|uninject|check [flags]
       envoy-shutdown-manager version

Modes (one image runs both):
  mode=webhook   The admission webhook that injects the shutdown-manager into Envoy pods (the default).
  mode=sidecar   The drain server injected next to Envoy: drains it before the pod stops.

Commands:
  inject         Marks manifests for the webhook to inject (files, directories, -); --manual injects offline.
  uninject       Removes what inject or the webhook added to manifests.
  check          Reports whether every Envoy pod in the cluster is protected (read-only); --pre: whether it can take the install.
  version        Prints the version (as --version does, in every mode and command).

Each one's flags: envoy-shutdown-manager mode=webhook --help, envoy-shutdown-manager mode=sidecar --help,
envoy-shutdown-manager inject --help (and so on). The version: envoy-shutdown-manager --version.
The default mode's flags (mode=webhook --help) follow.

`;

const COMMAND_LIST = `commands: ${Object.keys(COMMANDS).join(', ')}; modes: mode=webhook (the default), mode=sidecar; see --help`;

/** A first argument that is neither a flag nor mode=: a command, or a mistyped one. */
function isWord(arg: string | undefined): arg is string {
  return arg !== undefined && arg !== '' && !arg.startsWith('-') && !arg.startsWith('mode=');
}

async function printVersion(): Promise<void> {
  // Loaded only here: the sidecar's bundle leaves --version to main.js (test/sidecar/bundle.test.ts).
  const { PROJECT_VERSION } = await import('./version.js');
  process.stdout.write(`envoy-shutdown-manager ${PROJECT_VERSION}\n`);
}

async function main(): Promise<void> {
  const first = process.argv[2];
  if (isWord(first)) {
    const command = COMMANDS[first];
    if (command === undefined) {
      const closest = closestName(first, Object.keys(COMMANDS));
      throw new UsageError(`unknown command "${first}"${closest === undefined ? '' : `; did you mean "${closest}"?`} (${COMMAND_LIST})`);
    }
    const args = process.argv.slice(3);
    if (args.includes('--version')) return printVersion();
    process.exitCode = await (await command())(args, processIo());
    return;
  }
  const explicitMode = process.argv.slice(2).some((arg) => arg.startsWith('mode='));
  const { mode, args } = splitMode(process.argv.slice(2));
  if (args.includes('--version')) return printVersion();
  // Then the webhook's own usage: the default mode's flags, which `npm start -- --help` is documented to list.
  if (!explicitMode && (args.includes('--help') || args.includes('-h'))) process.stdout.write(OVERVIEW);
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
