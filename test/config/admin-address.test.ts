/**
 * --admin-address: a host reached over TCP. A Unix socket path, a URL, a host:port or a bracketed IPv6 is
 * refused at start with what to write instead, rather than looked up as a host name on every call.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ConfigErrors } from '../../src/config/errors.js';
import { parseSidecarConfig } from '../../src/config/sidecar.js';
import { adminHost, expectedForm } from '../../src/config/values.js';
import { runSidecarToExit } from '../support/sidecar-process.js';

describe('the admin host value kind', () => {
  test('IPv4 and IPv6 literals and DNS names are accepted, trimmed', () => {
    for (const host of ['127.0.0.1', '10.1.2.3', '::1', '::', 'fe80::1%eth0', '2001:db8::9901', 'localhost', 'envoy-admin.default.svc.cluster.local', 'envoy.local.', 'xn--bcher-kva.example']) {
      assert.equal(adminHost.parse(host), host, host);
    }
    assert.equal(adminHost.parse(' 127.0.0.1 '), '127.0.0.1');
  });

  test('each kind of mistake is refused with what to write instead', () => {
    const cases: Array<[string, RegExp]> = [
      ['/admin/admin.sock', /Unix socket path, and Unix sockets are not supported yet: use Envoy's TCP admin address .* and its port in --admin-port/],
      ['unix:/admin/admin.sock', /Unix sockets are not supported yet/],
      ['http://127.0.0.1:9901', /it is a URL: give the host alone here and the port in --admin-port/],
      ['127.0.0.1:9901', /it has a port \(":9901"\): give the host alone here and the port in --admin-port/],
      ['localhost:19000', /it has a port \(":19000"\)/],
      ['[::1]', /brackets are for URLs: write an IPv6 address without them \(e\.g\. ::1\)/],
      ['[::1]:9901', /brackets are for URLs/],
      ['::1]', /brackets/],
      ['local host', /it contains whitespace/],
      ['', /it is empty/],
      ['256.1.1.1', /not a valid IPv4 address/],
      ['1.2.3', /not a valid IPv4 address/],
      ['::1::2', /contains ":" but is not a valid IPv6 address/],
      ['envoy_admin', /neither an IP address nor a valid DNS name/],
      ['-envoy', /neither an IP address nor a valid DNS name/],
    ];
    for (const [raw, problem] of cases) {
      assert.equal(adminHost.parse(raw), undefined, raw);
      assert.match(expectedForm(adminHost, raw), problem, raw);
      assert.match(expectedForm(adminHost, raw), /^an IPv4 or IPv6 address or a DNS name, without port or brackets/);
    }
  });

  test('the sidecar setting uses it, default 127.0.0.1', () => {
    assert.equal(parseSidecarConfig([], {})['admin-address'], '127.0.0.1');
    assert.equal(parseSidecarConfig(['--admin-address=::1'], {})['admin-address'], '::1');
    assert.throws(
      () => parseSidecarConfig([], { SHUTDOWN_MANAGER_ADMIN_ADDRESS: '/admin/admin.sock' }),
      (error: unknown) => error instanceof ConfigErrors && error.errors[0]?.setting === 'admin-address' && /SHUTDOWN_MANAGER_ADMIN_ADDRESS/.test(error.message),
    );
  });

  test('the built sidecar exits 2 on --admin-address=/x, naming the flag and the way out (npm run build first)', async () => {
    const result = await runSidecarToExit(['--admin-address=/x']);
    assert.equal(result.code, 2, result.stderr);
    assert.match(result.stderr, /--admin-address.*"\/x" is not valid; expected .* Unix sockets are not supported yet: use Envoy's TCP admin address/);
  });
});
