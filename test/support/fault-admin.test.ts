/** The fault admin server's own behaviours, through raw sockets: what it answers, to which process, and what it logs. */
import assert from 'node:assert/strict';
import net from 'node:net';
import { describe, test, type TestContext } from 'node:test';
import { FaultAdmin, parseBehaviour, type FaultAdminOptions } from './fault-admin.js';
import { waitUntil } from './wait.js';

interface RawResult {
  readonly text: string;
  /** How the connection ended: closed by the server, reset, or still open when we gave up. */
  readonly ending: 'closed' | 'reset' | 'held';
  readonly bytes: number;
}

/** One HTTP/1.1 request on a raw socket; reads until the server closes or `holdMs` passes (keeps at most 4 KiB of text). */
function raw(port: number, method: string, target: string, holdMs = 1_000): Promise<RawResult> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    let text = '';
    let bytes = 0;
    const finish = (ending: RawResult['ending']): void => {
      clearTimeout(timer);
      socket.destroy();
      resolve({ text, ending, bytes });
    };
    const timer = setTimeout(() => finish('held'), holdMs);
    socket.on('data', (chunk: Buffer) => {
      bytes += chunk.length;
      if (text.length < 4096) text += chunk.toString('latin1');
    });
    socket.on('error', (error: NodeJS.ErrnoException) => finish(error.code === 'ECONNRESET' ? 'reset' : 'closed'));
    socket.on('end', () => finish('closed'));
    socket.write(`${method} ${target} HTTP/1.1\r\nhost: admin\r\ncontent-length: 0\r\nconnection: close\r\n\r\n`);
  });
}

const bodyOf = (result: RawResult): string => result.text.slice(result.text.indexOf('\r\n\r\n') + 4);
const statusOf = (result: RawResult): number => Number(result.text.split(' ')[1]);

async function start(t: TestContext, options: FaultAdminOptions = {}): Promise<FaultAdmin> {
  const admin = await FaultAdmin.start(options);
  t.after(() => admin.close());
  return admin;
}

function statsOf(result: RawResult): Record<string, number> {
  const document = JSON.parse(bodyOf(result)) as { stats: Array<{ name: string; value: number }> };
  return Object.fromEntries(document.stats.map(({ name, value }) => [name, value]));
}

describe('FaultAdmin: answers as Envoy does', () => {
  test('/stats?format=json&filter applies the regex as a partial match, with per-worker copies and the admin counter', async (t) => {
    const admin = await start(t, { listeners: { ingress: 5, 'public.edge': 0 }, workers: 2 });
    const all = statsOf(await raw(admin.port, 'GET', '/stats?format=json'));
    assert.equal(all['listener.ingress.downstream_cx_active'], 5);
    assert.deepEqual([all['listener.ingress.worker_0.downstream_cx_active'], all['listener.ingress.worker_1.downstream_cx_active']], [3, 2]);
    assert.equal(all['listener.admin.downstream_cx_active'], 1, 'the asking connection');
    assert.equal(all['listener.admin.downstream_cx_total'], 1);

    const filter = encodeURIComponent('downstream_cx_(active|total)$');
    const filtered = statsOf(await raw(admin.port, 'GET', `/stats?format=json&filter=${filter}`));
    assert.ok(Object.keys(filtered).every((name) => /downstream_cx_(active|total)$/.test(name)), 'the filter keeps only the connection counters');
    assert.equal(filtered['listener.public.edge.downstream_cx_active'], 0, 'an unused listener is listed: usedonly is not modelled');
    assert.equal(filtered['listener.admin.downstream_cx_total'], 2, '+1 per accepted connection');
    assert.equal(bodyOf(await raw(admin.port, 'GET', '/stats?filter=admin.downstream_cx_total')), 'listener.admin.downstream_cx_total: 3\n', 'text format');
    assert.equal(statusOf(await raw(admin.port, 'GET', '/stats?filter=(')), 400);
  });

  test('/ready, /server_info, mutations by POST only (GET is 405), unknown paths 404', async (t) => {
    const admin = await start(t, { uptimeMs: 12_500, restartEpoch: 0 });
    assert.deepEqual([statusOf(await raw(admin.port, 'GET', '/ready')), bodyOf(await raw(admin.port, 'GET', '/ready'))], [200, 'LIVE\n']);
    const info = JSON.parse(bodyOf(await raw(admin.port, 'GET', '/server_info'))) as Record<string, unknown>;
    assert.deepEqual([info['state'], info['uptime_current_epoch'], info['uptime_all_epochs'], info['hot_restart_version']], ['LIVE', '12s', '12s', '11.104']);
    assert.deepEqual((info['command_line_options'] as Record<string, unknown>)['restart_epoch'], 0);

    const get = await raw(admin.port, 'GET', '/healthcheck/fail');
    assert.deepEqual([statusOf(get), bodyOf(get)], [405, 'Method GET not allowed, POST required.']);
    assert.equal(admin.process.healthCheckFailed, false);
    assert.equal(bodyOf(await raw(admin.port, 'POST', '/healthcheck/fail')), 'OK\n');
    assert.deepEqual([statusOf(await raw(admin.port, 'GET', '/ready')), bodyOf(await raw(admin.port, 'GET', '/ready'))], [503, 'DRAINING\n']);
    assert.equal(bodyOf(await raw(admin.port, 'POST', '/drain_listeners?graceful')), 'OK\n');
    assert.equal(bodyOf(await raw(admin.port, 'POST', '/healthcheck/ok')), 'OK\n');
    assert.deepEqual([admin.process.state, admin.process.healthCheckFailed, admin.process.listenersDrained], ['LIVE', false, true]);
    assert.equal(statusOf(await raw(admin.port, 'GET', '/nope')), 404);
    assert.deepEqual(
      admin.calls.filter((call) => call.method === 'POST').map((call) => `${call.path}?${call.query} ${call.effect}`),
      ['/healthcheck/fail? applied', '/drain_listeners?graceful applied', '/healthcheck/ok? applied'],
    );
    assert.equal(admin.calls.find((call) => call.path === '/healthcheck/fail')?.effect, 'none', 'the GET was refused: no effect');
  });
});

