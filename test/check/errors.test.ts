/**
 * Why `check` could not look at the cluster (src/check/errors.ts): one-line messages that name what to do, and exit
 * status 2, the cluster's state unknown, which is not a failed check (1).
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { parseAllDocuments } from 'yaml';
import {
  ApiAnswerError,
  causeOf,
  CheckError,
  describeRead,
  ForbiddenError,
  KubeconfigError,
  NamespaceNotFoundError,
  UnauthenticatedError,
  UnreachableError,
  type ReadOperation,
} from '../../src/check/errors.js';
import { causeOf as sharedCauseOf, describeFailure, EXIT_FAILURE, EXIT_USAGE, UserFacingError } from '../../src/errors.js';
import { REPO_ROOT } from '../support/process.js';

const LIST_PODS: ReadOperation = { verb: 'list', resource: 'pods', group: '', namespace: 'edge' };
const GET_CONFIGURATION: ReadOperation = { verb: 'get', resource: 'mutatingwebhookconfigurations', group: 'admissionregistration.k8s.io', name: 'shutdown-manager.io' };

describe('describeRead', () => {
  test('names a read as RBAC does: verb, resource, /name, and the namespace', () => {
    assert.equal(describeRead(LIST_PODS), 'list pods in namespace edge', 'a list in a namespace');
    assert.equal(describeRead(GET_CONFIGURATION), 'get mutatingwebhookconfigurations/shutdown-manager.io', 'a named cluster-scoped object');
    assert.equal(describeRead({ verb: 'get', resource: 'deployments', group: 'apps', name: 'envoy-shutdown-manager', namespace: 'envoy-shutdown-manager' }), 'get deployments/envoy-shutdown-manager in namespace envoy-shutdown-manager', 'a named object in a namespace');
    assert.equal(describeRead({ verb: 'create', resource: 'selfsubjectaccessreviews', group: 'authorization.k8s.io' }), 'create selfsubjectaccessreviews', 'neither name nor namespace');
  });
});

describe('the errors of check', () => {
  const errors: readonly (readonly [CheckError, string])[] = [
    [new KubeconfigError('no kubeconfig'), 'KubeconfigError'],
    [new UnreachableError('no answer'), 'UnreachableError'],
    [new UnauthenticatedError('401'), 'UnauthenticatedError'],
    [new ForbiddenError(LIST_PODS, undefined), 'ForbiddenError'],
    [new NamespaceNotFoundError('egde', 'edge', ['edge']), 'NamespaceNotFoundError'],
    [new ApiAnswerError('500'), 'ApiAnswerError'],
  ];

  test('each is a user-facing error of its own name, ending check with exit status 2 and its message alone', () => {
    for (const [error, name] of errors) {
      assert.equal(error.name, name, `${name} names itself`);
      assert.ok(error instanceof UserFacingError && error instanceof CheckError, `${name} is user-facing, and one of check's`);
      assert.equal(error.exitCode, EXIT_USAGE, `${name}: the cluster's state is unknown`);
      assert.deepEqual(describeFailure(error), { text: error.message, exitCode: EXIT_USAGE }, `${name} is printed without a stack`);
    }
    assert.notEqual(EXIT_USAGE, EXIT_FAILURE, 'unknown is not the same as a failed check');
    assert.equal(errors.length, 6, 'every kind of error');
  });

  test('ForbiddenError: the read refused, the RBAC rule it needs, what the API server said, and the ClusterRole to bind', () => {
    const error = new ForbiddenError(GET_CONFIGURATION, 'mutatingwebhookconfigurations.admissionregistration.k8s.io "shutdown-manager.io" is forbidden');
    assert.equal(error.operation, GET_CONFIGURATION, 'the read is kept for the caller');
    assert.equal(
      error.message,
      'permission denied: cannot get mutatingwebhookconfigurations/shutdown-manager.io (RBAC verb "get" on resource "mutatingwebhookconfigurations" in API group "admissionregistration.k8s.io"); ' +
        'the API server said: mutatingwebhookconfigurations.admissionregistration.k8s.io "shutdown-manager.io" is forbidden. ' +
        'Bind the ClusterRole of manifests/check to yourself: kubectl apply -k manifests/check && kubectl create clusterrolebinding envoy-shutdown-manager-check --clusterrole=envoy-shutdown-manager-check --user=<you>',
      'the whole message',
    );
    const silent = new ForbiddenError(LIST_PODS, undefined);
    assert.match(silent.message, /in API group ""\)\. Bind/, 'the core group is named "", and no server message is claimed');
    assert.doesNotMatch(silent.message, /API server said/, 'nothing said, nothing quoted');
    assert.doesNotMatch(silent.message, /\n/, 'one line');
  });

  test("ForbiddenError's advice works: manifests/check is a kustomization holding the ClusterRole it names, which grants check's reads", () => {
    const directory = join(REPO_ROOT, 'manifests/check');
    const kustomization = parseAllDocuments(readFileSync(join(directory, 'kustomization.yaml'), 'utf8')).map((document) => document.toJSON());
    const files = (kustomization[0]?.resources ?? []) as string[];
    const roles = files
      .flatMap((file) => parseAllDocuments(readFileSync(join(directory, file), 'utf8')).map((document) => document.toJSON()))
      .filter((object) => object?.kind === 'ClusterRole');
    const role = String(/--clusterrole=(\S+)/.exec(new ForbiddenError(LIST_PODS, undefined).message)?.[1]);
    const named = roles.find((object) => object.metadata?.name === role);
    assert.ok(named !== undefined, `kubectl apply -k manifests/check creates the ClusterRole ${role}`);
    const grants = (operation: ReadOperation): boolean =>
      (named.rules as { apiGroups: string[]; resources: string[]; verbs: string[]; resourceNames?: string[] }[]).some(
        (rule) =>
          rule.apiGroups.includes(operation.group) &&
          rule.resources.includes(operation.resource) &&
          rule.verbs.includes(operation.verb) &&
          (rule.resourceNames === undefined || (operation.name !== undefined && rule.resourceNames.includes(operation.name))),
      );
    assert.ok(grants(LIST_PODS), 'it grants listing pods');
    assert.ok(grants(GET_CONFIGURATION), 'it grants reading the webhook configuration');
    assert.ok(!grants({ verb: 'get', resource: 'secrets', group: '' }), 'and no Secret (a control: the rules are really read)');
  });

  test('NamespaceNotFoundError: the namespace asked, the closest one when there is one, and the opted-in ones (or none)', () => {
    assert.equal(
      new NamespaceNotFoundError('egde', 'edge', ['edge', 'quiet']).message,
      '--namespace egde: no such namespace in the cluster; did you mean edge? (namespaces opted in: edge, quiet)',
      'with a suggestion',
    );
    assert.equal(new NamespaceNotFoundError('payments', undefined, []).message, '--namespace payments: no such namespace in the cluster (namespaces opted in: none)', 'no suggestion, nothing opted in');
  });

  test("causeOf (src/errors.ts's, re-exported for the reads): the innermost reason, with its code when its message lacks it", () => {
    assert.equal(causeOf, sharedCauseOf, 're-exported, not copied');
    const refused = Object.assign(new Error('connect failed'), { code: 'ECONNREFUSED' });
    assert.equal(causeOf(new Error('request to https://10.0.0.1:6443 failed', { cause: refused })), 'connect failed (ECONNREFUSED)', 'the innermost cause, its code added');
    const named = Object.assign(new Error('connect ECONNREFUSED 10.0.0.1:6443'), { code: 'ECONNREFUSED' });
    assert.equal(causeOf(new Error('outer', { cause: named })), 'connect ECONNREFUSED 10.0.0.1:6443', 'a code the message names is not repeated');
    assert.equal(causeOf(new Error('outer', { cause: 'a string' })), 'outer', 'a cause that is no Error ends the chain');
    assert.equal(causeOf('thrown text'), 'thrown text', 'what was thrown, when no Error');
  });
});
