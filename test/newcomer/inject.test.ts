/**
 * docs/offline-injection.md run as written in a checkout: `npm run -s inject -- -f FILE` and the pipe with
 * `-f -` (the webhook's opt-in), and `--manual` (the whole injection). Its output is the manifest alone (no npm
 * banner), and an edited document keeps the layout it came with: kubectl's unindented sequences, four-space indentation, flow lists with or without inner padding.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { parseAllDocuments } from 'yaml';
import { within } from '../support/wait.js';
import { docCommands, spawnNpm, words } from './support.js';

/** As `kubectl get deploy envoy -o yaml` lays it out, with Envoy's drain flags already set and a comment. */
const KUBECTL_STYLE = `# the edge proxies
apiVersion: apps/v1
kind: Deployment
metadata:
  name: envoy
  namespace: edge
spec:
  replicas: 2
  selector:
    matchLabels:
      app: envoy
  template:
    metadata:
      labels:
        app: envoy
    spec:
      containers:
      - name: envoy
        image: envoyproxy/envoy:v1.31.2
        command: ["envoy"]
        args: ["-c", "/etc/envoy/envoy.yaml", "--drain-strategy", "immediate", "--drain-time-s", "290"]
        ports:
        - containerPort: 8080
          name: http
`;

/** Four-space indentation, indented sequences, padded flow lists; Envoy's drain flags get appended. The
 * spaces after `-` are not recorded by the YAML library: docs/offline-injection.md says this becomes `- name:`. */
const PADDED_STYLE = `apiVersion: v1
kind: Pod
metadata:
    name: envoy
    labels: { app: envoy }
spec:
    containers:
        -   name: envoy
            image: envoyproxy/envoy:v1.31.2
            args: [ "-c", "/etc/envoy/envoy.yaml" ]
`;

/** Whether every line of `before` is in `after`, in the same order (lines may have been added between). */
function keptInOrder(before: string, after: string): string | undefined {
  const lines = after.split('\n');
  let at = 0;
  for (const line of before.split('\n')) {
    const found = lines.indexOf(line, at);
    if (found === -1) return line;
    at = found + 1;
  }
  return undefined;
}

async function inject(args: readonly string[], input?: string): Promise<{ stdout: string; stderr: string }> {
  const npm = spawnNpm(args, input === undefined ? {} : { input });
  try {
    const { code } = await within(npm.exited, 60_000, `npm ${args.join(' ')}`);
    assert.equal(code, 0, npm.stderr());
    return { stdout: npm.stdout(), stderr: npm.stderr() };
  } finally {
    npm.kill();
  }
}

const [fileCommand, pipeCommand] = docCommands('docs/offline-injection.md', 'Offline injection');
const [manualCommand] = docCommands('docs/offline-injection.md', 'The whole injection: `--manual`');

/** The command's words after `npm`, with envoy.yaml standing for `file`. */
function npmArgs(line: string, file = 'envoy.yaml'): string[] {
  return words(line).slice(1).map((word) => (word === 'envoy.yaml' ? file : word));
}

test('docs/offline-injection.md shows npm run -s inject, on a file and in a pipe, and --manual', () => {
  assert.equal(fileCommand, 'npm run -s inject -- -f envoy.yaml > envoy-injected.yaml');
  assert.match(pipeCommand ?? '', /^kubectl get deploy envoy -o yaml \| npm run -s inject -- -f - \| kubectl apply -f -$/);
  assert.equal(manualCommand, 'npm run -s inject -- --manual -f envoy.yaml > envoy-injected.yaml');
});

test('npm run -s inject -- -f FILE: only the manifest on stdout, every line kept, the opt-in added and no token', { timeout: 90_000 }, async (t) => {
  const directory = await mkdtemp(join(tmpdir(), 'esm-inject-'));
  t.after(() => rm(directory, { recursive: true, force: true }));
  const file = join(directory, 'envoy.yaml');
  await writeFile(file, KUBECTL_STYLE);
  const { stdout, stderr } = await inject(npmArgs((fileCommand ?? '').split('>')[0] ?? '', file));
  assert.equal(stdout, KUBECTL_STYLE.replace('        app: envoy\n    spec:', '        app: envoy\n      annotations:\n        shutdown-manager.io/inject: enabled\n    spec:'));
  assert.match(stderr, /^deployment "edge\/envoy" annotated \(the webhook injects it\)$/m);
  assert.match(stderr, /kubectl label namespace edge shutdown-manager\.io\/inject=enabled/);
});

test('npm run -s inject -- --manual -f FILE: the sidecar injected, every line of a kubectl-style document kept', { timeout: 90_000 }, async (t) => {
  const directory = await mkdtemp(join(tmpdir(), 'esm-inject-'));
  t.after(() => rm(directory, { recursive: true, force: true }));
  const file = join(directory, 'envoy.yaml');
  await writeFile(file, KUBECTL_STYLE);
  const { stdout } = await inject(npmArgs((manualCommand ?? '').split('>')[0] ?? '', file));

  assert.ok(stdout.startsWith('# the edge proxies\napiVersion: apps/v1\n'), `stdout is the manifest alone:\n${stdout.slice(0, 200)}`);
  const [document, ...rest] = parseAllDocuments(stdout);
  assert.equal(rest.length, 0);
  const containers = (document?.toJS() as { spec: { template: { spec: { containers: { name: string }[] } } } }).spec.template.spec.containers;
  assert.deepEqual(containers.map((container) => container.name), ['envoy', 'shutdown-manager']);
  assert.equal(keptInOrder(KUBECTL_STYLE, stdout), undefined, 'a line of the input was changed');
  assert.match(stdout, /^ {6}- name: shutdown-manager$/m, 'the injected container is written in the same style as the others');
  assert.match(stdout, /^ {8}- name: shutdown-mgr$/m, 'and its own lists too');
});

test('npm run -s inject -- -f - in a pipe: four-space indentation and padded flow lists kept, by default and with --manual', { timeout: 120_000 }, async () => {
  const command = words((pipeCommand ?? '').split('|')[1] ?? '').slice(1);
  const optIn = await inject(command, PADDED_STYLE);
  assert.match(optIn.stdout, /^ {4}labels: \{ app: envoy \}\n {4}annotations:\n {8}shutdown-manager\.io\/inject: enabled$/m);
  assert.match(optIn.stdout, /^ {10}args: \[ "-c", "\/etc\/envoy\/envoy.yaml" \]$/m, "Envoy's args are the webhook's business");

  const { stdout } = await inject([...command, '--manual'], PADDED_STYLE);
  assert.match(stdout, /^ {4}labels: \{ app: envoy \}$/m);
  assert.match(stdout, /^ {8}- name: envoy\n {10}image: envoyproxy\/envoy:v1\.31\.2$/m);
  assert.match(stdout, /^ {10}args: \[ "-c", "\/etc\/envoy\/envoy.yaml", "--drain-strategy", "immediate", "--drain-time-s", "290" \]$/m);
  assert.match(stdout, /^ {10}lifecycle:\n {14}preStop:$/m, 'four spaces per level');
  assert.match(stdout, /^ {8}- name: shutdown-manager$/m);
});
