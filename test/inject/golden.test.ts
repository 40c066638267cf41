/**
 * Golden pod pairs, as Istio's injector tests itself: each case of CASES is an input pod,
 * test/inject/golden/<case>.in.yaml, and the injector's decision on it, <case>.out.yaml: the injected pod and
 * the warnings, or the reason it was skipped, or the denial's message. Each case is named after the rule it holds.
 * For every case the file is checked three ways: the pure injector's decision; the webhook's JSON patch (the diff
 * of the input and the injected pod) applied to the input; and the real webhook over HTTPS. Every injected pod,
 * injected again, must be left alone.
 *
 * Regenerate the .out files after a change that is meant, then review their diff:
 *
 *   UPDATE_GOLDEN=1 node --import tsx --test test/inject/golden.test.ts
 *
 * Without UPDATE_GOLDEN a missing .out file fails; with CI=true the update is refused (test/support/golden.ts).
 * A new case: its .in.yaml, a line in CASES, then the command above.
 *
 * What changes with every release is written as a placeholder, so that a release rewrites no golden file:
 * `<sidecar-image>` for the webhook's --sidecar-image (exact string values only), `<version>` for this
 * project's version in the status annotation's "version". The per-pod token is `<shutdown-token>`: the pure
 * injector is given that, and the webhook's random one is replaced by it. Inputs may use the placeholders too.
 */
import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';
import type { V1Pod } from '@kubernetes/client-node';
import jsonPatch from 'fast-json-patch';
import { ANNOTATIONS } from '../../src/config/annotation-names.js';
import { SHUTDOWN_TOKEN_ENV } from '../../src/config/sidecar.js';
import { parseWebhookConfig, type InjectionConfig } from '../../src/config/webhook.js';
import { injectPod, type InjectionOutcome, type SkipReason } from '../../src/inject/injector.js';
import { podPatch } from '../../src/inject/patch.js';
import { PROJECT_VERSION } from '../../src/version.js';
import { assertSameAsGolden, expectGolden, goldenMode, readGolden, type GoldenFile } from '../support/golden.js';
import { admitReview, podCreateReview, startTestWebhook, type RunningWebhook } from '../support/webhook.js';

const GOLDEN_DIR = fileURLToPath(new URL('golden/', import.meta.url));
const UPDATE_COMMAND = 'UPDATE_GOLDEN=1 node --import tsx --test test/inject/golden.test.ts';
const MODE = goldenMode();

const SIDECAR_IMAGE = '<sidecar-image>';
const VERSION = '<version>';
const SHUTDOWN_TOKEN = '<shutdown-token>';

/** Envoy Gateway's proxies, as the documented overlay selects them (docs/distributions.md). */
const ENVOY_GATEWAY_SELECTOR = '--pod-selector=app.kubernetes.io/name=envoy,app.kubernetes.io/component=proxy';

interface GoldenCase {
  /** The files' name, and the rule in a few words. */
  readonly name: string;
  /** The rule the case holds, in a sentence: it heads the .out file. */
  readonly rule: string;
  /** The decision the rule expects; the .out file says the rest. */
  readonly outcome: InjectionOutcome['action'];
  /** The webhook's flags, when not its defaults. */
  readonly flags?: readonly string[];
}

