/** What an entry point prints for the error that ends it: a user-facing error's message alone, anything else its stack. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { TlsFileError } from '../src/certs/mounted.js';
import { DevCertificatesError } from '../src/certs/files.js';
import { CertificateRequestError } from '../src/certs/generate.js';
import { SelfManagedTlsError } from '../src/certs/reconcile.js';
import { ManifestError } from '../src/cli/manifests.js';
import { ConfigError, ConfigErrors } from '../src/config/errors.js';
import { describeFailure, UsageError } from '../src/errors.js';
import { KubeConfigError } from '../src/kube/errors.js';
import { ServeError } from '../src/sidecar/server.js';

describe('describeFailure', () => {
  it('prints a KubeConfigError as its message, without a stack, and exits 1', () => {
    const error = new KubeConfigError('--self-signed-certs needs the ServiceAccount token; set automountServiceAccountToken: true');
    assert.deepEqual(describeFailure(error), { text: error.message, exitCode: 1 });
  });

  it('exits 2 for a wrong command line or setting', () => {
    const config = new ConfigErrors([new ConfigError('flag --port', 'x', 'a port number')]);
    assert.deepEqual(describeFailure(config), { text: 'flag --port: "x" is not valid; expected a port number', exitCode: 2 });
    assert.deepEqual(describeFailure(new UsageError('unknown mode=proxy')), { text: 'unknown mode=proxy', exitCode: 2 });
  });

  it('prints every other user-facing error as its message and exits 1', () => {
    for (const error of [
      new TlsFileError('cannot read the certificate'),
      new DevCertificatesError('dev certificates: tls.crt exists but tls.key does not'),
      new CertificateRequestError('dnsNames', 'a_b', 'a DNS name'),
      new ServeError('127.0.0.1', 8090, Object.assign(new Error('in use'), { code: 'EADDRINUSE' })),
      new SelfManagedTlsError('self-signed certificate: gave up', true),
      new ManifestError('document 1: bad'),
    ]) {
      assert.deepEqual(describeFailure(error), { text: error.message, exitCode: 1 }, error.name);
    }
  });

  it('prints anything else with its stack, as a bug, and exits 1', () => {
    const bug = new TypeError('x is undefined');
    assert.deepEqual(describeFailure(bug), { text: bug.stack, exitCode: 1 });
    assert.deepEqual(describeFailure('thrown text'), { text: 'thrown text', exitCode: 1 });
  });
});
