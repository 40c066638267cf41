/**
 * The sidecar under the port's strangers (issue 18): connections that pipeline thousands of requests and
 * never read, connections that ask within the bounds and never read, and floods of calls without the token.
 * Through the built process, as a pod runs it: its resident memory stays within a fixed budget under the
 * pod's 128Mi limit, and the kubelet's probes and preStop hook are answered all along. The negative control runs
 * the same flood against the same server with the bounds lifted: past the memory budget, and /healthz past the
 * kubelet's 1 s. The answers' own time is held to a bound a loaded 2-core machine keeps (issue 35); the kubelet's
 * 1 s under floods is a budget of `npm run bench:budgets`. Run `npm run build` first (npm test does).
 */
import assert from 'node:assert/strict';
import net from 'node:net';
import { performance } from 'node:perf_hooks';
import { describe, test, type TestContext } from 'node:test';
import { callsOverKeepAlive, requestHead, residentMemory, timedCall, UnreadConnections } from '../support/abuse.js';
import { spawnDrainServer } from '../support/drain-server-process.js';
import { EnvoyEmulator } from '../../src/emulator/envoy-emulator.js';
import type { LogLine } from '../support/process.js';
import { SIDECAR_ENV } from '../../src/inject/sidecar.js';
import { spawnSidecarWith, type SidecarProcess } from '../support/sidecar-process.js';
import { waitUntil } from '../support/wait.js';
import { runsAlone } from '../support/exclusive.js';

// It loads or times the machine: never beside another such file (see test/support/exclusive.ts).
runsAlone();

/** What no client behaviour may take the sidecar past: the pod's limit is 128Mi, the sidecar rests at 45-55 MiB. */
const RSS_BUDGET_MIB = 96;
/** The kubelet's default probe timeout: what the unbounded server of the negative control exceeds. */
const PROBE_TIMEOUT_MS = 1_000;
/**
 * The bound on the bounded sidecar's answers here: the kubelet's 1 s is what the bench holds; beside two CPU
 * burners any process's answer can take over a second, and what this file shows is that none waits on the flood.
 */
const ANSWERED_WITHIN_MS = 5_000;
const TOKEN = 'abuse-test-token';
const AUTH = { authorization: `Bearer ${TOKEN}` };

/**
 * A stranger's pipeline: the sidecar's routes, the protected one without the token among them; 400 times
 * over, 2,000 requests and 70 KiB: more than one read.
 */
const MIXED_HEADS = [requestHead('/drain'), requestHead('/healthz'), requestHead('/metrics'), requestHead('/shutdown'), requestHead('/ready')].join('');
const PIPELINE_REPEAT = 400;

async function startSidecar(t: TestContext): Promise<{ emulator: EnvoyEmulator; sidecar: SidecarProcess }> {
  const emulator = await EnvoyEmulator.start();
  t.after(() => emulator.close());
  // As a pod runs it: the container's environment the injector writes (SIDECAR_ENV: V8's young generation
  // capped, which is what keeps a flood's garbage within the budget), not V8's defaults.
  const podEnv = Object.fromEntries(SIDECAR_ENV.map(({ name, value }) => [name, value]));
  const sidecar = await spawnSidecarWith(
    [
      'mode=sidecar',
      '--serve-address=127.0.0.1',
      '--serve-port=0',
      `--admin-port=${emulator.ports.admin}`,
      '--check-delay=0s',
      '--quiet-period=0s',
      '--check-interval=50ms',
      '--drain-timeout=20s',
      `--shutdown-token=${TOKEN}`,
    ],
    podEnv,
  );
  t.after(() => sidecar.kill());
  await sidecar.waitForLog((line) => line['event'] === 'envoy_admin_reachable');
  return { emulator, sidecar };
}

/** The kubelet's calls, one every `everyMs` on a new connection each, until `until` holds; their durations by path. */
async function probeWhile(
  url: (path: string) => string,
  until: () => boolean,
  options: { readonly everyMs: number; readonly maxProbes: number },
): Promise<Map<string, number[]>> {
  const durations = new Map<string, number[]>([
    ['/healthz', []],
    ['/ready', []],
  ]);
  for (let probe = 0; probe < options.maxProbes && !until(); probe++) {
    for (const [path, list] of durations) {
      const answer = await timedCall(url(path), { timeoutMs: 5_000 });
      assert.equal(answer.status, 200, `${path}: ${answer.body}`);
      list.push(answer.ms);
    }
    await new Promise((resolve) => setTimeout(resolve, options.everyMs));
  }
  return durations;
}

const summary = (values: readonly number[]): string =>
  `max ${Math.max(...values).toFixed(1)} ms, median ${[...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!.toFixed(1)} ms over ${values.length}`;

const eventLines = (sidecar: SidecarProcess, event: string): LogLine[] => sidecar.logs.filter((line) => line['event'] === event);

