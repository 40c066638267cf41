/**
 * When the sidecar loads its drain (src/sidecar/engine-loader.ts): once, at the first request that needs it or
 * when asked to later, never for /healthz, and never once stopping. The built sidecar's side of it (its start
 * bundle answering /healthz without the engine file) is in test/sidecar/bundle.test.ts.
 */
import assert from 'node:assert/strict';
import type { IncomingMessage } from 'node:http';
import { describe, test } from 'node:test';
import type { SidecarEngine } from '../../src/sidecar/engine.js';
import { engineLoader } from '../../src/sidecar/engine-loader.js';
import { within } from '../support/wait.js';

const request = (url: string): IncomingMessage => ({ url }) as IncomingMessage;

/** An engine whose supervisor answers readiness, and a counter of how often it was started. */
function countingStart(): { start: () => Promise<SidecarEngine>; starts: () => number } {
  let starts = 0;
  const engine = { supervisor: { readiness: () => ({ ready: true, detail: 'test' }) } } as unknown as SidecarEngine;
  return {
    start: () => {
      starts += 1;
      return Promise.resolve(engine);
    },
    starts: () => starts,
  };
}

describe('the engine loader', () => {
  test('holds every request but /healthz until the engine is loaded, and loads it once', async () => {
    const { start, starts } = countingStart();
    const loader = engineLoader(start, () => assert.fail('no failure'));
    assert.equal(loader.hold(request('/healthz')), undefined);
    assert.equal(loader.hold(request('/healthz?verbose')), undefined);
    assert.equal(starts(), 0, '/healthz loads nothing');
    const held = [loader.hold(request('/ready')), loader.hold(request('/shutdown')), loader.hold(request('/nope'))];
    assert.ok(held.every((promise) => promise instanceof Promise), 'the rest is held');
    await within(Promise.all(held), 5_000, 'the engine');
    assert.equal(starts(), 1);
    assert.equal(loader.hold(request('/ready')), undefined, 'loaded: nothing is held any more');
    assert.deepEqual(loader.drain.readiness(), { ready: true, detail: 'test' });
  });

  test('loads the engine by itself after loadIn, unless something needed it first', async () => {
    const { start, starts } = countingStart();
    let loaded!: () => void;
    const started = new Promise<void>((resolve) => (loaded = resolve));
    const loader = engineLoader(() => {
      loaded();
      return start();
    }, () => assert.fail('no failure'));
    loader.loadIn(1);
    await within(started, 5_000, 'the engine loaded by the timer');
    await loader.load();
    assert.equal(starts(), 1, 'once');
  });

  test('stopping: settle gives the engine asked for, cancels a pending load, and nothing loads it afterwards', async () => {
    const { start, starts } = countingStart();
    const idle = engineLoader(start, () => assert.fail('no failure'));
    idle.loadIn(1);
    assert.equal(idle.settle(), undefined, 'nothing asked for it yet');
    await new Promise((resolve) => setTimeout(resolve, 20));
    assert.equal(starts(), 0, 'the pending load was cancelled');
    await assert.rejects(idle.hold(request('/ready')) as Promise<unknown>, /stopping/);
    assert.equal(starts(), 0);

    const busy = engineLoader(start, () => assert.fail('no failure'));
    const loading = busy.load();
    assert.equal(busy.settle(), loading, 'the engine being loaded');
    await loading;
    assert.equal(starts(), 1);
  });

  test('a failure to load is reported once, and what waited for the engine is rejected', async () => {
    const failures: unknown[] = [];
    const loader = engineLoader(() => Promise.reject(new Error('no engine here')), (error) => failures.push(error));
    await assert.rejects(loader.hold(request('/ready')) as Promise<unknown>, /no engine here/);
    await assert.rejects(loader.load(), /no engine here/);
    await assert.rejects(loader.metrics(), /no engine here/);
    assert.equal(failures.length, 1);
  });
});
