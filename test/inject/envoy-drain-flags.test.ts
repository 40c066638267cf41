/**
 * The injection rules for Envoy's own drain flags (src/inject/envoy-drain-flags.ts), as a pure function: when
 * `--drain-strategy immediate --drain-time-s <deadline>` are appended to Envoy's args, when the args are left
 * alone, and which warnings the flags a pod already sets earn. test/webhook/mutate.test.ts checks the same rules
 * end to end through the webhook (the warnings' `shutdown-manager: ` prefix, the annotation that turns them off).
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { V1Container } from '@kubernetes/client-node';
import type { PodDrainValues } from '../../src/config/drain.js';
import { parseWebhookConfig } from '../../src/config/webhook.js';
import { decideEnvoyDrainFlags, imageRelease, type EnvoyDrainFlagsDecision } from '../../src/inject/envoy-drain-flags.js';

/** The webhook's default plan: grace period 300 s, so a deadline of 290 s; check-delay 1m; no drain-delay. */
const PLAN: PodDrainValues = parseWebhookConfig([], {}).injection.defaults;
const FLAGS_290 = ['--drain-strategy', 'immediate', '--drain-time-s', '290'];
const CANNOT_TELL = 'cannot tell if "envoy" runs envoy: add --drain-strategy immediate --drain-time-s 290 yourself';
const OUTLASTS_600 = "Envoy's gradual --drain-time-s 600 outlasts the 4m50s left: use --drain-strategy immediate";

function decide(container: Omit<V1Container, 'name'>, plan: PodDrainValues = PLAN): EnvoyDrainFlagsDecision {
  return decideEnvoyDrainFlags({ name: 'envoy', image: 'envoyproxy/envoy:v1.31.2', ...container }, plan);
}

describe('decideEnvoyDrainFlags: a container without the flags', () => {
  test('the default plan and its deadline are the ones the cases below assume', () => {
    assert.deepEqual([PLAN['drain-timeout'], PLAN['check-delay'], PLAN['drain-delay']], [290_000, 60_000, 0]);
  });

  const runsEnvoy: Array<[string, Omit<V1Container, 'name'>]> = [
    ['command: [envoy]', { command: ['envoy'], args: ['-c', '/e.yaml'] }],
    ['command: an absolute path to envoy', { command: ['/usr/local/bin/envoy'], args: ['-c', '/e.yaml'] }],
    ['args whose first word is envoy, under any image', { image: 'registry.local/edge/proxy:3', args: ['envoy', '-c', '/e.yaml'] }],
    ["flag-first args under Envoy's image (its entrypoint prepends envoy)", { args: ['-c', '/e.yaml'] }],
    ['flag-first args under envoy-distroless from a mirror', { image: 'mirror.local:5000/envoyproxy/envoy-distroless:v1.31.2', args: ['-c', '/e.yaml'] }],
    ['flag-first args under envoy-contrib', { image: 'envoyproxy/envoy-contrib:contrib-v1.36.2', args: ['-c', '/e.yaml'] }],
  ];
  for (const [how, container] of runsEnvoy) {
    test(`appends them after the container's own args: ${how}`, () => {
      assert.deepEqual(decide(container), { action: 'add', args: [...(container.args ?? []), ...FLAGS_290] });
    });
  }

  test("leaves the container's own args array untouched", () => {
    const args = ['-c', '/e.yaml'];
    const container: V1Container = { name: 'envoy', command: ['envoy'], args };
    decideEnvoyDrainFlags(container, PLAN);
    assert.deepEqual(container, { name: 'envoy', command: ['envoy'], args: ['-c', '/e.yaml'] });
  });

  test('the drain time is the deadline rounded up to whole seconds, never down', () => {
    const drainTime = (deadlineMs: number): string | undefined => {
      const decision = decide({ command: ['envoy'] }, { ...PLAN, 'drain-timeout': deadlineMs, 'check-delay': 1_000 });
      return decision.action === 'add' ? decision.args.at(-1) : undefined;
    };
    assert.deepEqual([drainTime(40_500), drainTime(41_000), drainTime(40_001), drainTime(290_000)], ['41', '41', '41', '290']);
  });

  test('each flag and its value are separate elements (Envoy knows no --flag=value form)', () => {
    const decision = decide({ command: ['envoy'] });
    assert.equal(decision.action, 'add');
    assert.ok(decision.action === 'add' && decision.args.every((arg) => !arg.includes('=')), `no "=" in ${JSON.stringify(decision)}`);
  });

  const unknown: Array<[string, Omit<V1Container, 'name'>]> = [
    ["the image's default command (neither command nor args)", {}],
    ['a shell wrapper', { command: ['/bin/sh', '-c'], args: ['exec envoy -c /e.yaml'] }],
    ['flag-first args under another image', { image: 'registry.local/edge/proxy:3', args: ['-c', '/e.yaml'] }],
    ['a command only named like envoy', { command: ['/usr/bin/envoy-start'], args: ['-c', '/e.yaml'] }],
    ["an image whose name merely contains envoy", { image: 'registry.local/myenvoy:1', args: ['-c', '/e.yaml'] }],
  ];
  for (const [how, container] of unknown) {
    test(`leaves Envoy started by ${how} alone, with a warning giving the flags`, () => {
      assert.deepEqual(decide(container), { action: 'keep', warnings: [CANNOT_TELL] });
    });
  }

  test('the warning names the container and the flags of its own plan', () => {
    const decision = decideEnvoyDrainFlags({ name: 'proxy', image: 'other:1' }, { ...PLAN, 'drain-timeout': 40_500 });
    assert.deepEqual(decision, { action: 'keep', warnings: ['cannot tell if "proxy" runs envoy: add --drain-strategy immediate --drain-time-s 41 yourself'] });
  });

  test('a longer flag that starts like a drain flag is not one: the flags are still added', () => {
    const args = ['-c', '/e.yaml', '--drain-time-seconds', '5'];
    assert.deepEqual(decide({ command: ['envoy'], args }), { action: 'add', args: [...args, ...FLAGS_290] });
  });
});

