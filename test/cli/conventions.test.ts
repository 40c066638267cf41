/**
 * The CLI behaves like kubectl and linkerd (issue 29, item 6), as users run it: the built entry point with
 * files, directories, pipes and mistakes. inject and uninject take positional inputs, directories (-R), `-`
 * and several -f, write in input order and say on stderr what became of each resource; --version works in
 * every mode and command; --help alone lists them all; a mistyped command or flag gets "did you mean"; a YAML
 * error is one line naming the input, the document and the line.
 */
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments } from 'yaml';
import { runBuiltEntry, type Finished } from '../support/process.js';

type Json = any; // parsed manifests, navigated freely by the assertions

const FIXTURES = fileURLToPath(new URL('../fixtures/manifests/', import.meta.url));
const PACKAGE_VERSION = (JSON.parse(await readFile(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version;

const pod = (name: string): string =>
  `apiVersion: v1\nkind: Pod\nmetadata:\n  name: ${name}\n  labels: {app: envoy}\nspec:\n  containers:\n  - name: envoy\n    image: envoyproxy/envoy:v1.31.2\n    command: [envoy]\n`;
const configMap = (name: string): string => `apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${name}\ndata: {a: b}\n`;

let directory: string;

/** The CLI in the test directory; `inject` with --manual (full offline injection, with a stable token). */
function cli(args: readonly string[], input?: string): Promise<Finished> {
  const [command, ...rest] = args;
  const manual = command === 'inject' ? ['inject', '--manual', ...rest] : args;
  return runBuiltEntry(manual, { cwd: directory, timeoutMs: 15_000, env: { SHUTDOWN_MANAGER_TOKEN_SEED: 'a-seed' }, ...(input === undefined ? {} : { input }) });
}

/** `inject` as written, without --manual: the webhook's opt-in only. */
function cliAsWritten(args: readonly string[], input?: string): Promise<Finished> {
  return runBuiltEntry(args, { cwd: directory, timeoutMs: 15_000, ...(input === undefined ? {} : { input }) });
}

/** The names of the resources in a YAML or JSON stream, in order (a List's items in their place). */
function namesIn(stream: string): string[] {
  return parseAllDocuments(stream).flatMap((document) => {
    const value = document.toJS() as Json;
    if (value === null || value === undefined) return [];
    return value.kind === 'List' ? value.items.map((item: Json) => item.metadata.name) : [value.metadata.name];
  });
}

/** Whether the named Pod in the stream is left to the webhook: its opt-in annotation, and no sidecar. */
function optedIn(stream: string, name: string): boolean {
  const found = parseAllDocuments(stream).map((document) => document.toJS() as Json).find((value) => value?.metadata?.name === name);
  return found.metadata.annotations?.['shutdown-manager.io/inject'] === 'enabled' && !injected(stream, name);
}

/** Whether the named Pod in the stream has the sidecar (a regular or a native one). */
function injected(stream: string, name: string): boolean {
  const found = parseAllDocuments(stream).map((document) => document.toJS() as Json).find((value) => value?.metadata?.name === name);
  return [...found.spec.containers, ...(found.spec.initContainers ?? [])].some((container: Json) => container.name === 'shutdown-manager');
}

before(async () => {
  directory = await mkdtemp(join(tmpdir(), 'esm-cli-'));
  await writeFile(join(directory, 'a.yaml'), pod('a'));
  await writeFile(join(directory, 'b.yaml'), configMap('b'));
  await mkdir(join(directory, 'dir', 'sub'), { recursive: true });
  // Out of name order on purpose, and a file that is not a manifest.
  await writeFile(join(directory, 'dir', 'z.yml'), pod('z'));
  await writeFile(join(directory, 'dir', 'm.json'), JSON.stringify({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'm' } }));
  await writeFile(join(directory, 'dir', 'c.yaml'), configMap('c'));
  await writeFile(join(directory, 'dir', 'notes.txt'), 'not: a manifest\n');
  await writeFile(join(directory, 'dir', 'sub', 's.yaml'), pod('s'));
  await mkdir(join(directory, 'empty'));
});
after(() => rm(directory, { recursive: true, force: true }));

describe('inject and uninject inputs', () => {
  test('positional files, -, several -f and flag values, mixed: every input, in the order given', async () => {
    const run = await cli(['inject', 'b.yaml', '-f', '-', '--check-delay', '30s', '-f', 'a.yaml', '--native-sidecar', 'dir/c.yaml'], pod('stdin'));
    assert.equal(run.code, 0, run.stderr);
    assert.deepEqual(namesIn(run.stdout), ['b', 'stdin', 'a', 'c']);
    assert.ok(injected(run.stdout, 'stdin') && injected(run.stdout, 'a'), 'both pods injected');
    // The flags reached the injector, and their values were not taken for files.
    assert.match(run.stdout, /--check-delay=30s/);
    assert.match(run.stdout, /restartPolicy: Always/, '--native-sidecar');
    // The other order gives the other output: the order is the command line's, not the files'.
    const reversed = await cli(['inject', 'dir/c.yaml', 'a.yaml', '-', 'b.yaml'], pod('stdin'));
    assert.deepEqual(namesIn(reversed.stdout), ['c', 'a', 'stdin', 'b']);
  });

  test('several -f: all of them, not only the last', async () => {
    const run = await cli(['inject', '-f', 'a.yaml', '--filename', 'b.yaml', '--filename=dir/z.yml']);
    assert.equal(run.code, 0, run.stderr);
    assert.deepEqual(namesIn(run.stdout), ['a', 'b', 'z']);
    assert.ok(injected(run.stdout, 'a') && injected(run.stdout, 'z'), 'both the first and the last -f are injected');
  });

  test('a directory: its .yaml, .yml and .json files sorted by name, its subdirectories only with -R', async () => {
    const flat = await cli(['inject', 'dir']);
    assert.equal(flat.code, 0, flat.stderr);
    assert.deepEqual(namesIn(flat.stdout), ['c', 'm', 'z'], 'notes.txt and sub/ left out');
    const recursive = await cli(['inject', '-R', 'dir']);
    assert.equal(recursive.code, 0, recursive.stderr);
    assert.deepEqual(namesIn(recursive.stdout), ['c', 'm', 's', 'z']);
    assert.ok(injected(recursive.stdout, 's'), '-R reads the subdirectory');
    const uninjected = await cli(['uninject', '--recursive', '-'], recursive.stdout);
    assert.equal(uninjected.code, 0, uninjected.stderr);
    assert.ok(!injected(uninjected.stdout, 's') && !injected(uninjected.stdout, 'z'), 'uninject removes the sidecar from both documents');
  });

  test('JSON and YAML inputs together make one stream kubectl reads as YAML; JSON alone stays JSON', async () => {
    const mixed = await cli(['inject', 'dir/m.json', 'a.yaml']);
    assert.equal(mixed.code, 0, mixed.stderr);
    assert.ok(mixed.stdout.startsWith('---\n{'), 'kubectl would take a stream that starts with { for JSON');
    assert.deepEqual(namesIn(mixed.stdout), ['m', 'a']);
    assert.ok(parseAllDocuments(mixed.stdout).every((document) => document.errors.length === 0), 'every document of the mixed stream parses as YAML');
    const json = await cli(['inject', 'dir/m.json', `${FIXTURES}list.json`]);
    assert.equal(json.code, 0, json.stderr);
    assert.match(json.stdout, /^\{/);
    assert.doesNotMatch(json.stdout, /^---/m);
  });

  test('a per-resource summary on stderr, in input order, for inject and uninject', async () => {
    const run = await cli(['inject', `${FIXTURES}mixed.yaml`, 'b.yaml']);
    assert.equal(run.code, 0, run.stderr);
    const summary = run.stderr.split('\n').filter((line) => !line.startsWith('note: ') && line !== '');
    assert.deepEqual(summary, [
      'namespace "edge" skipped (not a workload)',
      'deployment "edge/envoy" injected',
      'configmap "edge/envoy-config" skipped (not a workload)',
      'service "edge/envoy" skipped (not a workload)',
      'cronjob "edge/envoy-canary" skipped (runs to completion; see the note above)',
      'daemonset "edge/node-exporter" skipped (does not match --pod-selector app=envoy)',
      'configmap "b" skipped (not a workload)',
    ]);
    const again = await cli(['inject', '-'], run.stdout);
    assert.match(again.stderr, /^deployment "edge\/envoy" unchanged \(already injected\)$/m);
    const removed = await cli(['uninject', '-'], run.stdout);
    assert.match(removed.stderr, /^deployment "edge\/envoy" uninjected$/m);
    assert.match(removed.stderr, /^daemonset "edge\/node-exporter" skipped \(not injected\)$/m);
    assert.match(removed.stderr, /^configmap "b" skipped \(not a workload\)$/m);
  });

  test('a missing file is one line naming it, exit 1, and nothing is written even for the inputs that were good', async () => {
    for (const command of ['inject', 'uninject']) {
      const run = await cli([command, 'a.yaml', 'nope.yaml']);
      assert.equal(run.code, 1, command);
      assert.equal(run.stderr, `envoy-shutdown-manager ${command}: cannot read nope.yaml: ENOENT (no such file or directory)\n`);
      assert.equal(run.stdout, '');
    }
    const empty = await cli(['inject', 'empty']);
    assert.equal(empty.code, 1);
    assert.equal(empty.stderr, 'envoy-shutdown-manager inject: empty: no .yaml, .yml or .json file in this directory (-R reads its subdirectories)\n');
    const twice = await cli(['inject', '-', '-f', '-'], pod('x'));
    assert.equal(twice.code, 2);
    assert.match(twice.stderr, /^envoy-shutdown-manager inject: - \(standard input\) is named more than once\n$/);
    const none = await cli(['uninject']);
    assert.equal(none.code, 2);
    assert.match(none.stderr, /^envoy-shutdown-manager uninject: missing FILE: name files, directories, or - for standard input/);
  });
});

describe('--version', () => {
  for (const args of [['--version'], ['version'], ['mode=webhook', '--version'], ['mode=sidecar', '--version'], ['inject', '--version'], ['uninject', '--version'], ['check', '--version']]) {
    test(`${args.join(' ')} prints the version and exits 0`, async () => {
      const run = await cli(args);
      assert.equal(run.code, 0, run.stderr);
      assert.equal(run.stdout, `envoy-shutdown-manager ${PACKAGE_VERSION}\n`);
      assert.equal(run.stderr, '');
    });
  }

  test('the sidecar bundles still hold none of the webhook\'s settings module (main.js answers its --version)', async () => {
    const bundle = await readFile(fileURLToPath(new URL('../../dist/sidecar.cjs', import.meta.url)), 'utf8');
    assert.match(bundle, /^\/\/ dist\/config\/settings\.js$/m, 'esbuild names each bundled module: the check can see one');
    for (const file of ['sidecar.cjs', 'sidecar-engine.cjs', 'sidecar-metrics.cjs']) {
      const text = await readFile(fileURLToPath(new URL(`../../dist/${file}`, import.meta.url)), 'utf8');
      assert.doesNotMatch(text, /^\/\/ dist\/config\/webhook\.js$/m, file);
    }
  });

  test('a misspelt --version is an unknown flag with the right one suggested', async () => {
    const run = await cli(['inject', '--verison']);
    assert.equal(run.code, 2);
    assert.equal(run.stderr, 'envoy-shutdown-manager inject: unknown flag --verison; did you mean --version? (see --help)\n');
  });
});

describe('--help alone', () => {
  test('lists every mode and command with one line each, and how to get each one\'s help', async () => {
    const run = await cli(['--help']);
    assert.equal(run.code, 0, run.stderr);
    for (const name of ['mode=webhook', 'mode=sidecar', 'inject', 'uninject', 'check']) {
      assert.match(run.stdout, new RegExp(`^  ${name} +\\S.*$`, 'm'), name);
    }
    assert.match(run.stdout, /mode=webhook --help, envoy-shutdown-manager mode=sidecar --help,\nenvoy-shutdown-manager inject --help/);
    // And the help it points to exists.
    for (const args of [['mode=webhook', '--help'], ['mode=sidecar', '--help'], ['inject', '--help'], ['uninject', '--help'], ['check', '--help']]) {
      const help = await cli(args);
      assert.equal(help.code, 0, args.join(' '));
      assert.match(help.stdout, /^Usage: envoy-shutdown-manager /, args.join(' '));
      assert.doesNotMatch(help.stdout, /^Commands:$/m, `${args.join(' ')} is that one's help, not the list`);
    }
    const webhook = await cli(['mode=webhook', '--help']);
    assert.match(webhook.stdout, /^ {2}--tls-cert-file$/m, "mode=webhook --help keeps the webhook's flags");
  });
});

describe('mistakes get "did you mean"', () => {
  test('an unknown command: the closest one and the list, exit 2; a far-off word gets the list alone', async () => {
    const run = await cli(['injct', '-f', 'a.yaml']);
    assert.equal(run.code, 2);
    assert.equal(run.stdout, '');
    assert.equal(
      run.stderr,
      'envoy-shutdown-manager: unknown command "injct"; did you mean "inject"? (commands: inject, uninject, check, version; modes: mode=webhook (the default), mode=sidecar; see --help)\n',
    );
    assert.doesNotMatch(run.stderr, /positional/);
    assert.match((await cli(['chek'])).stderr, /did you mean "check"\?/);
    const far = await cli(['deploy']);
    assert.equal(far.code, 2);
    assert.match(far.stderr, /^envoy-shutdown-manager: unknown command "deploy" \(commands: inject, uninject, check, version;/);
    assert.doesNotMatch(far.stderr, /did you mean/);
  });

  for (const [args, flag, closest] of [
    [['--tls-cert-fil=x'], '--tls-cert-fil', '--tls-cert-file'],
    [['mode=webhook', '--check-dely=1s'], '--check-dely', '--check-delay'],
    [['mode=sidecar', '--check-dely=1s'], '--check-dely', '--check-delay'],
    [['inject', 'a.yaml', '--native-sidcar'], '--native-sidcar', '--native-sidecar'],
    [['uninject', 'a.yaml', '--hlep'], '--hlep', '--help'],
    [['uninject', '--recursve', 'dir'], '--recursve', '--recursive'],
    [['inject', '--filenme=a.yaml'], '--filenme', '--filename'],
    [['check', '--all-namespace'], '--all-namespace', '--all-namespaces'],
  ] as const) {
    test(`${args.join(' ')}: "did you mean ${closest}?", exit 2`, async () => {
      const run = await cli(args);
      assert.equal(run.code, 2, run.stderr);
      assert.match(run.stderr, new RegExp(`: unknown flag ${flag}; did you mean ${closest}\\? \\(see --help\\)\\n$`));
      assert.equal(run.stderr.split('\n').length, 2, 'one line');
    });
  }

  test('a flag like none of them is unknown, without a guess', async () => {
    const run = await cli(['mode=sidecar', '--frobnicate']);
    assert.equal(run.code, 2);
    assert.equal(run.stderr, 'envoy-shutdown-manager: unknown flag --frobnicate (see --help)\n');
  });
});

describe('YAML errors are one line: the input, the document, the line', () => {
  const good = `${configMap('first')}---\n`;
  for (const [what, yaml, message] of [
    ['an undefined alias', `${good}${pod('p').replace('name: p', 'name: *nowhere')}`, /\(line 10, column 9\): Unresolved alias \(the anchor must be set before the alias\): nowhere \(in "name: \*nowhere"\)/],
    ['a duplicate key', `${good}${pod('p').replace('kind: Pod\n', 'kind: Pod\nkind: Pod\n')}`, /\(line 9, column 1\): Map keys must be unique \(in "kind: Pod"\)/],
    ['a bad indentation', `${good}${pod('p').replace('  labels:', ' labels:')}`, /\(line 11, column 1\): All mapping items must start at the same column \(in "labels: \{app: envoy\}"\)/],
    ['a merge of a list', `${good}x: &l [1]\n${pod('p').replace('  name: p\n', '  name: p\n  <<: *l\n')}`, /\(line 12, column 3\): Merge sources must be maps or map aliases \(in "<<: \*l"\)/],
    ['a pod template of the wrong shape', `${good}${pod('p').replace('command: [envoy]', 'command: envoy')}`, /: Pod p: its pod template is not a valid pod template: spec\.containers\[0\]\.command is not a list of strings$/],
  ] as const) {
    test(`${what}: exit 1, nothing on stdout, one line naming the file, document 2 and where`, async () => {
      const file = join(directory, 'broken.yaml');
      await writeFile(file, yaml);
      for (const command of ['inject', 'uninject']) {
        const run = await cli([command, 'a.yaml', 'broken.yaml']);
        assert.equal(run.code, 1, `${command}: ${run.stderr}`);
        assert.equal(run.stdout, '');
        const lines = run.stderr.split('\n');
        assert.equal(lines.length, 2, `one line:\n${run.stderr}`);
        assert.ok(lines[0]!.startsWith(`envoy-shutdown-manager ${command}: broken.yaml: document 2`), lines[0]);
        assert.match(lines[0]!, message);
      }
    });
  }

  test('the control: the same documents, written right, are read', async () => {
    const file = join(directory, 'fixed.yaml');
    await writeFile(file, `${good}x: &l {tier: edge}\n${pod('p').replace('name: p', 'name: &n p').replace('  labels:', '  <<: *l\n  labels:')}`);
    const run = await cli(['inject', 'fixed.yaml']);
    assert.equal(run.code, 0, run.stderr);
    assert.ok(injected(run.stdout, 'p'), 'the well-formed document is injected');
  });
});

describe("docs/offline-injection.md's usage lines", () => {
  /** The page's first sh block's commands that take several inputs, as `inject ARGS` with their redirections. */
  async function usageLines(): Promise<string[]> {
    const page = await readFile(new URL('../../docs/offline-injection.md', import.meta.url), 'utf8');
    const block = /^```sh\n([\s\S]*?)^```$/m.exec(page)?.[1] ?? '';
    return block.split('\n').filter((line) => line.startsWith('npm run -s inject -- ') && !/-f (envoy\.yaml|-) /.test(line));
  }

  test('run as written (files, a directory, -, -R, several -f), each input is in the output, in order', async () => {
    const lines = await usageLines();
    assert.equal(lines.length, 2, lines.join('\n'));
    await writeFile(join(directory, 'envoy.yaml'), pod('envoy'));
    await mkdir(join(directory, 'gateway'), { recursive: true });
    await writeFile(join(directory, 'gateway', 'gw.yaml'), pod('gw'));
    await mkdir(join(directory, 'deploy', 'nested'), { recursive: true });
    await writeFile(join(directory, 'deploy', 'top.yaml'), pod('top'));
    await writeFile(join(directory, 'deploy', 'nested', 'deep.yml'), pod('deep'));
    await writeFile(join(directory, 'extra.json'), JSON.stringify({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'extra' } }));
    const expected = [['envoy', 'gw', 'more'], ['deep', 'top', 'extra']];
    for (const [index, line] of lines.entries()) {
      const command = line.replace(/#.*$/, '').replace(/>.*$/, '').trim();
      const [words, stdinFile] = command.split('<').map((part) => part.trim().split(/\s+/));
      const args = (words ?? []).slice('npm run -s inject --'.split(' ').length);
      const input = stdinFile?.[0] === 'more.yaml' ? pod('more') : undefined;
      const run = await cliAsWritten(['inject', ...args], input);
      assert.equal(run.code, 0, `${line}: ${run.stderr}`);
      assert.deepEqual(namesIn(run.stdout), expected[index], line);
      for (const name of expected[index]!.filter((n) => n !== 'extra')) assert.ok(optedIn(run.stdout, name), `${line}: ${name}`);
    }
  });
});
