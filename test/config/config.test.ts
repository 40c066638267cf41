/** The one config module: Go durations, flags over env over defaults, every mistake named. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { resolvePodDrainPlan } from '../../src/config/annotations.js';
import { drainTimeoutMs } from '../../src/config/drain.js';
import { formatDuration, parseDuration } from '../../src/config/duration.js';
import { ConfigErrors } from '../../src/config/errors.js';
import { parseSidecarConfig } from '../../src/config/sidecar.js';
import { parseWebhookConfig } from '../../src/config/webhook.js';

describe('Go durations', () => {
  const valid: Array<[string, number]> = [
    ['500ms', 500], ['5s', 5000], ['2m', 120_000], ['1m30s', 90_000], ['1.5s', 1500], ['1h', 3_600_000], ['0', 0], ['250us', 0],
  ];
  for (const [text, ms] of valid) test(`${text} = ${ms} ms`, () => assert.equal(parseDuration(text), ms));
  for (const text of ['', '5', '5 s', '-1s', '1d', 's', '1m 30s', '5sec', 'NaN']) {
    test(`${JSON.stringify(text)} is rejected`, () => assert.equal(parseDuration(text), undefined));
  }
  test('formatting is the shortest Go spelling and round-trips', () => {
    for (const ms of [0, 50, 1000, 60_000, 90_000, 290_000, 3_723_004]) {
      assert.equal(parseDuration(formatDuration(ms)), ms);
    }
    assert.equal(formatDuration(290_000), '4m50s');
    assert.equal(formatDuration(50), '50ms');
  });
});

describe('webhook settings', () => {
  test('defaults are Contour\'s', () => {
    const { defaults } = parseWebhookConfig([], {}).injection;
    assert.deepEqual(defaults, {
      'check-interval': 5000,
      'check-delay': 60_000,
      'drain-delay': 0,
      'recover-envoy': true,
      'min-open-connections': 0,
      'long-lived-grace': null,
      'quiet-period': 10_000,
      'serve-port': 8090,
      'admin-address': '127.0.0.1',
      'admin-port': 9001,
      listeners: [],
      pollers: [],
      'termination-grace-period': 300,
      'drain-timeout': 290_000,
    });
  });

  test('a flag wins over its environment variable, which wins over the default', () => {
    const config = parseWebhookConfig(['--check-delay=10s'], {
      SHUTDOWN_MANAGER_CHECK_DELAY: '20s',
      SHUTDOWN_MANAGER_CHECK_INTERVAL: '2s',
    });
    assert.equal(config.injection.defaults['check-delay'], 10_000);
    assert.equal(config.injection.defaults['check-interval'], 2_000);
  });

  test('every bad value is named in one error', () => {
    assert.throws(
      () => parseWebhookConfig(['--port=http', '--check-interval=0s'], { SHUTDOWN_MANAGER_SERVE_PORT: '0' }),
      (error: unknown) => {
        assert.ok(error instanceof ConfigErrors, 'a ConfigErrors');
        assert.deepEqual(
          error.errors.map((e) => e.source),
          ['flag --check-interval', 'environment variable SHUTDOWN_MANAGER_SERVE_PORT', 'flag --port'],
        );
        return true;
      },
    );
  });

  test('an empty environment variable counts as unset; switches take true/false as the next argument too', () => {
    const config = parseWebhookConfig(['--native-sidecar', 'false', '--dev-certs'], { SHUTDOWN_MANAGER_CHECK_DELAY: '' });
    assert.equal(config.injection.defaults['check-delay'], 60_000);
    assert.equal(config.injection.nativeSidecar, false);
    assert.equal(config.devCerts, true);
    assert.equal(parseWebhookConfig(['--native-sidecar', 'true'], {}).injection.nativeSidecar, true);
  });

  test('errors name their setting, for metrics and programs', () => {
    assert.throws(
      () => parseWebhookConfig(['--check-delay=soon'], {}),
      (error: unknown) => error instanceof ConfigErrors && error.errors[0]?.setting === 'check-delay',
    );
  });

  test('an unknown flag is refused', () => {
    assert.throws(() => parseWebhookConfig(['--chek-delay=1s'], {}), /--chek-delay/);
  });

  test('defaults that cannot work together are refused at start', () => {
    assert.throws(
      () => parseWebhookConfig(['--termination-grace-period=30'], {}),
      /flag --check-delay \(or SHUTDOWN_MANAGER_CHECK_DELAY\): "1m" is not valid; expected a check delay shorter than the drain deadline of 27s/,
    );
  });
});

describe('sidecar settings', () => {
  test('read the flags the webhook injects', () => {
    const config = parseSidecarConfig(
      ['--check-interval=50ms', '--check-delay=0s', '--min-open-connections=2', '--serve-port=18090', '--admin-port=19001', '--drain-timeout=4m50s'],
      {},
    );
    assert.equal(config['check-interval'], 50);
    assert.equal(config['check-delay'], 0);
    assert.equal(config['min-open-connections'], 2);
    assert.equal(config['serve-port'], 18090);
    assert.equal(config['admin-port'], 19001);
    assert.equal(config['drain-timeout'], 290_000);
  });
});

describe('per-pod annotations', () => {
  const defaults = parseWebhookConfig([], {}).injection.defaults;

  test('override the defaults, other annotations are ignored', () => {
    const { plan, unknownAnnotations } = resolvePodDrainPlan(
      {
        'shutdown-manager.io/check-interval': '100ms',
        'shutdown-manager.io/termination-grace-period': '2m',
        'shutdown-manager.io/envoy-admin-port': '15000',
        'example.com/check-delay': 'not ours',
      },
      defaults,
      30,
    );
    assert.equal(plan['check-interval'], 100);
    assert.equal(plan['termination-grace-period'], 120);
    assert.equal(plan['drain-timeout'], 110_000); // 120 s minus the 10 s cap on the margin
    assert.equal(plan['admin-port'], 15000);
    assert.equal(plan['check-delay'], defaults['check-delay']);
    assert.deepEqual(unknownAnnotations, []);
  });

  test('a pod that already allows longer keeps its grace period, and is checked against it', () => {
    // 10m of check delay would not fit in the default 300 s, but fits in the pod's own 900 s.
    const { plan } = resolvePodDrainPlan({ 'shutdown-manager.io/check-delay': '10m' }, defaults, 900);
    assert.equal(plan['termination-grace-period'], 900);
    assert.equal(plan['drain-timeout'], 890_000);
    assert.equal(resolvePodDrainPlan(undefined, defaults, 30).plan['termination-grace-period'], 300, 'raised');
    assert.equal(resolvePodDrainPlan(undefined, defaults, undefined).plan['termination-grace-period'], 300);
    const asked = resolvePodDrainPlan({ 'shutdown-manager.io/termination-grace-period': '20', 'shutdown-manager.io/check-delay': '1s' }, defaults, 900);
    assert.equal(asked.plan['termination-grace-period'], 20, 'an annotation is taken as asked');
  });

  test('a pod allowing days gets a deadline of a day, which its sidecar accepts', () => {
    const { plan } = resolvePodDrainPlan(undefined, defaults, 100_000);
    assert.equal(plan['termination-grace-period'], 100_000);
    assert.equal(plan['drain-timeout'], 24 * 3_600_000);
    assert.equal(parseSidecarConfig(['--drain-timeout=24h'], {})['drain-timeout'], plan['drain-timeout']);
  });

  test('durations beyond a day are refused: Node timers would overflow', () => {
    assert.throws(
      () => resolvePodDrainPlan({ 'shutdown-manager.io/check-interval': '720h' }, defaults, undefined),
      /annotation shutdown-manager.io\/check-interval: "720h" is not valid; expected a Go duration such as 500ms, 5s, 2m or 1m30s, greater than zero and at most 24h/,
    );
    assert.throws(() => parseSidecarConfig(['--drain-timeout=600h'], {}), /flag --drain-timeout: "600h"/);
  });

  test('long-lived-grace: off by default, a webhook flag sets the default, an annotation overrides it (off included)', () => {
    assert.equal(defaults['long-lived-grace'], null, 'off: long-lived connections hold the drain until the deadline');
    const fromWebhook = parseWebhookConfig(['--long-lived-grace=2m'], {}).injection.defaults;
    assert.equal(fromWebhook['long-lived-grace'], 120_000);
    assert.equal(resolvePodDrainPlan(undefined, fromWebhook, undefined).plan['long-lived-grace'], 120_000);
    assert.equal(resolvePodDrainPlan({ 'shutdown-manager.io/long-lived-grace': '30s' }, defaults, undefined).plan['long-lived-grace'], 30_000);
    for (const off of ['off', 'OFF', '', ' off ']) {
      assert.equal(resolvePodDrainPlan({ 'shutdown-manager.io/long-lived-grace': off }, fromWebhook, undefined).plan['long-lived-grace'], null, JSON.stringify(off));
    }
    assert.equal(resolvePodDrainPlan({ 'shutdown-manager.io/long-lived-grace': '0' }, defaults, undefined).plan['long-lived-grace'], 0, '0 is a grace of none, not off');
    assert.equal(parseSidecarConfig(['--long-lived-grace=500ms'], {})['long-lived-grace'], 500);
    assert.equal(parseSidecarConfig([], {})['long-lived-grace'], null);
  });

  test('long-lived-grace: a bad value is refused with the form, and a number without unit is told so', () => {
    assert.throws(
      () => resolvePodDrainPlan({ 'shutdown-manager.io/long-lived-grace': 'forever' }, defaults, undefined),
      /annotation shutdown-manager.io\/long-lived-grace: "forever" is not valid; expected a Go duration such as 500ms, 5s, 2m or 1m30s, at most 24h, or "off" \(or empty\) for none/,
    );
    assert.throws(() => parseSidecarConfig(['--long-lived-grace=30'], {}), /flag --long-lived-grace: "30" is not valid; .*but a number alone has no unit: write 30s or 5m/);
    assert.throws(() => parseSidecarConfig(['--long-lived-grace=25h'], {}), /flag --long-lived-grace: "25h"/);
  });

  test('a listeners annotation restricts counting', () => {
    const { plan } = resolvePodDrainPlan({ 'shutdown-manager.io/listeners': '0.0.0.0_8080, 0.0.0.0_8443' }, defaults, undefined);
    assert.deepEqual(plan.listeners, ['0.0.0.0_8080', '0.0.0.0_8443']);
  });

  test('the safety margin is a tenth of the grace period, between 1 s and 10 s', () => {
    assert.equal(drainTimeoutMs(2), 1_000);
    assert.equal(drainTimeoutMs(20), 18_000);
    assert.equal(drainTimeoutMs(30), 27_000);
    assert.equal(drainTimeoutMs(300), 290_000);
    assert.equal(drainTimeoutMs(3600), 3_590_000);
  });
});
