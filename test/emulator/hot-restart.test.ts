/**
 * The emulator's hot restart (src/emulator/hot-restart.ts) does what Envoy's does, as seen from outside: the child
 * takes the listen sockets and the admin address, the parent keeps its connections and the admin connections it
 * accepted, the child's stats merge the parent's (gauges added, `server.parent_connections`), and the parent exits
 * at `--parent-shutdown-time`, its connections with it.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { test } from 'node:test';
import { EnvoyEmulator } from '../../src/emulator/envoy-emulator.js';
import { closeAll, openTcpConnection, openTcpConnections } from '../support/connections.js';
import { hotRestarted } from '../support/hot-restart.js';

/** A stats read on a connection of its own (no keep-alive: that would stay with whichever process accepted it). */
function stats(port: number): Promise<Map<string, number>> {
  return new Promise((resolve, reject) => {
    const request = http.get({ host: '127.0.0.1', port, path: '/stats?format=json', agent: false, timeout: 5_000 }, (response) => {
      let body = '';
      response.setEncoding('utf8').on('data', (chunk: string) => (body += chunk));
      response.on('end', () => {
        const parsed = JSON.parse(body) as { stats: Array<{ name?: string; value?: unknown }> };
        resolve(new Map(parsed.stats.filter((stat) => typeof stat.value === 'number').map((stat) => [stat.name ?? '', stat.value as number])));
      });
    });
    request.on('timeout', () => request.destroy(new Error('stats: no answer in 5 s')));
    request.on('error', reject);
  });
}

async function until(condition: () => Promise<boolean>, what: string, timeoutMs = 5_000): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!(await condition())) {
    if (performance.now() > deadline) throw new Error(`not within ${timeoutMs} ms: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

test('a hot restart: the child takes the listeners and the admin address, merges the parent stats, and terminates the parent later', async (t) => {
  const parent = await EnvoyEmulator.start({ statsFlushIntervalMs: 50, parentShutdownTimeMs: 1_500 });
  t.after(() => parent.close());
  const { admin, tcp } = parent.ports;
  const tcpListener = `listener.0.0.0.0_${tcp}.downstream_cx_active`;
  const held = await openTcpConnections(tcp, 2);
  t.after(() => closeAll(held));
  const adminConnection = await new Promise<net.Socket>((resolve) => {
    const socket = net.connect(admin, '127.0.0.1', () => resolve(socket));
  });
  t.after(() => adminConnection.destroy());
  let adminConnectionClosedAt: number | undefined;
  adminConnection.on('close', () => (adminConnectionClosedAt = performance.now()));
  assert.equal((await stats(admin)).get('server.hot_restart_epoch'), 0);

  const child = await hotRestarted(t, parent);
  const restartedAt = performance.now();
  assert.deepEqual([child.ports.admin, child.ports.tcp], [admin, tcp], 'the same addresses');
  await until(async () => (await stats(admin)).get('server.parent_connections') === 2, 'the child reports the parent connections');
  const merged = await stats(admin);
  assert.equal(merged.get('server.hot_restart_epoch'), 1, 'the admin address is the child');
  assert.equal(merged.get(tcpListener), 2, "the listener gauge includes the parent's connections");
  assert.ok((merged.get('listener.admin.downstream_cx_total') ?? 0) < 10, "the child's own admin counter starts again");

  // A new connection goes to the child: the child's own count plus the parent's.
  const fresh = await openTcpConnection(tcp);
  t.after(() => fresh.close());
  await until(async () => (await stats(admin)).get(tcpListener) === 3, 'the new connection counted');
  assert.equal(parent.openConnections.tcp, 2, 'the parent did not take it');
  assert.equal(adminConnectionClosedAt, undefined, 'the parent keeps the admin connection it accepted');

  // At the parent shutdown time the parent exits: its connections close, the merge drops it.
  await Promise.all(held.map((connection) => connection.closed));
  assert.ok(performance.now() - restartedAt >= 1_400, 'not before --parent-shutdown-time');
  assert.equal(parent.exitedWith, 'close');
  await until(async () => adminConnectionClosedAt !== undefined, "the parent's admin connection closed at its exit");
  await until(async () => (await stats(admin)).get('server.parent_connections') === 0, 'no parent left');
  assert.equal((await stats(admin)).get(tcpListener), 1, "the child's own connection");
});