describe('FaultAdmin: one process at a time', () => {
  test('replaceProcess: a new identity, the counter from 0, flags and connections cleared, LIVE', async (t) => {
    const admin = await start(t, { listeners: { ingress: 4 } });
    await raw(admin.port, 'POST', '/healthcheck/fail');
    await raw(admin.port, 'POST', '/drain_listeners?graceful');
    await raw(admin.port, 'GET', '/ready');
    assert.equal(admin.process.adminConnectionsTotal, 3);
    admin.replaceProcess();
    assert.deepEqual(
      { ...admin.process, uptimeSeconds: 0 },
      {
        id: 2, state: 'LIVE', healthCheckFailed: false, listenersDrained: false, restartEpoch: 0, uptimeSeconds: 0,
        adminConnectionsTotal: 0, adminConnectionsActive: 0, connections: { ingress: 0 }, running: true,
      },
    );
    assert.equal(statsOf(await raw(admin.port, 'GET', '/stats?format=json'))['listener.admin.downstream_cx_total'], 1);
    assert.deepEqual(admin.calls.map((call) => call.processId), [1, 1, 1, 2]);
  });

  test('a hot restart keeps uptime_all_epochs; a PRE_INITIALIZING process answers /ready 503', async (t) => {
    const admin = await start(t, { uptimeMs: 100_000 });
    admin.replaceProcess({ restartEpoch: 1, initializing: true, uptimeMs: 2_000 });
    const ready = await raw(admin.port, 'GET', '/ready');
    assert.deepEqual([statusOf(ready), bodyOf(ready)], [503, 'PRE_INITIALIZING\n']);
    const info = JSON.parse(bodyOf(await raw(admin.port, 'GET', '/server_info'))) as Record<string, unknown>;
    assert.deepEqual([info['state'], info['uptime_current_epoch'], info['uptime_all_epochs']], ['PRE_INITIALIZING', '2s', '100s']);
    admin.finishInitializing();
    assert.equal(bodyOf(await raw(admin.port, 'GET', '/ready')), 'LIVE\n');
  });

  test('stepWallClock moves uptimes, below zero after a step back', async (t) => {
    // 19.5 s up, then an hour back: -3580.5 s, truncated toward zero as C++'s duration_cast does.
    const admin = await start(t, { uptimeMs: 19_500 });
    admin.stepWallClock(-3_600_000);
    const info = JSON.parse(bodyOf(await raw(admin.port, 'GET', '/server_info'))) as Record<string, unknown>;
    assert.equal(info['uptime_current_epoch'], '-3580s');
    assert.equal(admin.process.uptimeSeconds, -3580);
  });

  test('stop refuses connections as an exited Envoy; restart listens on the same port with a new process; /quitquitquit exits after its OK', async (t) => {
    const admin = await start(t);
    const port = admin.port;
    await admin.stop();
    assert.equal(admin.process.running, false);
    await assert.rejects(connect(port), /ECONNREFUSED/);
    await admin.restart();
    assert.deepEqual([admin.port, admin.process.id, admin.process.running], [port, 2, true]);
    assert.equal(bodyOf(await raw(port, 'POST', '/quitquitquit')), 'OK\n');
    await waitUntil(() => !admin.process.running, 2_000, 'the process to exit');
    await assert.rejects(connect(port), /ECONNREFUSED/);
  });
});

function connect(port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1', () => {
      socket.destroy();
      resolve();
    });
    socket.on('error', reject);
  });
}