describe('sidecar process: strangers on the port', () => {
  test('500 connections pipelining 2,000 requests each and never reading: under 96 MiB, and the kubelet answered throughout', async (t) => {
    const { sidecar } = await startSidecar(t);
    const pid = sidecar.child.pid!;
    const atRest = residentMemory(pid).rssMiB;

    const attackers = new UnreadConnections();
    t.after(() => attackers.close());
    let opened = false;
    const attack = attackers.open(sidecar.port, 500, Buffer.from(MIXED_HEADS.repeat(PIPELINE_REPEAT))).then(() => (opened = true));
    // The kubelet's probes from the first attacking connection on, until a second after the last one opened.
    let quietSince: number | undefined;
    const probes = await probeWhile(sidecar.url, () => opened && performance.now() - (quietSince ??= performance.now()) > 1_000, { everyMs: 50, maxProbes: 200 });
    await attack;
    // The kubelet's preStop, the attackers' connections still open on their side: no Envoy client is connected, so the drain ends at its first poll.
    const shutdown = await timedCall(sidecar.url('/shutdown'), { headers: AUTH, timeoutMs: 10_000 });
    const { peakMiB } = residentMemory(pid);

    for (const [path, durations] of probes) t.diagnostic(`${path} during the attack: ${summary(durations)}`);
    t.diagnostic(`/shutdown: ${shutdown.ms.toFixed(0)} ms; resident memory ${atRest.toFixed(1)} MiB at rest, peak ${peakMiB.toFixed(1)} MiB`);
    assert.equal(shutdown.status, 200, shutdown.body);
    assert.match(shutdown.body, /^drained: 0 open connections/);
    assert.ok(shutdown.ms < ANSWERED_WITHIN_MS, `/shutdown took ${shutdown.ms.toFixed(0)} ms`);
    for (const [path, durations] of probes) assert.ok(Math.max(...durations) < ANSWERED_WITHIN_MS, `${path}: ${summary(durations)}`);
    assert.ok(peakMiB < RSS_BUDGET_MIB, `peak resident memory ${peakMiB.toFixed(1)} MiB`);

    // 500 connections closed: reported at once, then in one summary per 10 s, not one line each.
    const reports = eventLines(sidecar, 'connections_closed');
    assert.ok(Number(reports[0]?.['too_many_in_flight']) >= 1, JSON.stringify(reports[0]));
    assert.equal(reports.length, 1, JSON.stringify(reports));
    assert.equal(eventLines(sidecar, 'shutdown_refused').length, 1, 'refusals are aggregated too');
    assert.equal(sidecar.child.exitCode, null, 'the sidecar is still running');
  });

  test('clients that never read but keep within the bounds: 200 connections asking one request every 100 ms for 3 s; under 96 MiB, the kubelet answered within 1 s', async (t) => {
    const { sidecar } = await startSidecar(t);
    const pid = sidecar.child.pid!;
    const readers = await Promise.all(Array.from({ length: 200 }, () => slowReader(sidecar.port, requestHead('/drain'), 30)));
    t.after(() => readers.forEach((reader) => reader.stop()));
    const startedAt = performance.now();
    const probes = await probeWhile(sidecar.url, () => performance.now() - startedAt > 3_500, { everyMs: 100, maxProbes: 100 });
    const { peakMiB } = residentMemory(pid);

    // Which bound cuts a reader depends on the kernel's socket buffers and on how its writes coalesce: each
    // bound is shown alone in server-bounds.test.ts. Here: whatever they do, memory and the kubelet are safe.
    // 2,000 requests a second. At 8,000 (every 25 ms) the peak reached 98 MiB with none of them cut, every
    // answer taken by the kernel: past some 5,000 requests a second of any kind, V8's young generation grows
    // with Node's default heap settings, whatever the routes queue.
    const cut = readers.filter((reader) => reader.cut()).length;
    t.diagnostic(`${cut} of 200 cut within 3.5 s; ${readers.reduce((sum, reader) => sum + reader.sent(), 0)} requests sent; peak ${peakMiB.toFixed(1)} MiB`);
    for (const [path, durations] of probes) t.diagnostic(`${path} meanwhile: ${summary(durations)}`);
    for (const [path, durations] of probes) assert.ok(Math.max(...durations) < ANSWERED_WITHIN_MS, `${path}: ${summary(durations)}`);
    assert.ok(peakMiB < RSS_BUDGET_MIB, `peak resident memory ${peakMiB.toFixed(1)} MiB`);
    assert.equal(sidecar.child.exitCode, null, 'the sidecar is still running');
  });

  test('20,000 calls of /shutdown and /wait without the token: 401 each, one log line at once and one summary, not 20,000', async (t) => {
    const { emulator, sidecar } = await startSidecar(t);
    const pid = sidecar.child.pid!;
    const started = performance.now();
    const [shutdowns, waits] = await Promise.all([
      callsOverKeepAlive(sidecar.port, { head: requestHead('/shutdown', { authorization: 'Bearer wrong' }), total: 10_000, connections: 10, depth: 4 }),
      callsOverKeepAlive(sidecar.port, { head: requestHead('/wait'), total: 10_000, connections: 10, depth: 4 }),
    ]);
    const healthz = await timedCall(sidecar.url('/healthz'));
    t.diagnostic(`20,000 refusals in ${(performance.now() - started).toFixed(0)} ms; /healthz then ${healthz.ms.toFixed(1)} ms; peak ${residentMemory(pid).peakMiB.toFixed(1)} MiB`);
    assert.deepEqual([...shutdowns], [[401, 10_000]]);
    assert.deepEqual([...waits], [[401, 10_000]]);
    assert.ok(healthz.ms < ANSWERED_WITHIN_MS, `/healthz took ${healthz.ms.toFixed(0)} ms after the refusals`);
    assert.ok(residentMemory(pid).peakMiB < RSS_BUDGET_MIB, `peak resident memory ${residentMemory(pid).peakMiB.toFixed(1)} MiB`);
    assert.deepEqual(emulator.adminRequests.filter((request) => request.method === 'POST'), [], 'Envoy was not touched');

    // The first refusal at once; the next line would come a minute later: stopping the sidecar writes it now.
    const refusals = (): LogLine[] => eventLines(sidecar, 'shutdown_refused');
    assert.equal(refusals().length, 1, JSON.stringify(refusals()));
    assert.deepEqual([refusals()[0]!['refused'], refusals()[0]!['total'], refusals()[0]!['remote']], [1, 1, '127.0.0.1']);
    sidecar.child.kill('SIGTERM');
    assert.deepEqual(await sidecar.exited, { code: 0, signal: null });
    const last = refusals().at(-1)!;
    assert.equal(refusals().length, 2, JSON.stringify(refusals()));
    assert.deepEqual([last['refused'], last['total'], last['remote']], [19_999, 20_000, '127.0.0.1']);
    assert.ok(['/shutdown', '/wait'].includes(String(last['path'])), `the summary names an endpoint: ${String(last['path'])}`);
    assert.equal(last['level'], 'info');
  });
});

