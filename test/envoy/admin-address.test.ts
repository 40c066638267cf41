import assert from 'node:assert/strict';
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { connectTargetOf, inodeOf, socketPathState } from '../../src/envoy/admin-address.js';

describe('admin address', () => {
  test('an address names a Unix socket or a host and port, once', () => {
    assert.deepEqual(connectTargetOf('unix:/admin/admin.sock', 9001), { socketPath: '/admin/admin.sock' }, 'a socket: the port is ignored');
    assert.deepEqual(connectTargetOf('127.0.0.1', 9001), { host: '127.0.0.1', port: 9001 }, 'an IPv4 host');
    assert.deepEqual(connectTargetOf('::1', 19000), { host: '::1', port: 19000 }, 'an IPv6 host, unbracketed');
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
