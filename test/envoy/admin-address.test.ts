import assert from 'node:assert/strict';
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { EnvoyAdminClient } from '../../src/envoy/admin-client.js';
import { adminHostPort, adminTarget, connectTargetOf, inodeOf, socketPathState } from '../../src/envoy/admin-address.js';

describe('admin address', () => {
  test('an address names a Unix socket or a host and port, once', () => {
    assert.deepEqual(connectTargetOf('unix:/admin/admin.sock', 9001), { socketPath: '/admin/admin.sock' }, 'a socket: the port is ignored');
    assert.deepEqual(connectTargetOf('127.0.0.1', 9001), { host: '127.0.0.1', port: 9001 }, 'an IPv4 host');
    assert.deepEqual(connectTargetOf('::1', 19000), { host: '::1', port: 19000 }, 'an IPv6 host, unbracketed');
  });

  test("the admin API's name, as the admin client and the sidecar's listening line give it", () => {
    const cases = [
      ['127.0.0.1', 9901, '127.0.0.1:9901', 'http://127.0.0.1:9901'],
      ['::1', 19000, '[::1]:19000', 'http://[::1]:19000'],
      ['localhost', 9001, 'localhost:9001', 'http://localhost:9001'],
      ['unix:/admin/admin.sock', 9901, 'unix:/admin/admin.sock', 'unix:/admin/admin.sock'],
    ] as const;
    for (const [address, port, hostPort, target] of cases) {
      assert.equal(adminHostPort(address, port), hostPort, `${address}: host and port, IPv6 in brackets`);
      assert.equal(adminTarget(address, port), target, `${address}: the name in messages`);
      const client = new EnvoyAdminClient({ address, port, timeoutMs: 1_000 });
      assert.deepEqual([client.address, client.target], [hostPort, target], `${address}: the admin client's own names`);
      client.close();
    }
  });

  test('what is at a socket path: a socket, nothing, a file, a directory; the inode of a socket only', async (t) => {
    const directory = mkdtempSync(join(tmpdir(), 'admin-address-'));
    t.after(() => rmSync(directory, { recursive: true, force: true }));
    const socketPath = join(directory, 'admin.sock');
    const server = net.createServer().listen(socketPath);
    t.after(() => server.close());
    await new Promise((resolve) => server.once('listening', resolve));
    writeFileSync(join(directory, 'file'), '');
    mkdirSync(join(directory, 'dir'));
    assert.equal(socketPathState(socketPath), 'socket', 'a listening socket');
    assert.equal(socketPathState(join(directory, 'missing')), 'missing', 'no file');
    assert.equal(socketPathState(join(directory, 'file')), 'file', 'a regular file');
    assert.equal(socketPathState(join(directory, 'dir')), 'directory', 'a directory');
    assert.equal(socketPathState(join(directory, 'file', 'below')), 'missing', 'a path through a file is missing (ENOTDIR)');
    assert.match(inodeOf(socketPath) ?? '', /^\d+:\d+$/, 'a socket has device:inode');
    assert.equal(inodeOf(join(directory, 'file')), undefined, 'a file is no socket');
    assert.equal(inodeOf('@abstract-name'), 'abstract', 'an abstract name is bound by one socket at a time');
    assert.equal(socketPathState('@abstract-name'), 'socket', 'an abstract name has no file to look at');
  });
});