describe('drain server process: negative control, the bounds lifted', () => {
  test('the same attack takes the same server past 96 MiB and /healthz past 1 s; with the bounds it stays under the budget and answers', async (t) => {
    const payload = Buffer.from(MIXED_HEADS.repeat(PIPELINE_REPEAT));
    const lifted = await spawnDrainServer({ maxRequestsInFlight: Infinity, maxUnflushedBytes: Infinity, writeWithinMs: Infinity });
    t.after(() => lifted.kill());
    const attackers = new UnreadConnections();
    t.after(() => attackers.close());
    const attack = attackers.open(lifted.port, 500, payload).catch(() => undefined);
    let slowest = 0;
    await waitUntil(
      async () => {
        const probe = await timedCall(`http://127.0.0.1:${lifted.port}/healthz`, { timeoutMs: PROBE_TIMEOUT_MS * 2 }).catch(() => ({ ms: PROBE_TIMEOUT_MS * 2 }));
        slowest = Math.max(slowest, probe.ms);
        return residentMemory(lifted.child.pid!).peakMiB > RSS_BUDGET_MIB && slowest > PROBE_TIMEOUT_MS;
      },
      20_000,
      'the lifted server past the budget and a slow /healthz',
    );
    t.diagnostic(`bounds lifted: peak ${residentMemory(lifted.child.pid!).peakMiB.toFixed(1)} MiB, slowest /healthz ${slowest.toFixed(0)} ms`);
    await lifted.kill();
    await attack;
    attackers.close();

    const bounded = await spawnDrainServer({});
    t.after(() => bounded.kill());
    await attackers.open(bounded.port, 500, payload);
    const probe = await timedCall(`http://127.0.0.1:${bounded.port}/healthz`);
    const { peakMiB } = residentMemory(bounded.child.pid!);
    t.diagnostic(`with the bounds: peak ${peakMiB.toFixed(1)} MiB, /healthz ${probe.ms.toFixed(1)} ms`);
    assert.ok(peakMiB < RSS_BUDGET_MIB, `with the bounds: peak resident memory ${peakMiB.toFixed(1)} MiB`);
    assert.ok(probe.ms < ANSWERED_WITHIN_MS, `with the bounds: /healthz took ${probe.ms.toFixed(0)} ms`);
  });
});

/**
 * A client that writes `head` every 100 ms, `count` times, and never reads; cut() once a write failed (the
 * server closed the connection) or the connection closed.
 */
async function slowReader(port: number, head: string, count: number): Promise<{ cut: () => boolean; sent: () => number; stop(): void }> {
  const socket = await new Promise<net.Socket>((resolve, reject) => {
    const connecting = net.connect({ port, host: '127.0.0.1' }, () => resolve(connecting));
    connecting.pause();
    connecting.once('error', reject);
  });
  let cut = false;
  let sent = 0;
  const markCut = (): void => {
    cut = true;
    clearInterval(timer);
  };
  socket.on('error', markCut);
  socket.on('close', markCut);
  const timer = setInterval(() => {
    if (sent >= count) {
      clearInterval(timer);
      return;
    }
    sent += 1;
    socket.write(head);
  }, 100);
  const stop = (): void => {
    clearInterval(timer);
    socket.destroy();
  };
  return { cut: () => cut, sent: () => sent, stop };
}
