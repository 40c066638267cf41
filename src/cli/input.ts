/** What the manifest commands (`inject`, `uninject`) share: `-f FILE|-`, and reading it. */
import { readFile } from 'node:fs/promises';
import { text as readStream } from 'node:stream/consumers';
import { HelpRequested } from '../config/settings.js';
import { EXIT_OK, UserFacingError } from '../errors.js';
import type { CommandIo } from './io.js';

export class InputError extends UserFacingError {
  override readonly name = 'InputError';
}

/** -f is the command's; every other flag goes to the settings reader, which knows `--name=value` and `--name value`. */
export function takeFilename(args: readonly string[]): { filename: string | undefined; rest: string[] } {
  const rest: string[] = [];
  let filename: string | undefined;
  for (let i = 0; i < args.length; i += 1) {
    const arg = args[i] as string;
    const inline = /^(?:-f|--filename)=(.*)$/.exec(arg);
    if (inline) filename = inline[1];
    else if (arg === '-f' || arg === '--filename') {
      filename = args[i + 1];
      i += 1;
    } else rest.push(arg);
  }
  return { filename, rest };
}

/** The file's text, or standard input's for `-`. */
export async function readManifestInput(filename: string, io: CommandIo): Promise<string> {
  if (filename === '-') return readStream(io.stdin);
  try {
    return await readFile(filename, 'utf8');
  } catch (error) {
    throw new InputError(`cannot read ${filename}: ${(error as NodeJS.ErrnoException).code ?? String(error)}`);
  }
}

/** A command's one-line failure on stderr, `envoy-shutdown-manager <command>: <message>`, and its exit code. */
export function commandFailure(io: CommandIo, command: string, message: string, code: number): number {
  io.stderr.write(`envoy-shutdown-manager ${command}: ${message}\n`);
  return code;
}

/**
 * Runs a manifest command's body: --help (HelpRequested) prints `usage`; a user-facing error (bad settings,
 * manifests it cannot edit, an unreadable file) is one line and its exit code; anything else is a bug and
 * propagates.
 */
export async function runCommand(command: string, usage: string, io: CommandIo, body: () => Promise<number>): Promise<number> {
  try {
    return await body();
  } catch (error) {
    if (error instanceof HelpRequested) {
      io.stdout.write(usage);
      return EXIT_OK;
    }
    if (error instanceof UserFacingError) return commandFailure(io, command, error.message, error.exitCode);
    throw error;
  }
}
