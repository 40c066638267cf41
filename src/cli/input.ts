/**
 * What the manifest commands (`inject`, `uninject`) share: their inputs as kubectl takes them (files,
 * directories, `-` for standard input, positional or after -f, several of each), reading them, and writing
 * the results in input order.
 */
import { readdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { text as readStream } from 'node:stream/consumers';
import { closestName, HelpRequested, type SettingTable } from '../config/settings.js';
import * as kinds from '../config/values.js';
import { causeOf, EXIT_OK, EXIT_USAGE, UsageError, UserFacingError } from '../errors.js';
import type { CommandIo } from './io.js';
import { summaryLine, type EditedManifests } from './manifests.js';

export class InputError extends UserFacingError {
  override readonly name = 'InputError';
}

/** The name of standard input in notes and errors. */
export const STDIN_NAME = 'stdin';

/** What inject and uninject read and write, and the input flags they share: one text for both --help pages. */
export const INPUT_HELP = `Reads YAML (several documents, or a List) or JSON from each file, from every .yaml, .yml and .json file of
a directory (sorted by name), from an http:// or https:// URL, and from standard input for -; writes the results to
stdout in that order (separated by ---), one line per resource on stderr saying what became of it, and notes to stderr.

Flags:
  -f, --filename FILE|DIRECTORY|URL|-
      An input, as a positional one is; may be given several times.
  -R, --recursive
      Read directories with their subdirectories.
  --version
      Print the version and exit.`;

/** An input read over HTTP, as kubectl -f and Linkerd's inject read one. */
const URL_INPUT = /^https?:\/\//i;
/** The whole fetch of a URL (redirects and body included) ends by then. */
export const URL_TIMEOUT_MS = 30_000;
/** A manifest larger than this is not one to inject (the API server refuses objects over 1.5 MiB). */
export const MAX_URL_BYTES = 16 * 1024 * 1024;

/** How a directory is read: every file with one of these endings, as kubectl -f does. */
const MANIFEST_FILE = /\.(ya?ml|json)$/i;

export interface InputArgs {
  /** Files, directories and `-`, in the order given. */
  readonly names: readonly string[];
  /** -R: directories are read with their subdirectories. */
  readonly recursive: boolean;
  /** Everything else, for the settings reader. */
  readonly rest: string[];
}

/**
 * Splits the command line into inputs (positional words, `-f NAME`, `--filename=NAME`, everything after `--`)
 * and flags. `table` tells which flags take a value (`--check-delay 30s`), so that the value is not taken for
 * a file; a boolean flag takes the next word only when it is true or false, as the settings reader does.
 */
export function takeInputs(args: readonly string[], table: SettingTable): InputArgs {
  const names: string[] = [];
  const rest: string[] = [];
  let recursive = false;
  for (let i = 0; i < args.length; i += 1) {
    const arg = args[i] as string;
    const inline = /^(?:-f|--filename)=(.*)$/.exec(arg);
    if (arg === '--') {
      names.push(...args.slice(i + 1));
      break;
    } else if (inline) {
      names.push(inline[1] as string);
    } else if (arg === '-f' || arg === '--filename') {
      const name = args[i + 1];
      if (name === undefined) throw new UsageError(`${arg} needs a file, a directory, or - for standard input`);
      names.push(name);
      i += 1;
    } else if (arg === '-R' || arg === '--recursive') {
      recursive = true;
    } else if (arg === '-' || !arg.startsWith('-')) {
      names.push(arg);
    } else {
      misspeltInputFlag(arg, table);
      rest.push(arg);
      const flag = /^--([^=]+)$/.exec(arg)?.[1];
      const setting = flag === undefined ? undefined : table[flag];
      const next = args[i + 1];
      if (setting === undefined || next === undefined) continue;
      const takesNext = setting.kind !== kinds.boolean || ['true', 'false'].includes(next.trim().toLowerCase());
      if (takesNext) {
        rest.push(next);
        i += 1;
      }
    }
  }
  return { names, recursive, rest };
}

/** `--recursve`: the settings reader knows only the settings, so the inputs' own flags are guessed here. */
function misspeltInputFlag(arg: string, table: SettingTable): void {
  const flag = /^--([^=]+)/.exec(arg)?.[1];
  if (flag === undefined || table[flag] !== undefined) return;
  const closest = closestName(flag, [...Object.keys(table), 'help', 'version', 'recursive', 'filename']);
  if (closest === 'recursive' || closest === 'filename') throw new UsageError(`unknown flag --${flag}; did you mean --${closest}? (see --help)`);
}

export interface ManifestInput {
  /** The path as given (for a file found in a directory, the directory joined with its name), or "stdin". */
  readonly name: string;
  readonly text: string;
}

/**
 * Every input's text, in order: a directory gives its .yaml, .yml and .json files sorted by name (with
 * `recursive`, its subdirectories' too, in the same walk). Everything is read before anything is written.
 */
export async function readInputs(names: readonly string[], recursive: boolean, io: CommandIo): Promise<ManifestInput[]> {
  if (names.filter((name) => name === '-').length > 1) throw new UsageError('- (standard input) is named more than once');
  const inputs: ManifestInput[] = [];
  for (const name of names) {
    if (name === '-') {
      inputs.push({ name: STDIN_NAME, text: await readStream(io.stdin) });
      continue;
    }
    if (name === '') throw new UsageError('an empty file name; name a file, a directory, or - for standard input');
    if (URL_INPUT.test(name)) {
      inputs.push({ name, text: await readUrl(name) });
      continue;
    }
    const isDirectory = (await statOf(name)).isDirectory();
    const files = isDirectory ? await manifestFiles(name, recursive) : [name];
    if (isDirectory && files.length === 0) {
      throw new InputError(`${name}: no .yaml, .yml or .json file in this directory${recursive ? ' or below' : ' (-R reads its subdirectories)'}`);
    }
    for (const file of files) inputs.push({ name: file, text: await readText(file) });
  }
  return inputs;
}

async function statOf(name: string): Promise<{ isDirectory(): boolean }> {
  try {
    return await stat(name);
  } catch (error) {
    throw cannotRead(name, error);
  }
}

async function readText(name: string): Promise<string> {
  try {
    return await readFile(name, 'utf8');
  } catch (error) {
    throw cannotRead(name, error);
  }
}

/** A URL's body as text: a 2xx answer within URL_TIMEOUT_MS, at most MAX_URL_BYTES; anything else an InputError naming it. */
async function readUrl(url: string): Promise<string> {
  const signal = AbortSignal.timeout(URL_TIMEOUT_MS);
  const failed = (why: string): InputError => new InputError(`cannot read ${url}: ${why}`);
  try {
    const response = await fetch(url, { signal, redirect: 'follow', headers: { accept: 'application/yaml, application/json, text/plain, */*' } });
    if (!response.ok) {
      await response.body?.cancel();
      throw failed(`the server answered ${response.status}${response.statusText === '' ? '' : ` ${response.statusText}`}`);
    }
    const chunks: Uint8Array[] = [];
    let size = 0;
    for await (const chunk of response.body ?? []) {
      size += chunk.byteLength;
      if (size > MAX_URL_BYTES) throw failed(`larger than ${MAX_URL_BYTES / 1024 / 1024} MiB: not a manifest to inject`);
      chunks.push(chunk);
    }
    return Buffer.concat(chunks).toString('utf8');
  } catch (error) {
    if (error instanceof InputError) throw error;
    throw failed(signal.aborted ? `no whole answer within ${URL_TIMEOUT_MS / 1000} s` : causeOf(error));
  }
}

function cannotRead(name: string, error: unknown): InputError {
  const code = (error as NodeJS.ErrnoException).code;
  const why = code === 'ENOENT' ? 'ENOENT (no such file or directory)' : code === 'EACCES' ? 'EACCES (permission denied)' : (code ?? String(error));
  return new InputError(`cannot read ${name}: ${why}`);
}

/** The manifest files of a directory, sorted by name; with `recursive`, its subdirectories' in the same walk. */
async function manifestFiles(directory: string, recursive: boolean): Promise<string[]> {
  let entries;
  try {
    entries = await readdir(directory, { withFileTypes: true });
  } catch (error) {
    throw cannotRead(directory, error);
  }
  const files: string[] = [];
  for (const entry of entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))) {
    const path = join(directory, entry.name);
    const isDirectory = entry.isDirectory() || (entry.isSymbolicLink() && (await statOf(path)).isDirectory());
    if (isDirectory) {
      if (recursive) files.push(...(await manifestFiles(path, true)));
    } else if (MANIFEST_FILE.test(entry.name)) files.push(path);
  }
  return files;
}