const CASES: readonly GoldenCase[] = [
  {
    name: 'plain-envoy-gets-sidecar-hooks-volume-and-drain-flags',
    rule: "A Deployment's Envoy gets the sidecar, Envoy's preStop /shutdown, the state volume, Envoy's drain flags and the 300 s grace period; the status records what was replaced.",
    outcome: 'inject',
  },
  {
    name: 'contour-recipe-drains-the-admin-socket-as-envoys-user',
    rule: "Contour's DaemonSet pod without its shutdown-manager (manifests/contour): the admin socket of contour bootstrap is found, its volume mounted in the sidecar, which runs as Envoy's user.",
    outcome: 'inject',
  },
  {
    name: 'contour-as-rendered-keeps-its-own-shutdown-manager',
    rule: "Contour's DaemonSet pod as Contour renders it already has a container named shutdown-manager: left alone, with a warning.",
    outcome: 'skip',
  },
  {
    name: 'envoy-gateway-admin-port-from-inline-config-own-drain-flags-kept',
    rule: "Envoy Gateway's proxy without its shutdown-manager, under the documented selector: admin port 19000 found in --config-yaml, its own drain flags and 360 s kept, the kubelet's probes of port 19003 passed as --probe-ports.",
    outcome: 'inject',
    flags: [ENVOY_GATEWAY_SELECTOR],
  },
  {
    name: 'envoy-gateway-pod-is-outside-the-default-selector',
    rule: "Envoy Gateway's proxy has no app: envoy label: the default --pod-selector leaves it alone, silently.",
    outcome: 'skip',
  },
  {
    name: 'own-prestop-recorded-probes-excluded-longer-grace-kept',
    rule: "Envoy's own preStop is replaced (warned) and recorded for uninject; its liveness and readiness ports become --probe-ports, its admin probe and startup probe do not; its longer grace period is kept and sets the deadline.",
    outcome: 'inject',
  },
  {
    name: 'annotations-override-every-drain-parameter',
    rule: 'Each drain annotation reaches the sidecar as its flag and the hooks and probes follow the serve port; a grace period asked below the pod\'s own is taken, with a warning.',
    outcome: 'inject',
  },
  {
    name: 'annotations-set-sidecar-resources',
    rule: "The resource annotations set the sidecar's requests and limits.",
    outcome: 'inject',
  },
  {
    name: 'older-injection-is-replaced-keeping-its-token',
    rule: 'A pod injected by an older version (0.0.9) is injected again with this version, keeping its token and what the first injection recorded as replaced, with a warning.',
    outcome: 'inject',
  },
  {
    name: 'hot-restarter-wrapper-keeps-args-with-a-warning',
    rule: "Envoy started through hot-restarter.py: appending to its args would not reach Envoy, so they are kept and the warning gives the flags to add.",
    outcome: 'inject',
  },
  {
    name: 'gradual-drain-flags-outlasting-the-deadline-are-kept-with-a-warning',
    rule: "Envoy's own --drain-time-s 600 (gradual by default) is the user's choice: kept, with a warning that it outlasts the drain.",
    outcome: 'inject',
  },
  {
    name: 'native-sidecar-goes-last-among-init-containers',
    rule: 'Annotation native-sidecar: the sidecar is a restartable init container after the pod\'s own, without a preStop hook of its own.',
    outcome: 'inject',
  },
  {
    name: 'wait-containers-wait-for-envoys-drain',
    rule: "A container named by wait-containers gets the /wait preStop hook; its own hook is recorded for uninject and its replacement warned.",
    outcome: 'inject',
  },
  {
    name: 'protect-shutdown-off-gives-hooks-without-a-token',
    rule: 'With --protect-shutdown=false the hooks carry no Authorization header and the sidecar no token.',
    outcome: 'inject',
    flags: ['--protect-shutdown=false'],
  },
  {
    name: 'opt-out-annotation-skips-the-pod',
    rule: 'Annotation inject: "false" leaves a selected pod alone, silently.',
    outcome: 'skip',
  },
  {
    name: 'pod-without-an-envoy-container-is-skipped',
    rule: 'A selected pod with no container called envoy and no Envoy image is left alone, with a warning naming the annotation to set.',
    outcome: 'skip',
  },
  {
    name: 'job-pod-needs-a-native-sidecar',
    rule: "A Job's pod is left alone without annotation native-sidecar: a regular sidecar would keep it from completing.",
    outcome: 'skip',
  },
  {
    name: 'bad-annotation-values-are-named-in-one-denial',
    rule: 'Bad annotation values deny the pod with one message naming each, its value and the accepted form.',
    outcome: 'deny',
  },
  {
    name: 'serve-port-taken-by-a-container-is-denied',
    rule: "A container of the pod on the sidecar's serve port denies the pod, naming the container and the port.",
    outcome: 'deny',
  },
];

