/** `envoy-shutdown-manager uninject -f FILE|-`: offline injection undone, writing the result to stdout. */
import { readSettings } from '../config/settings.js';
import { EXIT_OK, EXIT_USAGE } from '../errors.js';
import type { CommandIo } from './io.js';
import { commandFailure, readManifestInput, runCommand, takeFilename } from './input.js';
import { uninjectManifests } from './manifests.js';

const USAGE = `Usage: envoy-shutdown-manager uninject -f FILE
       kubectl get deploy envoy -o yaml | envoy-shutdown-manager uninject -f - | kubectl apply -f -

Removes what injection added to Pods and pod templates (the shutdown-manager container, its state volume,
its hooks, the status annotation shutdown-manager.io/status) and restores what it replaced, as that
annotation recorded it: Envoy's preStop hook and args, terminationGracePeriodSeconds, the preStop hooks
of the wait containers. Templates without the annotation are written back byte for byte.
Reads YAML (several documents, or a List) or JSON; writes the result to stdout, notes to stderr.

Flags:
  -f, --filename FILE
      The manifests to read; - reads standard input.
`;

export async function runUninjectCommand(args: readonly string[], io: CommandIo): Promise<number> {
  return runCommand('uninject', USAGE, io, async () => {
    const { filename, rest } = takeFilename(args);
    readSettings({}, rest, io.env); // --help, and an unknown flag is a usage error
    if (filename === undefined) return commandFailure(io, 'uninject', 'missing -f FILE (or -f - for standard input); see --help', EXIT_USAGE);
    const result = uninjectManifests(await readManifestInput(filename, io));
    for (const note of result.notes) io.stderr.write(`note: ${note}\n`);
    if (result.changed === 0) io.stderr.write('note: nothing uninjected: no pod template carries annotation shutdown-manager.io/status\n');
    io.stdout.write(result.output);
    return EXIT_OK;
  });
}

