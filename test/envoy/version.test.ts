/**
 * Envoy's release as /server_info reports it, and the drain_listeners call it decides (src/envoy/version.ts; the
 * table of spellings by release: docs/distributions.md#envoys-release).
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { drainListenersPath, hasSkipExit, parseEnvoyVersion, SKIP_EXIT_SINCE, type EnvoyVersion } from '../../src/envoy/version.js';

/** `version` of /server_info (and of `envoy --version`) as released builds print it, from public logs and docs. */
const BUILDS: readonly (readonly [string, string])[] = [
  ['1b7cff25107d5b549e389f84104853b35f7503a1/1.21.0/Modified/RELEASE/BoringSSL', '1.21.0'],
  ['db8a88da7a0a3b8259a2f6b6ee4a806c23795a9f/1.24.2-dev/Modified/RELEASE/BoringSSL-FIPS', '1.24.2-dev'],
  ['b5ca88acee3453c9459474b8f22215796eff4dde/1.28.0/Clean/RELEASE/BoringSSL', '1.28.0'],
  ['bcf6c19288e9d4a133f815657c951539018bc9bb/1.29.4-dev/Clean/RELEASE/BoringSSL', '1.29.4-dev'],
  ['810bfcb8cae456e3a5e6541a0ee853185e2586f7/1.30.6/Modified/RELEASE/BoringSSL', '1.30.6'],
  ['b050513e840aa939a01f89b07c162f00ab3150eb/1.31.2/Clean/RELEASE/BoringSSL', '1.31.2'],
  ['b0f43d67aa25c1b03c97186a200cc187f4c22db3/1.33.0/Clean/RELEASE/BoringSSL', '1.33.0'],
  ['dc2d3098ae5641555f15c71d5bb5ce0060a8015c/1.36.2/Modified/RELEASE/BoringSSL-FIPS-2023042800', '1.36.2'],
  ['af30be60b7c35f2aceaea1b7382c7fbf12aa5e67/1.37.2-dev/Clean/RELEASE/BoringSSL', '1.37.2-dev'],
];

function release(text: string): EnvoyVersion {
  const version = parseEnvoyVersion(`0000000000000000000000000000000000000000/${text}/Clean/RELEASE/BoringSSL`);
  assert.notEqual(version, null, `${text} is read as a release`);
  return version as EnvoyVersion;
}

describe('parseEnvoyVersion', () => {
  test("reads the release of real Envoy build strings, the text as written with its suffix", () => {
    for (const [build, text] of BUILDS) {
      const [major, minor, patch] = text.replace(/-.*$/, '').split('.').map(Number);
      assert.deepEqual(parseEnvoyVersion(build), { major, minor, patch, text }, `the release of ${build}`);
    }
  });

  test('takes the first part that is a release, wherever it stands; the revision before it is none', () => {
    assert.equal(parseEnvoyVersion('custom-build/internal/1.30.1+mesh.3/Clean')?.text, '1.30.1+mesh.3', 'a release in the third part, with a build suffix');
    assert.equal(parseEnvoyVersion('1.32.0')?.minor, 32, 'a bare release');
    assert.equal(parseEnvoyVersion('1.28.0/1.31.0/Clean/RELEASE/BoringSSL')?.minor, 28, 'the first of two releases');
  });

  test('is null for what is not a build string with a release', () => {
    const junk: unknown[] = [
      undefined,
      null,
      1.36,
      { version: '1.36.2' },
      ['x/1.36.2/Clean'],
      '',
      'envoy',
      'b050513e840aa939a01f89b07c162f00ab3150eb/Clean/RELEASE/BoringSSL',
      'x/1.36/Clean/RELEASE/BoringSSL',
      'x/v1.36.2/Clean/RELEASE/BoringSSL',
      'x/1.36.2.1/Clean/RELEASE/BoringSSL',
      'x/ 1.36.2/Clean/RELEASE/BoringSSL',
      'x/12345.1.1/Clean/RELEASE/BoringSSL',
      `x/1.36.2-${'a'.repeat(65)}/Clean`,
      'x/1.36.2-dev!/Clean',
      'x/1.36.2_dev/Clean',
    ];
    for (const build of junk) assert.equal(parseEnvoyVersion(build), null, `no release in ${JSON.stringify(build)}`);
  });

  test('a suffix of 64 characters is read; a build string over 512 characters is not, whatever it holds', () => {
    assert.equal(parseEnvoyVersion(`x/1.36.2-${'a'.repeat(64)}/Clean`)?.patch, 2, 'the longest suffix allowed');
    const long = `x/1.36.2/Clean/RELEASE/${'B'.repeat(512)}`;
    assert.equal(parseEnvoyVersion(long), null, 'too long a build string is not read');
    assert.equal(parseEnvoyVersion(long.slice(0, 512))?.text, '1.36.2', 'the same cut to 512 characters is');
  });
});

describe('drainListenersPath', () => {
  test('skip_exit is known from 1.29 on', () => {
    assert.deepEqual(SKIP_EXIT_SINCE, { major: 1, minor: 29 }, 'envoy PR #30003, released in 1.29');
    assert.equal(hasSkipExit(release('1.28.99')), false, 'the last 1.28');
    assert.equal(hasSkipExit(release('1.29.0')), true, 'the first 1.29');
    assert.equal(hasSkipExit(release('0.99.0')), false, 'a major release before 1');
    assert.equal(hasSkipExit(release('2.0.0')), true, 'a later major release');
    assert.equal(hasSkipExit(null), true, 'an unknown release is taken to know it');
  });

  test('each release boundary of the table gets its call, with and without inboundonly', () => {
    const cases: readonly (readonly [EnvoyVersion | null, string])[] = [
      [release('1.21.0'), 'graceful'],
      [release('1.28.7'), 'graceful'],
      [release('1.29.0'), 'graceful&skip_exit'],
      [release('1.29.4-dev'), 'graceful&skip_exit'],
      [release('1.34.0'), 'graceful&skip_exit'],
      [release('1.39.9'), 'graceful&skip_exit'],
      [release('1.40.0'), 'graceful&skip_exit'],
      [release('1.41.0-dev'), 'graceful&skip_exit'],
      [release('2.0.0'), 'graceful&skip_exit'],
      [null, 'graceful&skip_exit'],
    ];
    for (const [version, parameters] of cases) {
      const name = version?.text ?? 'an unknown release';
      assert.equal(drainListenersPath(version, false), `/drain_listeners?${parameters}`, `the call for ${name}`);
      assert.equal(drainListenersPath(version, true), `/drain_listeners?${parameters}&inboundonly`, `the call for ${name}, inbound listeners only`);
    }
  });

  test('never skip_exit without graceful (a 1.29 to 1.39 Envoy refuses it), on any release', () => {
    const paths = [null, ...[0, 1, 2].flatMap((major) => [0, 28, 29, 39, 40, 99].map((minor) => release(`${major}.${minor}.0`)))].flatMap((version) => [
      drainListenersPath(version, false),
      drainListenersPath(version, true),
    ]);
    assert.equal(paths.length, 38, 'both calls for every release tried');
    for (const path of paths) {
      const parameters = new URLSearchParams(path.slice(path.indexOf('?') + 1));
      assert.ok(parameters.has('graceful'), `${path} drains gracefully`);
      assert.equal(path.startsWith('/drain_listeners?graceful'), true, `${path} names graceful first`);
    }
  });
});