/** The decision as a .out file holds it. */
type Golden =
  | { readonly outcome: 'inject'; readonly warnings: readonly string[]; readonly pod: unknown }
  | { readonly outcome: 'skip'; readonly reason: SkipReason; readonly warnings: readonly string[] }
  | { readonly outcome: 'deny'; readonly settings: readonly string[]; readonly message: string };

const configs = new Map<string, InjectionConfig>();

/** The injection settings of a webhook started with the case's flags, as startTestWebhook parses them. */
function configOf(goldenCase: GoldenCase): InjectionConfig {
  const key = flagsKey(goldenCase);
  let config = configs.get(key);
  if (config === undefined) configs.set(key, (config = parseWebhookConfig([...(goldenCase.flags ?? [])], {}).injection));
  return config;
}

function flagsKey(goldenCase: GoldenCase): string {
  return JSON.stringify(goldenCase.flags ?? []);
}

function inputFile(goldenCase: GoldenCase): GoldenFile {
  return { path: join(GOLDEN_DIR, `${goldenCase.name}.in.yaml`), header: [], updateCommand: 'an editor (inputs are written by hand)' };
}

function outputFile(goldenCase: GoldenCase): GoldenFile {
  const flags = goldenCase.flags === undefined ? "the webhook's defaults" : `webhook flags ${goldenCase.flags.join(' ')}`;
  return {
    path: join(GOLDEN_DIR, `${goldenCase.name}.out.yaml`),
    header: [
      `${goldenCase.name}: ${goldenCase.rule}`,
      `The injector's decision on ${goldenCase.name}.in.yaml with ${flags}.`,
      `Written by ${UPDATE_COMMAND}: do not edit by hand.`,
      `${SIDECAR_IMAGE}, ${VERSION} and ${SHUTDOWN_TOKEN} stand for the sidecar image, this project's version and the pod's token.`,
    ],
    updateCommand: UPDATE_COMMAND,
  };
}

/** The input pod, with any placeholder it holds replaced by the value it stands for. */
function inputPod(goldenCase: GoldenCase): V1Pod {
  return fromGolden(readGolden(inputFile(goldenCase)), configOf(goldenCase)) as V1Pod;
}

/** The pure injector's decision on the case's input, as the .out file writes it. */
function decision(goldenCase: GoldenCase): Golden {
  const config = configOf(goldenCase);
  const outcome = injectPod(inputPod(goldenCase), config, SHUTDOWN_TOKEN);
  switch (outcome.action) {
    case 'inject':
      return { outcome: 'inject', warnings: [...outcome.warnings], pod: toGolden(outcome.pod, config) };
    case 'skip':
      return { outcome: 'skip', reason: outcome.reason, warnings: [...outcome.warnings] };
    case 'deny':
      return { outcome: 'deny', settings: [...outcome.settings], message: outcome.message };
  }
}

/** The .out file's data; in update mode the decision the first test of the case has just written there. */
function golden(goldenCase: GoldenCase): Golden {
  return (MODE === 'update' ? decision(goldenCase) : readGolden(outputFile(goldenCase))) as Golden;
}

/** The golden pod with the placeholders replaced, as the API server would hold it (the pod's token stays `<shutdown-token>`). */
function goldenPod(goldenCase: GoldenCase, data: Golden): V1Pod {
  assert.equal(data.outcome, 'inject', `${goldenCase.name}: an injected pod`);
  return fromGolden(data.pod, configOf(goldenCase)) as V1Pod;
}

/** Plain JSON with the release's values written as placeholders. */
function toGolden(pod: unknown, config: InjectionConfig): unknown {
  const plain = JSON.parse(JSON.stringify(pod)) as unknown;
  return withStatusVersion(mapStrings(plain, (text) => (text === config.sidecarImage ? SIDECAR_IMAGE : text)), PROJECT_VERSION, VERSION);
}

/** The inverse of toGolden. */
function fromGolden(pod: unknown, config: InjectionConfig): unknown {
  const plain = structuredClone(pod);
  return withStatusVersion(mapStrings(plain, (text) => (text === SIDECAR_IMAGE ? config.sidecarImage : text)), VERSION, PROJECT_VERSION);
}