/**
 * The outputs of several inputs as one stream, in input order. JSON outputs alone are concatenated (kubectl
 * reads a stream of JSON objects); otherwise they are YAML documents separated by `---` (JSON is YAML), with a
 * `---` first when the first is JSON, so that kubectl does not take the whole stream for JSON.
 */
export function joinOutputs(results: readonly EditedManifests[]): string {
  const outputs = results.filter((result) => result.output.trim() !== '');
  if (outputs.length <= 1) return outputs[0]?.output ?? results[0]?.output ?? '';
  const ended = (text: string): string => (text.endsWith('\n') ? text : `${text}\n`);
  if (outputs.every((result) => result.json)) return outputs.map((result) => ended(result.output)).join('');
  return outputs
    .map((result, index) => {
      const startsDocument = /^---(\s|$)/.test(result.output);
      return `${(index > 0 || result.json) && !startsDocument ? '---\n' : ''}${ended(result.output)}`;
    })
    .join('');
}

/** The per-resource summary, one line each, for stderr. */
export function summaryOf(results: readonly EditedManifests[]): string {
  return results.flatMap((result) => result.resources.map((resource) => `${summaryLine(resource)}\n`)).join('');
}

/** A command's one-line failure on stderr, `envoy-shutdown-manager <command>: <message>`, and its exit code. */
export function commandFailure(io: CommandIo, command: string, message: string, code: number): number {
  io.stderr.write(`envoy-shutdown-manager ${command}: ${message}\n`);
  return code;
}

/** No input named: a usage error. */
export function missingInput(io: CommandIo, command: string): number {
  return commandFailure(io, command, `missing FILE: name files, directories, or - for standard input (positional or -f); see --help`, EXIT_USAGE);
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
