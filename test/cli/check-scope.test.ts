/**
 * `envoy-shutdown-manager check` scoped as kubectl is (-n, -A) and waiting as linkerd check does (--wait): the built
 * entry point in a child process against the fake API server, changed while the command waits. Needs
 * `npm run build` first.
 */
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { parse as parseYaml } from 'yaml';
import type { CheckReport, Finding } from '../../src/check/report.js';
import { addNamespace, addPod, installWebhook, startCheckCluster, type CheckCluster } from '../support/check-cluster.js';
import { runBuiltEntry, type Finished } from '../support/process.js';
import { waitUntil } from '../support/wait.js';

const clusters: CheckCluster[] = [];
after(async () => {
  await Promise.all(clusters.map((cluster) => cluster.close()));
});

/** The webhook healthy; edge opted in with a protected pod, other not opted in with one pod, quiet with none. */
async function cluster(): Promise<CheckCluster> {
  const started = await startCheckCluster();
  clusters.push(started);
  await installWebhook(started.fake);
  addNamespace(started.fake, 'edge');
  addPod(started.fake, 'edge', 'envoy-1', { owner: 'DaemonSet/envoy' });
  addNamespace(started.fake, 'other', false);
  addPod(started.fake, 'other', 'loner', { injected: false });
  addNamespace(started.fake, 'quiet');
  return started;
}

function check(target: CheckCluster, args: readonly string[], env: Record<string, string> = {}): Promise<Finished> {
  return runBuiltEntry(['check', '--kubeconfig', target.kubeconfig, ...args], { timeoutMs: 30_000, env });
}

async function json(target: CheckCluster, args: readonly string[], env: Record<string, string> = {}): Promise<{ run: Finished; report: CheckReport }> {
  const run = await check(target, [...args, '--output', 'json'], env);
  return { run, report: JSON.parse(run.stdout) as CheckReport };
}

function named(report: CheckReport, name: string): Finding[] {
  return report.findings.filter((finding) => finding.check === name);
}

/** The namespaces whose pods were listed, in the order asked. */
function podListsOf(target: CheckCluster, from = 0): string[] {
  return target.fake.requests
    .slice(from)
    .map((request) => /^\/api\/v1\/namespaces\/([^/]+)\/pods$/.exec(request.path)?.[1])
    .filter((namespace): namespace is string => namespace !== undefined);
}