function mapStrings(value: unknown, map: (text: string) => string): unknown {
  if (typeof value === 'string') return map(value);
  if (Array.isArray(value)) return value.map((item) => mapStrings(item, map));
  if (typeof value !== 'object' || value === null) return value;
  return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, mapStrings(item, map)]));
}

/** The pod with its status annotation's "version" replaced when it is `from`; other fields and pods are left as they are. */
function withStatusVersion(pod: unknown, from: string, to: string): unknown {
  const annotations = (pod as V1Pod).metadata?.annotations;
  const raw = annotations?.[ANNOTATIONS.status];
  if (annotations === undefined || raw === undefined) return pod;
  const status = JSON.parse(raw) as Record<string, unknown>;
  if (status['version'] !== from) return pod;
  annotations[ANNOTATIONS.status] = JSON.stringify({ ...status, version: to });
  return pod;
}

/**
 * The webhook's warnings as kubectl prints them, prefixed (src/webhook/admission.ts). Not shortened: the webhook cuts
 * a warning too long for kubectl with "…", which then fails here, as a golden warning that does not fit should.
 */
function asSent(warnings: readonly string[]): string[] | undefined {
  return warnings.length === 0 ? undefined : warnings.map((text) => `shutdown-manager: ${text}`);
}

/** The pod as the webhook's patch left it, its random token replaced by the placeholder (a token kept from the input stays). */
function withTokenPlaceholder(admitted: V1Pod, input: V1Pod): V1Pod {
  const spec = admitted.spec;
  const containers = [...(spec?.containers ?? []), ...(spec?.initContainers ?? [])];
  const token = containers.flatMap((container) => container.env ?? []).find((variable) => variable.name === SHUTDOWN_TOKEN_ENV)?.value;
  if (token === undefined || JSON.stringify(input).includes(token)) return admitted;
  return mapStrings(admitted, (text) => text.replaceAll(token, SHUTDOWN_TOKEN)) as V1Pod;
}

/** One webhook per set of flags, started once for the file. */
const webhooks = new Map<string, RunningWebhook>();
before(async () => {
  for (const goldenCase of CASES) {
    const key = flagsKey(goldenCase);
    if (!webhooks.has(key)) webhooks.set(key, await startTestWebhook(goldenCase.flags ?? []));
  }
});
after(() => Promise.all([...webhooks.values()].map((webhook) => webhook.close())));

function webhookOf(goldenCase: GoldenCase): RunningWebhook {
  const webhook = webhooks.get(flagsKey(goldenCase));
  assert.ok(webhook !== undefined, `a webhook was started with the flags of ${goldenCase.name}`);
  return webhook;
}

for (const goldenCase of CASES) {
  describe(goldenCase.name, () => {
    test(`the injector's decision is the golden one (${goldenCase.outcome})`, () => {
      const actual = decision(goldenCase);
      assert.equal(actual.outcome, goldenCase.outcome, `CASES says the rule ${goldenCase.outcome}s this pod`);
      expectGolden(outputFile(goldenCase), actual, MODE);
    });

    if (goldenCase.outcome === 'inject') {
      test("the webhook's JSON patch, applied to the input, gives the golden pod", () => {
        const input = inputPod(goldenCase);
        const outcome = injectPod(input, configOf(goldenCase), SHUTDOWN_TOKEN);
        assert.equal(outcome.action, 'inject', 'injected');
        if (outcome.action !== 'inject') return;
        // As the webhook sends the operations: serialized, so that no value is shared with the injector's pod.
        const operations = JSON.parse(JSON.stringify(podPatch(input, outcome.pod))) as jsonPatch.Operation[];
        const patched = jsonPatch.applyPatch(structuredClone(input), operations, true, false).newDocument;
        const data = golden(goldenCase);
        assertSameAsGolden(toGolden(patched, configOf(goldenCase)), data.outcome === 'inject' ? data.pod : undefined, outputFile(goldenCase));
      });
    }

    test('over HTTPS, the webhook answers what the golden file says', async () => {
      const input = inputPod(goldenCase);
      const { response, pod } = await admitReview(webhookOf(goldenCase), podCreateReview(input));
      const data = golden(goldenCase);
      if (data.outcome === 'deny') {
        assert.equal(response.allowed, false, 'denied');
        assert.deepEqual(response.status, { code: 400, reason: 'BadRequest', message: `envoy-shutdown-manager: ${data.message}` });
        return;
      }
      assert.equal(response.allowed, true, JSON.stringify(response.status));
      assert.deepEqual(response.warnings, asSent(data.warnings));
      if (data.outcome === 'skip') {
        assert.equal(response.patch, undefined, 'admitted unchanged');
        return;
      }
      assertSameAsGolden(toGolden(withTokenPlaceholder(pod as V1Pod, input), configOf(goldenCase)), data.pod, outputFile(goldenCase));
    });

    if (goldenCase.outcome === 'inject') {
      test('the golden pod injected again is left alone: no patch, no warning', async () => {
        const injected = goldenPod(goldenCase, golden(goldenCase));
        const again = injectPod(injected, configOf(goldenCase), 'another-token');
        assert.deepEqual(again, { action: 'skip', reason: 'already-injected', warnings: [] });
        const { response } = await admitReview(webhookOf(goldenCase), podCreateReview(injected));
        assert.equal(response.allowed, true, JSON.stringify(response.status));
        assert.equal(response.patch, undefined, 'no patch');
        assert.equal(response.warnings, undefined, 'no warning');
      });
    }
  });
}

