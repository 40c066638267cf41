/**
 * `envoy-shutdown-manager inject FILE|DIRECTORY|- ...`: by default the webhook's opt-in written into the manifests
 * (opt-in-manifests.ts), with --manual the full offline injection; the result goes to stdout.
 */
import { createHmac } from 'node:crypto';
import { describeSettings, envName, readSettings, type Setting } from '../config/settings.js';
import * as kinds from '../config/values.js';
import { INJECTION_SETTINGS, injectionConfigOf } from '../config/webhook.js';
import { EXIT_FAILURE, EXIT_OK, UsageError } from '../errors.js';
import { newShutdownToken } from '../inject/sidecar.js';
import type { CommandIo } from './io.js';
import { commandFailure, INPUT_HELP, joinOutputs, missingInput, readInputs, runCommand, summaryOf, takeInputs } from './input.js';
import { injectManifests, nothingInjectedReason, type InjectedManifests, type TokenFor } from './manifests.js';
import { namespaceNotes, optInManifests } from './opt-in-manifests.js';

const INJECT_SETTINGS = {
  ...INJECTION_SETTINGS,
  manual: {
    kind: kinds.boolean,
    default: false,
    help: 'Inject the sidecar here, /shutdown token included, as the webhook would (full offline injection, for clusters without the webhook; the token is then in the manifests). Without it, inject writes only the opt-in annotation shutdown-manager.io/inject: enabled on the pod templates, and the webhook injects their pods when they are created, in namespaces labelled shutdown-manager.io/inject=enabled: no token in the manifests.',
  } satisfies Setting<boolean>,
  'token-seed': {
    kind: kinds.text,
    default: '',
    help: 'With --manual: a secret from which each workload\'s /shutdown token is derived (HMAC of kind/namespace/name), so that output is the same on every run (GitOps). Without it tokens are random. Prefer the environment variable.',
  } satisfies Setting<string>,
  'require-injection': {
    kind: kinds.boolean,
    default: false,
    help: 'Fail (exit 1, nothing on stdout) when no pod template is injected (or left to the webhook), or already is, e.g. none matches --pod-selector; without it that is a note on stderr and the input is written back.',
  } satisfies Setting<boolean>,
};

const USAGE = `Usage: envoy-shutdown-manager inject [flags] FILE|DIRECTORY|- ...
       envoy-shutdown-manager inject -f FILE [-f FILE ...] [flags]
       kubectl get deploy envoy -o yaml | envoy-shutdown-manager inject - | kubectl apply -f -

For Pods and the pod templates of Deployments, DaemonSets, StatefulSets, ReplicaSets, Jobs and CronJobs
that match --pod-selector (app=envoy unless set) and that the webhook would inject, writes the webhook's
opt-in, annotation shutdown-manager.io/inject: enabled. The webhook injects the pods when they are created,
each with a token of its own, in namespaces labelled shutdown-manager.io/inject=enabled (a note names each
namespace the input does not show labelled): no /shutdown token is written. With --manual, injects the
sidecar itself, token included, exactly as the webhook would. The injection flags below are the webhook's:
with --manual they set what is injected; without, they say how the webhook is configured, for the same
checks (a Job's template is left alone unless --native-sidecar, ...).
${INPUT_HELP}
${describeSettings(INJECT_SETTINGS)}
`;

export async function runInjectCommand(args: readonly string[], io: CommandIo): Promise<number> {
  return runCommand('inject', USAGE, io, async () => {
    const { names, recursive, rest } = takeInputs(args, INJECT_SETTINGS);
    const values = readSettings(INJECT_SETTINGS, rest, io.env);
    if (names.length === 0) return missingInput(io, 'inject');
    const seed = values['token-seed'];
    if (!values.manual && seed !== '') {
      throw new UsageError(`--token-seed (or ${envName('token-seed')}) is for --manual: without it no token is written, the webhook draws one for every pod`);
    }
    const inputs = await readInputs(names, recursive, io);
    const config = injectionConfigOf(values);
    const tokenFor = seed === '' ? newShutdownToken : derivedToken(seed);
    const optedIn = values.manual ? [] : inputs.map((input) => optInManifests(input.text, config, input.name));
    const results: InjectedManifests[] = values.manual ? inputs.map((input) => injectManifests(input.text, config, tokenFor, input.name)) : optedIn;
    const tally = results.reduce(
      (sum, { tally: one }) => ({
        templates: sum.templates + one.templates,
        selected: sum.selected + one.selected,
        injected: sum.injected + one.injected,
        upToDate: sum.upToDate + one.upToDate,
      }),
      { templates: 0, selected: 0, injected: 0, upToDate: 0 },
    );
    const nothing = nothingInjectedReason(tally, config);
    for (const note of results.flatMap((result) => result.notes)) io.stderr.write(`note: ${note}\n`);
    if (nothing !== undefined && values['require-injection']) return commandFailure(io, 'inject', `${nothing} (--require-injection)`, EXIT_FAILURE);
    io.stderr.write(summaryOf(results));
    if (nothing !== undefined) io.stderr.write(`note: ${nothing}\n`);
    for (const note of namespaceNotes(optedIn)) io.stderr.write(`note: ${note}\n`);
    if (values.manual && seed === '' && values['protect-shutdown'] && tally.injected > 0) {
      io.stderr.write(`note: /shutdown tokens are random, so every run changes the pod templates it injects; set ${envName('token-seed')} for stable output\n`);
    }
    io.stdout.write(joinOutputs(results));
    return EXIT_OK;
  });
}

/** The same workload gets the same token on every run, and nobody without the seed can compute it. */
function derivedToken(seed: string): TokenFor {
  return (workload) => createHmac('sha256', seed).update(workload).digest('base64url').slice(0, 32);
}

