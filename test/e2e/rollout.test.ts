/**
 * The mission's promise, checked end to end: a pod produced by the webhook, terminated as the kubelet does
 * while traffic flows, loses no request; drain parameters set on the pod reach the sidecar; a connection
 * that never closes is cut at the deadline, not later, and the logs say so.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { LogLine } from '../support/process.js';
import { runRollout, type RolloutResult } from './rollout.js';

function logOf(result: RolloutResult, event: string): LogLine {
  const line = result.sidecarLogs.find((l) => l.event === event);
  assert.ok(line, `no "${event}" line in the sidecar's logs`);
  return line;
}

function hookOf(result: RolloutResult, container: string) {
  const hook = result.termination.hooks.find((h) => h.container === container);
  assert.ok(hook, `no preStop hook result for ${container}`);
  return hook;
}

function assertExitedCleanly(result: RolloutResult): void {
  assert.deepEqual(result.termination.killed, [], 'no container needed SIGKILL');
  assert.ok(result.termination.podGoneAtMs < result.termination.gracePeriodMs, 'the pod was gone before its grace period ran out');
  const exits = result.termination.timeline.filter((e) => e.event === 'exited');
  assert.deepEqual(exits.map((e) => e.detail), ['code 0, signal null', 'code 0, signal null']);
}

describe('a rollout under keep-alive load', () => {
  test('loses no request, and preStop returns only after the last connection to the old replica closed', async () => {
    const result = await runRollout({ connections: 8 });

    assert.deepEqual(result.load.failures, []);
    assert.ok(result.load.byReplica.first >= 100, `too little traffic before the drain: ${result.load.byReplica.first}`);
    assert.ok(result.load.byReplica.second > 0, 'traffic moved to the second replica');

    for (const container of ['envoy', 'shutdown-manager']) {
      const hook = hookOf(result, container);
      assert.equal(hook.status, 200, `${container}: ${hook.body ?? hook.error}`);
      const lastClose = result.load.firstReplicaLastCloseAt;
      assert.ok(lastClose !== undefined, 'every connection to the first replica closed');
      assert.ok(result.termination.startedAt + hook.returnedAtMs >= lastClose, `${container}'s preStop returned before the last connection closed`);
    }
    assertExitedCleanly(result);

    const steps = result.sidecarLogs.filter((l) => l.event === 'drain_step').map((l) => l.step);
    assert.deepEqual(steps, ['fail health checks', 'drain listeners']);
    const finished = logOf(result, 'drain_finished');
    assert.equal(finished.state, 'drained');
    assert.equal(finished.open_connections, 0);
  });
});

describe('a native sidecar', () => {
  test('keeps the pod until Envoy has drained and exited, and is stopped after it', async () => {
    const result = await runRollout({ connections: 4, annotations: { 'shutdown-manager.io/native-sidecar': 'true' } });
    assert.equal(result.pod.spec?.initContainers?.at(-1)?.name, 'shutdown-manager');
    assert.deepEqual(result.load.failures, []);
    assert.equal(hookOf(result, 'envoy').status, 200);
    assert.equal(result.termination.hooks.length, 1, 'only Envoy has a hook');
    const at = (container: string, event: string): number => {
      const found = result.termination.timeline.find((e) => e.container === container && e.event === event);
      assert.ok(found, `${container} ${event}`);
      return found.atMs;
    };
    assert.ok(at('shutdown-manager', 'SIGTERM') >= at('envoy', 'exited'), 'the sidecar outlived Envoy');
    assert.equal(logOf(result, 'drain_finished').state, 'drained');
    assertExitedCleanly(result);
  });
});

describe('drain parameters set by pod annotations', () => {
  test('reach the sidecar and govern its behaviour, not the webhook-wide defaults', async () => {
    const result = await runRollout({
      connections: 4,
      stubbornConnections: 2,
      closeOneStubbornAfterMs: 1_000,
      annotations: {
        'shutdown-manager.io/check-delay': '500ms',
        'shutdown-manager.io/check-interval': '150ms',
        'shutdown-manager.io/min-open-connections': '1',
        'shutdown-manager.io/termination-grace-period': '6',
        // No load balancer: the clients come back to this Envoy, which the observed rule would wait out.
        'shutdown-manager.io/quiet-period': '0s',
      },
    });
    assert.equal(result.pod.spec?.terminationGracePeriodSeconds, 6);
    const listening = logOf(result, 'listening');
    assert.equal(listening.check_delay_ms, 500);
    assert.equal(listening.check_interval_ms, 150);
    assert.equal(listening.min_connections, 1);
    assert.equal(listening.drain_timeout_ms, 5_000);

    // min-open-connections 1: the drain is over once one of the two stubborn connections has closed,
    // with the other still open.
    const finished = logOf(result, 'drain_finished');
    assert.equal(finished.state, 'drained');
    assert.equal(finished.open_connections, 1);
    const envoyHook = hookOf(result, 'envoy');
    assert.equal(envoyHook.status, 200);
    assert.ok(envoyHook.returnedAtMs >= 1_000, `the drain ended at ${envoyHook.returnedAtMs} ms, before the slow client closed`);

    // check-delay and check-interval, as seen in the polls: Envoy is read from the start (which process it is,
    // and its count for /drain), but no count may end the drain until check-delay has passed.
    const started = Date.parse(String(logOf(result, 'drain_started').time));
    const allPolls = result.sidecarLogs.filter((l) => l.event === 'poll');
    const firstDecisive = allPolls.findIndex((l) => l.check_delay_pending !== true);
    assert.ok(firstDecisive > 0, 'polls during check-delay are marked as such');
    const polls = allPolls.slice(firstDecisive).map((l) => Date.parse(String(l.time)));
    assert.ok(polls.length >= 3, `${polls.length} polls after check-delay`);
    assert.ok((polls[0] as number) - started >= 500, `first poll that may end the drain ${(polls[0] as number) - started} ms after the start`);
    for (let i = 1; i < polls.length; i += 1) {
      // Timestamps are taken after each admin call returns, whose duration varies: allow 20 ms of jitter.
      assert.ok((polls[i] as number) - (polls[i - 1] as number) >= 130, `polls ${(polls[i] as number) - (polls[i - 1] as number)} ms apart`);
    }
    assert.deepEqual(result.load.failures, []);
    assertExitedCleanly(result);
  });
});

describe('a client that never closes its connection', () => {
  test('is cut at the deadline: /shutdown answers 503, the pod terminates in time, the log counts what was open', async () => {
    const result = await runRollout({
      connections: 2,
      stubbornConnections: 1,
      annotations: { 'shutdown-manager.io/check-delay': '200ms', 'shutdown-manager.io/termination-grace-period': '3' },
    });
    const hook = hookOf(result, 'shutdown-manager');
    assert.equal(hook.status, 503);
    assert.match(hook.body ?? '', /1 connection|1 open/);
    assert.equal(hookOf(result, 'envoy').status, 503);
    // The deadline is the grace period less its margin (3 s - 1 s): the hook returns near 2 s, not at 3 s.
    assert.ok(hook.returnedAtMs >= 1_900 && hook.returnedAtMs < 2_800, `returned after ${hook.returnedAtMs} ms`);

    const finished = logOf(result, 'drain_finished');
    assert.equal(finished.state, 'timed-out');
    assert.equal(finished.open_connections, 1);
    assert.deepEqual(result.stubbornClosed, [true], 'Envoy closed it when it got SIGTERM');
    assert.deepEqual(result.load.failures, []);
    assertExitedCleanly(result);
  });
});