describe('the golden directory', () => {
  test('holds an .in.yaml and an .out.yaml for each case, and nothing else', () => {
    const expected = CASES.flatMap((goldenCase) => [`${goldenCase.name}.in.yaml`, `${goldenCase.name}.out.yaml`]).sort();
    assert.deepEqual(readdirSync(GOLDEN_DIR).sort(), expected, 'a file without its case is stale: delete it, or add its case to CASES');
  });

  test('each case is named once', () => {
    const names = CASES.map((goldenCase) => goldenCase.name);
    assert.deepEqual([...new Set(names)], names, 'two cases would write the same files');
  });
});

describe('the golden files mechanism (test/support/golden.ts)', () => {
  test('UPDATE_GOLDEN=1 updates; unset compares; CI=true refuses the update; another value is refused', () => {
    assert.equal(goldenMode({}), 'compare');
    assert.equal(goldenMode({ CI: 'true' }), 'compare');
    assert.equal(goldenMode({ UPDATE_GOLDEN: '1' }), 'update');
    assert.throws(() => goldenMode({ UPDATE_GOLDEN: '1', CI: 'true' }), /refused in CI/);
    assert.throws(() => goldenMode({ UPDATE_GOLDEN: 'yes' }), /UPDATE_GOLDEN=yes: set it to 1/);
  });

  const missing: GoldenFile = { path: join(GOLDEN_DIR, 'no-such-case.out.yaml'), header: [], updateCommand: UPDATE_COMMAND };

  test('a missing golden file fails, naming it and the command that writes it; nothing is written', () => {
    assert.throws(() => expectGolden(missing, { outcome: 'skip' }, 'compare'), {
      message: `test/inject/golden/no-such-case.out.yaml is missing: write it with ${UPDATE_COMMAND}, and review it`,
    });
    assert.ok(!readdirSync(GOLDEN_DIR).includes('no-such-case.out.yaml'), 'not written');
  });

  test('a difference fails with a line diff under the file name', () => {
    const file = outputFile(CASES[0] as GoldenCase);
    const golden = { outcome: 'skip', reason: 'opted-out', warnings: ['one', 'two'] };
    assert.throws(() => assertSameAsGolden({ ...golden, warnings: ['one', 'three'] }, golden, file), (error: Error) => {
      assert.match(error.message, /^test\/inject\/golden\/plain-envoy-gets-sidecar-hooks-volume-and-drain-flags\.out\.yaml differs \(\+ actual, - golden\)/);
      assert.match(error.message, /\+ actual - expected/);
      assert.match(error.message, /\+ .*- three/);
      assert.match(error.message, /- .*- two/);
      return true;
    });
  });
});
