/**
 * --admin-address (and annotation envoy-admin-address): a host reached over TCP, or a Unix socket as
 * unix:/path. A URL, a host:port, a bracketed IPv6, a relative or abstract socket name is refused at start
 * with what to write instead, rather than looked up as a host name on every call.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ConfigErrors } from '../../src/config/errors.js';
import { parseSidecarConfig } from '../../src/config/sidecar.js';
import { adminAddress, adminSocketPath, expectedForm } from '../../src/config/values.js';
import { runSidecarToExit } from '../support/sidecar-process.js';

describe('the admin address value kind', () => {
  test('IPv4 and IPv6 literals and DNS names are accepted, trimmed', () => {
    for (const host of ['127.0.0.1', '10.1.2.3', '::1', '::', 'fe80::1%eth0', '2001:db8::9901', 'localhost', 'envoy-admin.default.svc.cluster.local', 'envoy.local.', 'xn--bcher-kva.example']) {
      assert.equal(adminAddress.parse(host), host, host);
    }
    assert.equal(adminAddress.parse(' 127.0.0.1 '), '127.0.0.1');
  });

  test('each kind of mistake is refused with what to write instead', () => {
    const cases: Array<[string, RegExp]> = [
      ['unix:admin.sock', /a socket path must be absolute/],
      ['unix:./admin.sock', /a socket path must be absolute/],
      ['unix://admin/admin.sock', /it names a host after "unix:\/\/": write unix:\/path\/to\/admin\.sock/],
      ['unix:@envoy-admin', /abstract socket name/],
      ['unix:/admin/', /ends with "\/"/],
      ['unix:/admin/../etc/admin.sock', /"\." or "\.\." segments/],
      ['unix:/admin/admin sock', /whitespace or a control character/],
      [`unix:/${'a'.repeat(120)}`, /121 bytes long, and Linux connects only to paths of at most 107/],
      ['unix:', /a socket path must be absolute/],
      ['http://127.0.0.1:9901', /it is a URL: give the host alone here and the port in --admin-port \(or unix:\/path for a Unix socket\)/],
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
      assert.equal(adminAddress.parse(raw), undefined, raw);
      assert.match(expectedForm(adminAddress, raw), problem, raw);
      assert.match(expectedForm(adminAddress, raw), /^an IPv4 or IPv6 address or a DNS name without port or brackets .* or a Unix socket as unix:\/absolute\/path/);
    }
  });

  test("a Unix socket is written unix:/path; unix:///path and a bare absolute path (Contour's spelling) mean the same", () => {
    for (const raw of ['unix:/admin/admin.sock', 'unix:///admin/admin.sock', '/admin/admin.sock', ' UNIX:/admin/admin.sock ']) {
      assert.equal(adminAddress.parse(raw), 'unix:/admin/admin.sock', raw);
    }
    assert.equal(adminSocketPath('unix:/admin/admin.sock'), '/admin/admin.sock');
    assert.equal(adminSocketPath('127.0.0.1'), undefined);
    assert.equal(adminSocketPath('::1'), undefined);
    assert.equal(adminAddress.parse(`unix:/${'a'.repeat(106)}`), `unix:/${'a'.repeat(106)}`, '107 bytes is the longest path');
  });

  test('the sidecar setting uses it, default 127.0.0.1', () => {
    assert.equal(parseSidecarConfig([], {})['admin-address'], '127.0.0.1');
    assert.equal(parseSidecarConfig(['--admin-address=::1'], {})['admin-address'], '::1');
    assert.equal(parseSidecarConfig(['--admin-address=/admin/admin.sock'], {})['admin-address'], 'unix:/admin/admin.sock');
    assert.throws(
      () => parseSidecarConfig([], { SHUTDOWN_MANAGER_ADMIN_ADDRESS: 'unix:admin.sock' }),
      (error: unknown) => error instanceof ConfigErrors && error.errors[0]?.setting === 'admin-address' && /SHUTDOWN_MANAGER_ADMIN_ADDRESS/.test(error.message),
    );
  });

  test('the built sidecar exits 2 on --admin-address=unix:x, naming the flag and the way out (npm run build first)', async () => {
    const result = await runSidecarToExit(['--admin-address=unix:x']);
    assert.equal(result.code, 2, result.stderr);
    assert.match(result.stderr, /--admin-address.*"unix:x" is not valid; expected .* a socket path must be absolute .* write unix:\/path\/to\/admin\.sock/);
  });
});