describe('FaultAdmin: scripted faults', () => {
  test('queues per path come first, then the chooser, then a normal answer', async (t) => {
    const admin = await start(t);
    admin.script('/ready', 'status:500', 'status:503');
    admin.script('*', 'status:502');
    admin.chooseWith((call) => (call.path === '/server_info' ? 'status:504' : undefined));
    const statuses = [];
    for (const path of ['/ready', '/ready', '/server_info', '/server_info', '/ready', '/stats']) statuses.push(statusOf(await raw(admin.port, 'GET', path)));
    assert.deepEqual(statuses, [500, 503, 502, 504, 200, 200]);
    assert.deepEqual(parseBehaviour('delay:250'), { kind: 'delay', ms: 250 });
    assert.throws(() => parseBehaviour('delay:soon' as 'delay:1'), /unknown fault behaviour/);
  });

  test('delay answers late and takes effect on receipt; on-answer takes effect when it answers; a client gone first does not stop it', async (t) => {
    const admin = await start(t);
    admin.script('/healthcheck/fail', 'delay:300');
    const slow = raw(admin.port, 'POST', '/healthcheck/fail', 2_000);
    await waitUntil(() => admin.calls.length === 1, 1_000, 'the call');
    assert.equal(admin.process.healthCheckFailed, true, 'in effect before the answer');
    const result = await slow;
    assert.equal(bodyOf(result), 'OK\n');
    const call = admin.calls[0];
    assert.ok(call?.answeredAt !== undefined && call.answeredAt - call.receivedAt >= 290, 'answered about 300 ms after receipt');

    admin.script('/healthcheck/ok', { kind: 'delay', ms: 200, effect: 'on-answer' });
    const gone = await raw(admin.port, 'POST', '/healthcheck/ok', 50);
    assert.equal(gone.ending, 'held', 'the client gave up first');
    assert.deepEqual([admin.calls[1]?.effect, admin.process.healthCheckFailed], ['pending', true]);
    await waitUntil(() => admin.calls[1]?.effect === 'applied', 2_000, 'the late effect');
    assert.equal(admin.process.healthCheckFailed, false);
  });

  test('a pending effect is withheld when the process is replaced first', async (t) => {
    const admin = await start(t);
    admin.script('/healthcheck/fail', { kind: 'delay', ms: 5_000, effect: 'on-answer' });
    const call = raw(admin.port, 'POST', '/healthcheck/fail', 2_000);
    await waitUntil(() => admin.calls.length === 1, 1_000, 'the call');
    admin.replaceProcess();
    assert.equal((await call).ending, 'closed');
    assert.equal(admin.calls[0]?.effect, 'withheld');
    assert.equal(admin.process.healthCheckFailed, false);
  });

  test('silent, status, upgrade, deep-json and huge withhold a mutation; reset and endless apply it', async (t) => {
    const admin = await start(t);
    const cases: Array<[string, (result: RawResult) => void]> = [
      ['silent', (r) => assert.deepEqual([r.ending, r.bytes], ['held', 0])],
      ['status:500', (r) => assert.equal(statusOf(r), 500)],
      ['upgrade', (r) => assert.deepEqual([r.ending, r.text], ['held', 'HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: websocket\r\n\r\n'])],
      ['deep-json', (r) => assert.ok(r.ending === 'closed' && r.bytes > 2_000_000 && bodyOf(r).startsWith('{"stats":[[[['), 'the deep JSON closes after 2 MB')],
      ['huge', (r) => assert.ok(r.ending === 'closed' && r.bytes > 16 * 1024 * 1024 && !/content-length/.test(r.text), String(r.bytes))],
      ['reset', (r) => assert.deepEqual([r.ending, bodyOf(r)], ['reset', 'O'])],
      ['endless', (r) => assert.ok(r.ending === 'held' && /^\{"stats":\[ +$/.test(bodyOf(r)), bodyOf(r))],
    ];
    for (const [behaviour, check] of cases) {
      admin.script('/healthcheck/fail', behaviour as 'silent');
      check(await raw(admin.port, 'POST', '/healthcheck/fail', 400));
    }
    assert.deepEqual(
      admin.calls.map((call) => `${call.behaviour.kind} ${call.effect}`),
      ['silent withheld', 'status withheld', 'upgrade withheld', 'deep-json withheld', 'huge withheld', 'reset applied', 'endless applied'],
    );
  });

  test('close() leaves nothing running: held sockets destroyed, delays and trickles cleared', async (t) => {
    const before = activeResources();
    const admin = await start(t);
    for (const behaviour of ['silent', 'upgrade', 'endless', 'delay:60000'] as const) admin.script('*', behaviour);
    const held = ['/ready', '/ready', '/stats', '/server_info'].map((path) => raw(admin.port, 'GET', path, 5_000));
    await waitUntil(() => admin.calls.length === 4, 2_000, 'four calls held');
    await admin.close();
    for (const result of await Promise.all(held)) assert.notEqual(result.ending, 'held');
    await waitUntil(() => activeResources() <= before, 2_000, `resources back to ${before}: ${process.getActiveResourcesInfo().join(', ')}`);
  });
});

/** Timers and sockets of this process (the test runner's own included, hence a comparison). */
function activeResources(): number {
  return process.getActiveResourcesInfo().filter((name) => name === 'Timeout' || name === 'TCPSocketWrap' || name === 'TCPServerWrap').length;
}