describe('decideEnvoyDrainFlags: a container that sets a flag already', () => {
  const fitting: Array<[string, Omit<V1Container, 'name'>]> = [
    ['separate elements', { command: ['envoy'], args: ['-c', '/e.yaml', '--drain-strategy', 'immediate', '--drain-time-s', '290'] }],
    ['flag and value in one element, as Contour writes them', { command: ['envoy'], args: ['-c /e.yaml', '--drain-time-s 120', '--drain-strategy immediate'] }],
    ['--flag=value', { command: ['envoy'], args: ['--drain-strategy=immediate', '--drain-time-s=600'] }],
    ['quoted values inside a shell wrapper', { command: ['/bin/sh', '-c'], args: ['exec envoy -c /e.yaml --drain-strategy "immediate" --drain-time-s \'600\''] }],
    ['flags in the command rather than the args', { command: ['envoy', '--drain-strategy', 'immediate'], args: ['-c', '/e.yaml'] }],
    ['a gradual drain that ends before the deadline', { command: ['envoy'], args: ['--drain-strategy', 'gradual', '--drain-time-s', '240'] }],
    ['an immediate drain longer than the deadline (only a gradual one is stretched over it)', { command: ['envoy'], args: ['--drain-strategy', 'immediate', '--drain-time-s', '900'] }],
    ['a drain time that cannot be read here (a variable)', { command: ['envoy'], args: ['--drain-time-s', '$(DRAIN_TIME)'] }],
  ];
  for (const [how, container] of fitting) {
    test(`keeps the args, without a warning: ${how}`, () => {
      assert.deepEqual(decide(container), { action: 'keep', warnings: [] });
    });
  }

  test("Envoy's defaults set explicitly (gradual over 600 s) earn a warning: the drain outlasts the deadline", () => {
    assert.deepEqual(decide({ command: ['envoy'], args: ['--drain-strategy', 'gradual', '--drain-time-s', '600'] }), { action: 'keep', warnings: [OUTLASTS_600] });
  });

  test("a flag without its value, or the strategy alone, counts as Envoy's default for the rest (gradual, 600 s)", () => {
    assert.deepEqual(decide({ command: ['envoy'], args: ['-c', '/e.yaml', '--drain-strategy'] }), { action: 'keep', warnings: [OUTLASTS_600] });
    assert.deepEqual(decide({ command: ['envoy'], args: ['--drain-strategy', 'gradual'] }), { action: 'keep', warnings: [OUTLASTS_600] });
    assert.deepEqual(decide({ command: ['envoy'], args: ['--drain-strategy', 'immediate'] }), { action: 'keep', warnings: [] }, 'control: immediate is not stretched');
  });

  test('drain-delay shortens the time a gradual drain has: 250 s fits in 4m50s, not in 3m50s', () => {
    const args = ['--drain-time-s', '250'];
    assert.deepEqual(decide({ command: ['envoy'], args }), { action: 'keep', warnings: [] });
    assert.deepEqual(decide({ command: ['envoy'], args }, { ...PLAN, 'drain-delay': 60_000 }), {
      action: 'keep',
      warnings: ["Envoy's gradual --drain-time-s 250 outlasts the 3m50s left: use --drain-strategy immediate"],
    });
  });

  test('a drain time below check-delay warns when Envoy may be older than 1.29 (its listeners close after the drain time)', () => {
    const below = (image: string): EnvoyDrainFlagsDecision => decide({ image, command: ['envoy'], args: ['--drain-strategy', 'immediate', '--drain-time-s', '30'] });
    assert.deepEqual(below('envoyproxy/envoy:distroless-v1.28.7'), {
      action: 'keep',
      warnings: ["Envoy's --drain-time-s 30 < check-delay 1m: listeners close while load balancers still send"],
    });
    assert.deepEqual(below('envoyproxy/envoy:latest'), {
      action: 'keep',
      warnings: ["Envoy's --drain-time-s 30 < check-delay 1m: before Envoy 1.29, listeners close while LBs still send"],
    });
    assert.deepEqual(below('envoyproxy/envoy:v1.29.0'), { action: 'keep', warnings: [] }, 'from 1.29 the drain keeps the listeners open (skip_exit)');
    assert.deepEqual(below('envoyproxy/envoy:v1.31.2'), { action: 'keep', warnings: [] }, 'a later release, the same');
  });

  test("the check-delay warning names the plan's own check-delay, and a gradual drain that fits earns no other", () => {
    const plan = { ...PLAN, 'drain-timeout': 20_000, 'check-delay': 15_000 };
    const decision = decide({ image: 'envoyproxy/envoy:v1.28.7', command: ['envoy'], args: ['--drain-time-s', '10'] }, plan);
    assert.deepEqual(decision, {
      action: 'keep',
      warnings: ["Envoy's --drain-time-s 10 < check-delay 15s: listeners close while load balancers still send"],
    });
  });
});

describe('imageRelease', () => {
  test("reads Envoy's release from the tags Envoy's images carry", () => {
    const release = (image: string): string | undefined => imageRelease(image)?.text;
    assert.deepEqual(
      ['envoyproxy/envoy:v1.39.0', 'envoyproxy/envoy:distroless-v1.35.8', 'envoyproxy/envoy-contrib:contrib-v1.36.2', 'envoy:1.30.1'].map(release),
      ['1.39.0', '1.35.8', '1.36.2', '1.30.1'],
    );
  });

  test('null for a tag that names no release, no tag, or no image', () => {
    assert.deepEqual(['envoyproxy/envoy:latest', 'envoyproxy/envoy', 'registry.local/envoy:v1.39', 'registry.local/envoy:v1.39.0-rc', ''].map(imageRelease), [null, null, null, null, null]);
    assert.equal(imageRelease(undefined), null);
  });
});
