/** Kubernetes quantities and the sidecar's requests and limits: flags, annotations, every mistake named. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ConfigErrors } from '../../src/config/errors.js';
import { compareQuantities, parseQuantity, QuantityError } from '../../src/config/quantity.js';
import { resolveSidecarResources, resourceRequirements } from '../../src/config/resources.js';
import { parseWebhookConfig } from '../../src/config/webhook.js';

/** The value as a decimal string, exactly (numerator / denominator). */
function exact(text: string): string {
  const { numerator, denominator } = parseQuantity(text);
  const whole = numerator / denominator;
  const rest = numerator % denominator;
  if (rest === 0n) return String(whole);
  const digits = String(denominator).length - 1;
  return `${whole}.${String(rest).padStart(digits, '0').replace(/0+$/, '')}`;
}

describe('Kubernetes quantities', () => {
  const values: Array<[string, string]> = [
    ['100m', '0.1'],
    ['0.5', '0.5'],
    ['.5', '0.5'],
    ['5.', '5'],
    ['2', '2'],
    ['+2', '2'],
    ['-0', '0'],
    ['64Mi', String(64 * 2 ** 20)],
    ['1Gi', String(2 ** 30)],
    ['1.5Gi', String(1.5 * 2 ** 30)],
    ['1Ki', '1024'],
    ['1Ei', String(2n ** 60n)],
    ['1e3', '1000'],
    ['1E3', '1000'],
    ['1e-3', '0.001'],
    ['1E', '1000000000000000000'],
    ['1k', '1000'],
    ['1M', '1000000'],
    ['500M', '500000000'],
    ['1G', '1000000000'],
    ['250u', '0.00025'],
    ['3n', '0.000000003'],
    [' 128Mi ', String(128 * 2 ** 20)],
  ];
  for (const [text, expected] of values) test(`${JSON.stringify(text)} = ${expected}`, () => assert.equal(exact(text), expected));

  const refused: Array<[string, RegExp]> = [
    ['', /empty/],
    ['abc', /not a number with an optional suffix/],
    ['64MB', /not a number/],
    ['64 Mi', /not a number/],
    ['1mi', /not a number/],
    ['0x10', /not a number/],
    ['.', /no digits/],
    ['Mi', /no digits/],
    ['-1', /negative/],
    ['-100m', /negative/],
    ['1e99', /exponent is out of range/],
    ['9Ei', /too large/],
    ['1'.repeat(65), /longer than 64 characters/],
  ];
  for (const [text, expected] of refused) {
    test(`${JSON.stringify(text.slice(0, 20))} is refused`, () => assert.throws(() => parseQuantity(text), (error: unknown) => error instanceof QuantityError && expected.test(error.message)));
  }

  test('comparison is exact, beyond what a double can tell apart', () => {
    assert.equal(compareQuantities(parseQuantity('1E'), parseQuantity('1000000000000000001')), -1);
    assert.equal(compareQuantities(parseQuantity('1000000000000000000'), parseQuantity('1E')), 0);
    assert.equal(compareQuantities(parseQuantity('1Gi'), parseQuantity('1G')), 1);
    assert.equal(compareQuantities(parseQuantity('100m'), parseQuantity('0.1')), 0);
    assert.equal(compareQuantities(parseQuantity('64Mi'), parseQuantity('67108864')), 0);
    assert.equal(compareQuantities(parseQuantity('0.2'), parseQuantity('199m')), 1);
  });
});

describe('sidecar resources as webhook flags', () => {
  test('the defaults are the measured ones', () => {
    assert.deepEqual(resourceRequirements(parseWebhookConfig([], {}).injection.sidecarResources), {
      requests: { cpu: '10m', memory: '64Mi' },
      limits: { cpu: '200m', memory: '128Mi' },
    });
  });

  test('flags and environment variables set them; an empty limit flag removes that limit', () => {
    const config = parseWebhookConfig(['--sidecar-cpu-request=50m', '--sidecar-cpu-limit='], {
      SHUTDOWN_MANAGER_SIDECAR_MEMORY_REQUEST: '96Mi',
      SHUTDOWN_MANAGER_SIDECAR_MEMORY_LIMIT: '1Gi',
    });
    assert.deepEqual(resourceRequirements(config.injection.sidecarResources), {
      requests: { cpu: '50m', memory: '96Mi' },
      limits: { memory: '1Gi' },
    });
    const none = parseWebhookConfig(['--sidecar-cpu-limit=', '--sidecar-memory-limit='], {});
    assert.deepEqual(resourceRequirements(none.injection.sidecarResources), { requests: { cpu: '10m', memory: '64Mi' } });
  });

  const bad: Array<[string[], string]> = [
    [['--sidecar-cpu-request=10mc'], 'flag --sidecar-cpu-request: "10mc" is not valid; expected a Kubernetes CPU quantity such as 10m, 250m, 0.5 or 2, but it is not a number with an optional suffix (Ki, Mi, Gi, Ti, Pi, Ei, n, u, m, k, M, G, T, P, E or an exponent e3)'],
    [['--sidecar-cpu-request=0.5m'], 'flag --sidecar-cpu-request: "0.5m" is not valid; expected a Kubernetes CPU quantity such as 10m, 250m, 0.5 or 2, but it is not a whole number of millicores (1m)'],
    [['--sidecar-memory-limit=100m'], 'flag --sidecar-memory-limit: "100m" is not valid; expected a Kubernetes memory quantity such as 64Mi, 128Mi, 1Gi or 500M, greater than zero, or empty for no limit, but it is not a whole number of bytes'],
    [['--sidecar-memory-limit=0'], 'flag --sidecar-memory-limit: "0" is not valid; expected a Kubernetes memory quantity such as 64Mi, 128Mi, 1Gi or 500M, greater than zero, or empty for no limit, but it is zero (leave it empty for no limit)'],
    [['--sidecar-memory-request='], 'flag --sidecar-memory-request: "" is not valid; expected a Kubernetes memory quantity such as 64Mi, 128Mi, 1Gi or 500M, but it is empty'],
    [['--sidecar-cpu-request=300m'], 'flag --sidecar-cpu-request (or SHUTDOWN_MANAGER_SIDECAR_CPU_REQUEST): "300m" is not valid; expected a CPU request no higher than the limit 200m (flag --sidecar-cpu-limit (or SHUTDOWN_MANAGER_SIDECAR_CPU_LIMIT))'],
    [['--sidecar-memory-limit=32Mi'], 'flag --sidecar-memory-request (or SHUTDOWN_MANAGER_SIDECAR_MEMORY_REQUEST): "64Mi" is not valid; expected a memory request no higher than the limit 32Mi (flag --sidecar-memory-limit (or SHUTDOWN_MANAGER_SIDECAR_MEMORY_LIMIT))'],
  ];
  for (const [args, message] of bad) {
    test(`${args.join(' ')} stops the webhook, naming the flag`, () => {
      assert.throws(() => parseWebhookConfig(args, {}), (error: unknown) => error instanceof ConfigErrors && error.message === message);
    });
  }

  test('a bad resource default and a bad drain default are named together', () => {
    assert.throws(
      () => parseWebhookConfig(['--sidecar-cpu-request=1', '--check-delay=10m'], {}),
      (error: unknown) => error instanceof ConfigErrors && error.errors.map((e) => e.setting).sort().join() === 'check-delay,sidecar-cpu-request',
    );
  });
});

