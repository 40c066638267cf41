/**
 * Upgrading by re-injection and undoing it, as users run them: the built entry point on files and pipes
 * (`inject` on its own output, `uninject`), and the papercuts of `inject`'s notes.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments } from 'yaml';
import { runBuiltEntry, type Finished } from '../support/process.js';

type Json = any; // parsed manifests, navigated freely by the assertions

const FIXTURES = fileURLToPath(new URL('../fixtures/manifests/', import.meta.url));
const MIXED = readFileSync(`${FIXTURES}mixed.yaml`, 'utf8');

/** `inject` here is the full offline injection (--manual), whose upgrade and undoing these tests are about. */
function run(command: 'inject' | 'uninject', args: string[], input: string): Promise<Finished> {
  return runBuiltEntry([command, '-f', '-', ...(command === 'inject' ? ['--manual'] : []), ...args], { input, timeoutMs: 15_000 });
}

function deployment(text: string): Json {
  return parseAllDocuments(text)[1]?.toJS();
}

function envoyOf(text: string): Json {
  return deployment(text).spec.template.spec.containers.find((c: Json) => c.name === 'envoy');
}

describe('re-injection', () => {
  let injected: Finished;
  before(async () => {
    injected = await run('inject', [], MIXED);
    assert.equal(injected.code, 0, injected.stderr);
  });

  test('an identical injection is left byte for byte, silently, without the random-token note', async () => {
    const again = await run('inject', [], injected.stdout);
    assert.equal(again.code, 0, again.stderr);
    assert.equal(again.stdout, injected.stdout);
    assert.doesNotMatch(again.stderr, /re-injected|tokens are random|nothing injected/);
  });

  test('other settings replace the injection, with a note, keeping the pod\'s token', async () => {
    const again = await run('inject', ['--drain-delay=5s'], injected.stdout);
    assert.equal(again.code, 0, again.stderr);
    assert.match(again.stderr, /note: stdin: document 2 \(Deployment edge\/envoy\): re-injected: replaced an injection of other settings/);
    const sidecar = deployment(again.stdout).spec.template.spec.containers.find((c: Json) => c.name === 'shutdown-manager');
    assert.ok(sidecar.args.includes('--drain-delay=5s'), "the new drain delay is in the sidecar's args");
    assert.deepEqual(envoyOf(again.stdout).lifecycle, envoyOf(injected.stdout).lifecycle, 'same hook, same token');
    assert.equal(deployment(again.stdout).spec.template.spec.containers.length, 2, 'one sidecar, not two');
  });

  test('an injection of another version is replaced and named', async () => {
    const old = injected.stdout.replace('{"version":"0.1.0"', '{"version":"0.0.9"');
    const again = await run('inject', [], old);
    assert.equal(again.code, 0, again.stderr);
    assert.match(again.stderr, /re-injected: replaced an injection of version 0\.0\.9/);
    assert.equal(again.stdout, injected.stdout);
  });
});

