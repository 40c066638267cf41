/** check --pre's verdicts without a cluster: the version at its edges, the access questions, cert-manager asked or not. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { accessQuestions, BASE_RESOURCES, preInstallFindings, type ServerVersion } from '../../src/check/pre.js';

const version = (major: string, minor: string): ServerVersion => ({ major, minor, gitVersion: `v${major}.${minor}.0` });

function verdict(major: string, minor: string): string | undefined {
  return preInstallFindings({ version: version(major, minor), access: [] }).find((finding) => finding.check === 'pre.kubernetes-version')?.status;
}

describe('check --pre, judged', () => {
  test('the version: 1.26 is the first that passes, a later major passes, one that is not a number is a warning', () => {
    assert.deepEqual([verdict('1', '25'), verdict('1', '26'), verdict('1', '30+'), verdict('2', '0'), verdict('1', 'x')], ['failure', 'ok', 'ok', 'ok', 'warning']);
  });

  test('the questions: get, create and patch per kind, namespaced ones in the install namespace', () => {
    const questions = accessQuestions(BASE_RESOURCES);
    assert.equal(questions.length, BASE_RESOURCES.length * 3);
    assert.deepEqual(questions.filter((question) => question.resource === 'namespaces'), [
      { verb: 'get', group: '', resource: 'namespaces' },
      { verb: 'create', group: '', resource: 'namespaces' },
      { verb: 'patch', group: '', resource: 'namespaces' },
    ]);
    assert.ok(questions.filter((question) => question.resource === 'deployments').every((question) => question.namespace === 'envoy-shutdown-manager'), 'Deployments are asked about in the install namespace');
  });

  test('cert-manager is judged only when asked: not served is a failure, not asked is no finding', () => {
    const base = { version: version('1', '31'), access: [] };
    assert.deepEqual(preInstallFindings(base).map((finding) => finding.check), ['pre.kubernetes-version', 'pre.permissions']);
    const absent = preInstallFindings({ ...base, certManager: { served: undefined } }).find((finding) => finding.check === 'pre.cert-manager');
    assert.equal(absent?.status, 'failure');
  });
});