describe('sidecar resources as pod annotations', () => {
  const defaults = parseWebhookConfig([], {}).injection.sidecarResources;
  const resolve = (annotations: Record<string, string>) => resourceRequirements(resolveSidecarResources(annotations, defaults));

  test('override the defaults one by one', () => {
    assert.deepEqual(resolve({ 'shutdown-manager.io/sidecar-cpu-request': '100m', 'shutdown-manager.io/sidecar-memory-limit': '256Mi' }), {
      requests: { cpu: '100m', memory: '64Mi' },
      limits: { cpu: '200m', memory: '256Mi' },
    });
  });

  test('an empty limit removes it, and a request may then be as large as wanted', () => {
    assert.deepEqual(resolve({ 'shutdown-manager.io/sidecar-cpu-limit': '', 'shutdown-manager.io/sidecar-cpu-request': '4' }), {
      requests: { cpu: '4', memory: '64Mi' },
      limits: { memory: '128Mi' },
    });
  });

  function denial(annotations: Record<string, string>): ConfigErrors {
    try {
      resolveSidecarResources(annotations, defaults);
    } catch (error) {
      assert.ok(error instanceof ConfigErrors, 'a ConfigErrors');
      return error;
    }
    assert.fail('accepted');
  }

  test('a request above the default limit names the request annotation', () => {
    assert.equal(
      denial({ 'shutdown-manager.io/sidecar-memory-request': '200Mi' }).message,
      'annotation shutdown-manager.io/sidecar-memory-request: "200Mi" is not valid; expected a memory request no higher than the limit 128Mi (default sidecar-memory-limit)',
    );
  });

  test('a limit below the default request names the limit annotation', () => {
    assert.equal(
      denial({ 'shutdown-manager.io/sidecar-cpu-limit': '5m' }).message,
      'annotation shutdown-manager.io/sidecar-cpu-limit: "5m" is not valid; expected a CPU limit no lower than the request 10m (default sidecar-cpu-request), or empty for no limit',
    );
  });

  test('both set and at odds: the request is named, with the limit annotation it exceeds', () => {
    assert.equal(
      denial({ 'shutdown-manager.io/sidecar-cpu-limit': '1', 'shutdown-manager.io/sidecar-cpu-request': '1.5' }).message,
      'annotation shutdown-manager.io/sidecar-cpu-request: "1.5" is not valid; expected a CPU request no higher than the limit 1 (annotation shutdown-manager.io/sidecar-cpu-limit)',
    );
  });

  test('every bad quantity is named at once, with what was wrong', () => {
    const error = denial({
      'shutdown-manager.io/sidecar-cpu-request': '',
      'shutdown-manager.io/sidecar-cpu-limit': 'lots',
      'shutdown-manager.io/sidecar-memory-request': '-64Mi',
      'shutdown-manager.io/sidecar-memory-limit': '1.5',
    });
    assert.deepEqual(error.errors.map((e) => e.setting), ['sidecar-cpu-request', 'sidecar-cpu-limit', 'sidecar-memory-request', 'sidecar-memory-limit']);
    assert.match(error.message, /annotation shutdown-manager\.io\/sidecar-cpu-request: "" is not valid; expected a Kubernetes CPU quantity .*; only limits may be empty/);
    assert.match(error.message, /sidecar-cpu-limit: "lots" is not valid; .* but it is not a number with an optional suffix/);
    assert.match(error.message, /sidecar-memory-request: "-64Mi" is not valid; .* but it is negative/);
    assert.match(error.message, /sidecar-memory-limit: "1.5" is not valid; .* but it is not a whole number of bytes/);
  });

  test('a request equal to its limit is fine (Guaranteed QoS)', () => {
    assert.deepEqual(resolve({ 'shutdown-manager.io/sidecar-memory-request': '128Mi', 'shutdown-manager.io/sidecar-cpu-request': '0.2' }).requests, {
      cpu: '0.2',
      memory: '128Mi',
    });
  });
});
