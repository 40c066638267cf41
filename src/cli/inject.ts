/** `envoy-shutdown-manager inject -f FILE|-`: offline injection, writing the result to stdout. */
import { createHmac } from 'node:crypto';
import { describeSettings, envName, readSettings, type Setting } from '../config/settings.js';
import * as kinds from '../config/values.js';
import { INJECTION_SETTINGS, injectionConfigOf } from '../config/webhook.js';
import { EXIT_FAILURE, EXIT_OK, EXIT_USAGE } from '../errors.js';
import { newShutdownToken } from '../inject/sidecar.js';
import type { CommandIo } from './io.js';
import { commandFailure, readManifestInput, runCommand, takeFilename } from './input.js';
import { injectManifests, nothingInjectedReason, type TokenFor } from './manifests.js';

const INJECT_SETTINGS = {
  ...INJECTION_SETTINGS,
  'token-seed': {
    kind: kinds.text,
    default: '',
    help: 'A secret from which each workload\'s /shutdown token is derived (HMAC of kind/namespace/name), so that output is the same on every run (GitOps). Without it tokens are random. Prefer the environment variable.',
  } satisfies Setting<string>,
  'require-injection': {
    kind: kinds.boolean,
    default: false,
    help: 'Fail (exit 1, nothing on stdout) when no pod template is injected or already injected, e.g. none matches --pod-selector; without it that is a note on stderr and the input is written back.',
  } satisfies Setting<boolean>,
};

const USAGE = `Usage: envoy-shutdown-manager inject -f FILE [flags]
       kubectl get deploy envoy -o yaml | envoy-shutdown-manager inject -f - | kubectl apply -f -

Injects the shutdown-manager into Pods and into the pod templates of Deployments, DaemonSets,
StatefulSets, ReplicaSets, Jobs and CronJobs that match --pod-selector (app=envoy unless set),
exactly as the webhook would.
Reads YAML (several documents, or a List) or JSON; writes the result to stdout, notes to stderr.

Flags:
  -f, --filename FILE
      The manifests to read; - reads standard input.
${describeSettings(INJECT_SETTINGS)}
`;

export async function runInjectCommand(args: readonly string[], io: CommandIo): Promise<number> {
  return runCommand('inject', USAGE, io, async () => {
    const { filename, rest } = takeFilename(args);
    const values = readSettings(INJECT_SETTINGS, rest, io.env);
    if (filename === undefined) return commandFailure(io, 'inject', 'missing -f FILE (or -f - for standard input); see --help', EXIT_USAGE);
    const input = await readManifestInput(filename, io);
    const seed = values['token-seed'];
    const config = injectionConfigOf(values);
    const result = injectManifests(input, config, seed === '' ? newShutdownToken : derivedToken(seed));
    for (const note of result.notes) io.stderr.write(`note: ${note}\n`);
    const nothing = nothingInjectedReason(result.tally, config);
    if (nothing !== undefined && values['require-injection']) return commandFailure(io, 'inject', `${nothing} (--require-injection)`, EXIT_FAILURE);
    if (nothing !== undefined) io.stderr.write(`note: ${nothing}\n`);
    if (seed === '' && values['protect-shutdown'] && result.tally.injected > 0) {
      io.stderr.write(`note: /shutdown tokens are random, so every run changes the pod templates it injects; set ${envName('token-seed')} for stable output\n`);
    }
    io.stdout.write(result.output);
    return EXIT_OK;
  });
}

/** The same workload gets the same token on every run, and nobody without the seed can compute it. */
function derivedToken(seed: string): TokenFor {
  return (workload) => createHmac('sha256', seed).update(workload).digest('base64url').slice(0, 32);
}

