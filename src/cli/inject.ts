/** `envoy-shutdown-manager inject -f FILE|-`: offline injection, writing the result to stdout. */
import { readFile } from 'node:fs/promises';
import { text as readStream } from 'node:stream/consumers';
import { ConfigErrors } from '../config/errors.js';
import { describeSettings, HelpRequested, type SettingTable } from '../config/settings.js';
import { parseWebhookConfig, WEBHOOK_SETTINGS } from '../config/webhook.js';
import { DRAIN_SETTINGS } from '../config/drain.js';
import { injectManifests, ManifestError } from './manifests.js';

export interface CommandIo {
  readonly stdin: NodeJS.ReadableStream;
  readonly stdout: NodeJS.WritableStream;
  readonly stderr: NodeJS.WritableStream;
  readonly env: NodeJS.ProcessEnv;
}

/** The webhook settings that shape what is injected; the server's own (port, TLS) mean nothing here. */
const INJECTION_FLAGS: SettingTable = Object.fromEntries(
  Object.entries(WEBHOOK_SETTINGS).filter(
    ([name]) => name in DRAIN_SETTINGS || ['termination-grace-period', 'sidecar-image', 'sidecar-image-pull-policy', 'native-sidecar'].includes(name),
  ),
);

const USAGE = `Usage: envoy-shutdown-manager inject -f FILE [flags]
       kubectl get deploy envoy -o yaml | envoy-shutdown-manager inject -f - | kubectl apply -f -

Injects the shutdown-manager into Pods and into the pod templates of Deployments, DaemonSets,
StatefulSets, ReplicaSets, Jobs and CronJobs labelled app: envoy, exactly as the webhook would.
Reads YAML (several documents, or a List) or JSON; writes the result to stdout, notes to stderr.

Flags:
  -f, --filename FILE
      The manifests to read; - reads standard input.
${describeSettings(INJECTION_FLAGS)}
`;

export async function runInjectCommand(args: readonly string[], io: CommandIo): Promise<number> {
  const { filename, rest } = takeFilename(args);
  if (rest.includes('--help') || rest.includes('-h')) {
    io.stdout.write(USAGE);
    return 0;
  }
  for (const arg of rest) {
    const name = arg.replace(/^--/, '').split('=')[0] ?? '';
    if (!(name in INJECTION_FLAGS)) return fail(io, `unknown flag ${arg}; see --help`, 2);
  }
  if (filename === undefined) return fail(io, 'missing -f FILE (or -f - for standard input); see --help', 2);
  try {
    const config = parseWebhookConfig(rest, io.env).injection;
    const input = filename === '-' ? await readStream(io.stdin) : await readInput(filename);
    const result = injectManifests(input, config);
    for (const note of result.notes) io.stderr.write(`note: ${note}\n`);
    io.stdout.write(result.output);
    return 0;
  } catch (error) {
    if (error instanceof HelpRequested) return 0;
    if (error instanceof ConfigErrors) return fail(io, error.message, 2);
    if (error instanceof ManifestError || error instanceof InputError) return fail(io, error.message, 1);
    throw error;
  }
}

class InputError extends Error {
  override readonly name = 'InputError';
}

async function readInput(filename: string): Promise<string> {
  try {
    return await readFile(filename, 'utf8');
  } catch (error) {
    throw new InputError(`cannot read ${filename}: ${(error as NodeJS.ErrnoException).code ?? String(error)}`);
  }
}

function takeFilename(args: readonly string[]): { filename: string | undefined; rest: string[] } {
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

function fail(io: CommandIo, message: string, code: number): number {
  io.stderr.write(`envoy-shutdown-manager inject: ${message}\n`);
  return code;
}
