/** `envoy-shutdown-manager uninject FILE|DIRECTORY|- ...`: offline injection undone, writing the result to stdout. */
import { readSettings } from '../config/settings.js';
import { EXIT_OK } from '../errors.js';
import type { CommandIo } from './io.js';
import { INPUT_HELP, joinOutputs, missingInput, readInputs, runCommand, summaryOf, takeInputs } from './input.js';
import { uninjectManifests } from './manifests.js';

const USAGE = `Usage: envoy-shutdown-manager uninject FILE|DIRECTORY|- ...
       envoy-shutdown-manager uninject -f FILE [-f FILE ...]
       kubectl get deploy envoy -o yaml | envoy-shutdown-manager uninject - | kubectl apply -f -

Removes what injection added to Pods and pod templates (the shutdown-manager container, its state volume,
its hooks, the status annotation shutdown-manager.io/status) and restores what it replaced, as that
annotation recorded it: Envoy's preStop hook and args, terminationGracePeriodSeconds, the preStop hooks
of the wait containers. From a template left to the webhook (what inject writes without --manual) it
removes the opt-in annotation shutdown-manager.io/inject. Templates with neither annotation are written
back byte for byte.
${INPUT_HELP}
`;

export async function runUninjectCommand(args: readonly string[], io: CommandIo): Promise<number> {
  return runCommand('uninject', USAGE, io, async () => {
    const { names, recursive, rest } = takeInputs(args, {});
    readSettings({}, rest, io.env); // --help, and an unknown flag is a usage error
    if (names.length === 0) return missingInput(io, 'uninject');
    const results = (await readInputs(names, recursive, io)).map((input) => uninjectManifests(input.text, input.name));
    for (const note of results.flatMap((result) => result.notes)) io.stderr.write(`note: ${note}\n`);
    io.stderr.write(summaryOf(results));
    if (results.every((result) => result.changed === 0)) io.stderr.write('note: nothing uninjected: no pod template carries annotation shutdown-manager.io/status or shutdown-manager.io/inject: enabled\n');
    io.stdout.write(joinOutputs(results));
    return EXIT_OK;
  });
}