describe('uninject', () => {
  test('gives back the manifests as they were before injection, byte for byte', async () => {
    const injected = await run('inject', [], MIXED);
    const removed = await run('uninject', [], injected.stdout);
    assert.equal(removed.code, 0, removed.stderr);
    assert.equal(removed.stdout, MIXED);
  });

  test("restores Envoy's own preStop hook, args and grace period", async () => {
    const input = MIXED.replace('      containers:\n', '      terminationGracePeriodSeconds: 45\n      containers:\n');
    const withHook = input.replace(
      /( {6}- name: envoy\n)/,
      '$1        lifecycle:\n          preStop:\n            exec:\n              command: [sleep, "5"]\n',
    );
    assert.notEqual(withHook, input, 'the fixture has the Envoy container this test edits');
    const injected = await run('inject', [], withHook);
    assert.equal(envoyOf(injected.stdout).lifecycle.preStop.httpGet.path, '/shutdown');
    const removed = await run('uninject', [], injected.stdout);
    assert.equal(removed.code, 0, removed.stderr);
    assert.deepEqual(envoyOf(removed.stdout).lifecycle, { preStop: { exec: { command: ['sleep', '5'] } } });
    assert.deepEqual(deployment(removed.stdout), deployment(withHook));
  });

  test('an old status without the originals is undone as far as it goes, with a note naming what stays', async () => {
    const injected = await run('inject', [], MIXED);
    const old = injected.stdout.replace(/,"replaced":\{.*?\}\}'/, "}'");
    assert.notEqual(old, injected.stdout);
    const removed = await run('uninject', [], old);
    assert.equal(removed.code, 0, removed.stderr);
    assert.match(
      removed.stderr,
      /note: stdin: document 2 \(Deployment edge\/envoy\): status of version 0\.1\.0 does not record the originals; not restored: "envoy" preStop hook, "envoy" args \(any drain flags stay\), terminationGracePeriodSeconds \(stays 300\)/,
    );
    const spec = deployment(removed.stdout).spec.template.spec;
    assert.deepEqual(spec.containers.map((c: Json) => c.name), ['envoy']);
    assert.equal(spec.containers[0].lifecycle, undefined, 'our hook is removed');
    assert.equal(spec.volumes, undefined);
    assert.equal(deployment(removed.stdout).spec.template.metadata.annotations['shutdown-manager.io/status'], undefined);
  });

  test('manifests without an injection are written back, with a note', async () => {
    const removed = await run('uninject', [], MIXED);
    assert.equal(removed.code, 0, removed.stderr);
    assert.equal(removed.stdout, MIXED);
    assert.match(removed.stderr, /note: nothing uninjected: no pod template carries annotation shutdown-manager.io\/status/);
  });

  test('an unreadable status is an error naming it, and nothing is written', async () => {
    const injected = await run('inject', [], MIXED);
    const broken = injected.stdout.replace(/shutdown-manager.io\/status: '.*'/, "shutdown-manager.io/status: 'not json'");
    const removed = await run('uninject', [], broken);
    assert.equal(removed.code, 1);
    assert.equal(removed.stdout, '');
    assert.match(removed.stderr, /envoy-shutdown-manager uninject: stdin: document 2: Deployment edge\/envoy: annotation shutdown-manager.io\/status cannot be read \(not JSON\)/);
  });
});

describe('inject when nothing matches', () => {
  test('says so on stderr, writes the input back, and prints no token note', async () => {
    const result = await run('inject', ['--pod-selector=app=nope'], MIXED);
    assert.equal(result.code, 0, result.stderr);
    assert.equal(result.stdout, MIXED);
    assert.match(result.stderr, /note: nothing injected: no pod template \(of 3\) matches --pod-selector app=nope/);
    assert.doesNotMatch(result.stderr, /tokens are random/);
  });

  test('--require-injection makes it an error, with nothing on stdout', async () => {
    const result = await run('inject', ['--pod-selector=app=nope', '--require-injection'], MIXED);
    assert.equal(result.code, 1);
    assert.equal(result.stdout, '');
    assert.match(result.stderr, /^envoy-shutdown-manager inject: nothing injected: no pod template \(of 3\) matches --pod-selector app=nope \(--require-injection\)\n$/);
  });

  test('--require-injection is satisfied by manifests already injected', async () => {
    const injected = await run('inject', [], MIXED);
    const again = await run('inject', ['--require-injection'], injected.stdout);
    assert.equal(again.code, 0, again.stderr);
  });
});

test('a YAML error is one line: the input, the document, the line and column, what is wrong, the offending line', async () => {
  const result = await run('inject', [], 'kind: Pod\nmetadata:\n  name: x\n foo: bar\n');
  assert.equal(result.code, 1);
  assert.equal(
    result.stderr,
    'envoy-shutdown-manager inject: stdin: document 1 (line 4, column 1): All mapping items must start at the same column (in "foo: bar")\n',
  );
});