describe('check -n and -A', () => {
  test('-n NAME, -n=NAME, -nNAME and --namespace NAME: that namespace only, listed by name; the webhook checked all the same', async () => {
    const target = await cluster();
    for (const args of [['-n', 'edge'], ['-n=edge'], ['-nedge'], ['--namespace', 'edge']]) {
      const from = target.fake.requests.length;
      const { run, report } = await json(target, args);
      assert.equal(run.code, 0, `${args.join(' ')}: ${run.stderr}`);
      assert.deepEqual(podListsOf(target, from), ['edge'], args.join(' '));
      assert.deepEqual(named(report, 'pods.protected').map((finding) => finding.message), ['namespace edge: 1 of 1 Envoy pod protected']);
      assert.equal(named(report, 'webhook.endpoints')[0]?.status, 'ok');
      const listed = target.fake.requests.slice(from).find((request) => request.path === '/api/v1/namespaces');
      assert.match(listed?.query ?? '', /fieldSelector=metadata\.name%3Dedge/, 'list namespaces, which manifests/check grants');
    }
  });

  test('without -n: every opted-in namespace (the default kept); -A and --all-namespaces: every namespace', async () => {
    const target = await cluster();
    let from = target.fake.requests.length;
    await json(target, []);
    assert.deepEqual(podListsOf(target, from).sort(), ['edge', 'quiet']);
    for (const flag of ['-A', '--all-namespaces']) {
      from = target.fake.requests.length;
      const { run, report } = await json(target, [flag]);
      assert.equal(run.code, 0);
      assert.deepEqual(podListsOf(target, from).sort(), ['edge', 'envoy-shutdown-manager', 'other', 'quiet'], flag);
      assert.deepEqual(named(report, 'pods.not-opted-in').map((finding) => finding.pods), [['other/loner']], flag);
    }
  });

  test("kubectl's -o: -o json, -o=json and -ojson are --output json, -o yaml the same findings in YAML (issue 35); a value it does not know names the choices", async () => {
    const target = await cluster();
    for (const spelling of [['-o', 'json'], ['-o=json'], ['-ojson']]) {
      const run = await check(target, spelling);
      assert.equal(run.code, 0, `${spelling.join(' ')}: ${run.stderr}`);
      assert.ok(Array.isArray((JSON.parse(run.stdout) as CheckReport).findings), spelling.join(' '));
    }
    const asJson = JSON.parse((await check(target, ['-o', 'json'])).stdout) as CheckReport;
    const asYaml = await check(target, ['-o', 'yaml']);
    assert.equal(asYaml.code, 0, asYaml.stderr);
    assert.deepEqual(parseYaml(asYaml.stdout), asJson, 'the YAML report is the JSON one');
    const wrong = await check(target, ['-o', 'xml']);
    assert.equal(wrong.code, 2);
    assert.match(wrong.stderr, /--output.*xml.*one of text, json, yaml/);
  });

  test('with -o json or -o yaml an error is JSON or YAML on stdout, with the exit code; nothing on stderr', async () => {
    const cases: { args: string[]; parse: (text: string) => unknown; message: RegExp }[] = [
      { args: ['-o', 'json', '--kubeconfig', '/nonexistent/kubeconfig'], parse: JSON.parse, message: /cannot load the kubeconfig \/nonexistent\/kubeconfig/ },
      { args: ['--frobnicate', '--output=json'], parse: JSON.parse, message: /^unknown flag --frobnicate/ },
      { args: ['-oyaml', '--pod-selector', 'app in ('], parse: parseYaml, message: /--pod-selector app in \(/ },
    ];
    for (const { args, parse, message } of cases) {
      const run = await runBuiltEntry(['check', ...args]);
      assert.equal(run.code, 2, `${args.join(' ')}: ${run.stdout}${run.stderr}`);
      assert.equal(run.stderr, '', args.join(' '));
      const { error } = parse(run.stdout) as { error: { message: string; exitCode: number } };
      assert.match(error.message, message, args.join(' '));
      assert.equal(error.exitCode, 2, args.join(' '));
    }
    // The format from the environment, as the settings read it, renders the error too.
    const fromEnv = await runBuiltEntry(['check', '--kubeconfig', '/nonexistent/kubeconfig'], { env: { SHUTDOWN_MANAGER_OUTPUT: 'json' } });
    assert.deepEqual([fromEnv.code, fromEnv.stderr], [2, ''], fromEnv.stdout);
    assert.match((JSON.parse(fromEnv.stdout) as { error: { message: string } }).error.message, /cannot load the kubeconfig/);
    // An output format it does not know cannot be the error's: the message is text, on stderr.
    const unknown = await runBuiltEntry(['check', '-o', 'xml']);
    assert.deepEqual([unknown.code, unknown.stdout], [2, '']);
    assert.match(unknown.stderr, /--output.*xml/);
  });

  test('-n of a namespace that did not opt in: a warning with the label to set, its pods as information', async () => {
    const target = await cluster();
    const { run, report } = await json(target, ['-n', 'other']);
    assert.equal(run.code, 0);
    const [warning] = named(report, 'pods.namespaces');
    assert.equal(warning?.status, 'warning');
    assert.equal(warning?.message, 'namespace other is not labelled shutdown-manager.io/inject=enabled: the webhook injects no pod there');
    assert.equal(warning?.fix, 'kubectl label namespace other shutdown-manager.io/inject=enabled, then restart its Envoy workloads');
    assert.deepEqual(named(report, 'pods.not-opted-in')[0]?.pods, ['other/loner']);
    assert.deepEqual(named(report, 'pods.protected'), [], 'edge is out of scope');
  });

  test('-n of a namespace the cluster does not have: exit 2, naming it and the closest opted-in one', async () => {
    const target = await cluster();
    const run = await check(target, ['-n', 'egde']);
    assert.equal(run.code, 2);
    assert.equal(run.stdout, '');
    assert.equal(run.stderr, 'envoy-shutdown-manager check: --namespace egde: no such namespace in the cluster; did you mean edge? (namespaces opted in: edge, quiet)\n');
  });

  test('SHUTDOWN_MANAGER_NAMESPACE (the webhook pod sets it) does not scope the check', async () => {
    const target = await cluster();
    const from = target.fake.requests.length;
    const { run } = await json(target, [], { SHUTDOWN_MANAGER_NAMESPACE: 'other' });
    assert.equal(run.code, 0);
    assert.deepEqual(podListsOf(target, from).sort(), ['edge', 'quiet']);
  });

  test('usage errors: exit 2, one line naming the flag; did-you-mean kept', async () => {
    const target = await cluster();
    const cases: [string[], RegExp][] = [
      [['-n', 'edge', '-A'], /^envoy-shutdown-manager check: -n\/--namespace edge and -A\/--all-namespaces: give one/],
      [['-n', 'Edge_1'], /^envoy-shutdown-manager check: flag --namespace: "Edge_1" is not valid; expected a namespace name/],
      [['-n'], /--namespace/],
      [['--namespac', 'edge'], /^envoy-shutdown-manager check: unknown flag --namespac; did you mean --namespace\? \(see --help\)\n$/],
      [['--wait=soon'], /^envoy-shutdown-manager check: flag --wait: "soon" is not valid/],
      [['--wiat'], /unknown flag --wiat; did you mean --wait\?/],
    ];
    const from = target.fake.requests.length;
    for (const [args, message] of cases) {
      const run = await check(target, args);
      assert.equal(run.code, 2, args.join(' '));
      assert.match(run.stderr, message, args.join(' '));
      assert.equal(run.stderr.trim().split('\n').length, 1, run.stderr);
    }
    assert.equal(target.fake.requests.length, from, 'nothing read');
  });
});

describe('check --wait', () => {
  test('retries until every check passes: a pod without the sidecar replaced meanwhile, then exit 0 with one report', async () => {
    const target = await cluster();
    addPod(target.fake, 'edge', 'old-1', { owner: 'DaemonSet/envoy', injected: false });
    const running = json(target, ['-n', 'edge', '--wait=20s']);
    await waitUntil(() => podListsOf(target).length >= 2, 15_000, 'a second attempt');
    assert.ok(target.fake.removeObject('v1', 'Pod', 'edge', 'old-1'), 'the pod without the sidecar was there to remove');
    addPod(target.fake, 'edge', 'new-1', { owner: 'DaemonSet/envoy' });
    const started = performance.now();
    const { run, report } = await running;
    assert.equal(run.code, 0, run.stderr);
    assert.ok(performance.now() - started < 10_000, 'passed within a few retries');
    assert.equal(report.failed, false);
    assert.match(run.stderr, /^envoy-shutdown-manager check: waiting \(\d+s left\): pods\.missing-sidecar\n$/, 'one line: what fails did not change until it passed');
  });

  test('runs out: exit 1, the last report, and stderr naming what still fails', async () => {
    const target = await cluster();
    addPod(target.fake, 'edge', 'old-1', { owner: 'DaemonSet/envoy', injected: false });
    const started = performance.now();
    const { run, report } = await json(target, ['--wait=2s']);
    const took = performance.now() - started;
    assert.equal(run.code, 1);
    assert.equal(report.failed, true);
    assert.ok(took >= 2_000 && took < 15_000, `${took} ms`);
    assert.ok(podListsOf(target).filter((namespace) => namespace === 'edge').length >= 2, 'it tried again');
    assert.match(run.stderr, /envoy-shutdown-manager check: --wait 2s ran out; still failing: pods\.missing-sidecar\n$/);
  });

  test('an API server error is retried; a refused permission is not; without --wait neither is', async () => {
    const target = await cluster();
    target.fake.fail({ path: /\/pods$/, status: 500, message: 'etcd leader changed', times: 1 });
    const once = await check(target, ['-n', 'edge']);
    assert.equal(once.code, 2);
    assert.match(once.stderr, /answered 500 to list pods in namespace edge: etcd leader changed/);

    target.fake.fail({ path: /\/pods$/, status: 500, message: 'etcd leader changed', times: 1 });
    const retried = await check(target, ['-n', 'edge', '--wait=20s']);
    assert.equal(retried.code, 0, retried.stderr);
    assert.match(retried.stderr, /waiting \(\d+s left\): .*etcd leader changed/);

    target.fake.fail({ path: /\/pods$/, status: 403, reason: 'Forbidden', message: 'pods is forbidden', times: 1 });
    const started = performance.now();
    const refused = await check(target, ['-n', 'edge', '--wait=20s']);
    assert.equal(refused.code, 2);
    assert.match(refused.stderr, /^envoy-shutdown-manager check: permission denied: cannot list pods in namespace edge/);
    assert.ok(performance.now() - started < 10_000, 'not retried for 20 s');
  });

  test('a bare --wait before another flag waits the default; a passing check returns at once', async () => {
    const target = await cluster();
    const started = performance.now();
    const run = await check(target, ['--wait', '-n', 'edge']);
    assert.equal(run.code, 0, run.stderr);
    assert.equal(run.stderr, '');
    assert.ok(performance.now() - started < 10_000, 'a passing check returns at once, not after the default wait');
    const help = await runBuiltEntry(['check', '--help']);
    assert.match(help.stdout, /--wait\n.*a bare --wait: 5m/);
    assert.match(help.stdout, /--namespace\n {6}-n: only this namespace's Envoy pods.*\n {6}no environment variable, default \(none\)/);
  });
});
