/**
 * The README is what a platform engineer reads in five minutes (issue 30): at most 12 KB, its sections in the
 * order the issue gives (what it does and why, install in three steps, verify with check, see it work, the
 * proof's headline, links into the docs, development last), and what it tells to run exists: the release's
 * manifests of this version, the kustomize directories, the Contour Component, check's flags, the demo's
 * scenarios, and `npm test` as the test command (the one CI runs: test/release/release.test.ts); and its
 * headline of the proof is what docs/proof.md's committed table says.
 * Everything else lives in docs/, whose links test/docs/links.test.ts checks.
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { readPatterns, type RowPattern } from '../e2e/fleet/proof-tables.js';

const root = fileURLToPath(new URL('../../', import.meta.url));
const readme = readFileSync(join(root, 'README.md'), 'utf8');
const version = (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version: string }).version;

/** The README's `## ` sections: heading → text up to the next one (code blocks skipped when finding them). */
function sections(markdown: string): Map<string, string> {
  const found = new Map<string, string>();
  let fenced = false;
  let current: string | undefined;
  for (const line of markdown.split('\n')) {
    if (line.startsWith('```')) fenced = !fenced;
    const heading = fenced ? null : /^## (.+)$/.exec(line);
    if (heading?.[1] !== undefined) {
      current = heading[1];
      found.set(current, '');
    } else if (current !== undefined) {
      found.set(current, `${found.get(current) ?? ''}${line}\n`);
    }
  }
  return found;
}

const readmeSections = sections(readme);
const section = (heading: string): string => {
  const text = readmeSections.get(heading);
  assert.ok(text !== undefined, `README.md has no section "## ${heading}"`);
  return text;
};

test('README.md is at most 12 KB', () => {
  const bytes = Buffer.byteLength(readme, 'utf8');
  assert.ok(bytes <= 12 * 1024, `README.md is ${bytes} bytes, over 12,288: move the detail into docs/`);
});

test("README.md's sections come in the issue's order: why, install, verify, see it work, the proof, the docs, development", () => {
  assert.match(readme, /^# envoy-shutdown-manager\n/);
  assert.deepEqual(
    [...readmeSections.keys()],
    ['How a pod is terminated', 'Install', 'Verify with `check`', 'See it work', 'What the proof shows', 'Documentation', 'Development'],
  );
  assert.match(section('How a pod is terminated'), /^```text\n[\s\S]*GET \/shutdown[\s\S]*SIGTERM[\s\S]*```$/m, 'the termination timeline, as a diagram');
});

test('the install is three steps: the release manifest of this version or kustomize, the namespace label, the distribution', () => {
  const install = section('Install');
  assert.deepEqual([...install.matchAll(/^\*\*(\d)\. /gm)].map((match) => match[1]), ['1', '2', '3']);
  const release = `https://github.com/envoy-shutdown-manager/envoy-shutdown-manager/releases/download/v${version}/`;
  for (const asset of ['install.yaml', 'install-self-signed.yaml']) assert.ok(install.includes(`kubectl apply -f ${release}${asset}`), asset);
  for (const dir of ['manifests', 'manifests/self-signed']) {
    assert.ok(install.includes(`\`kubectl apply -k ${dir}\``), dir);
    assert.ok(existsSync(join(root, dir, 'kustomization.yaml')), `${dir} is a kustomization`);
  }
  assert.ok(install.includes('kubectl label namespace edge shutdown-manager.io/inject=enabled'), 'the install labels the namespace for injection');
  assert.ok(install.includes(`github.com/envoy-shutdown-manager/envoy-shutdown-manager//manifests/contour?ref=v${version}`), 'the Contour Component');
  assert.ok(existsSync(join(root, 'manifests/contour/kustomization.yaml')), 'the kustomize install the README names exists');
  assert.ok(install.includes('(docs/distributions.md#envoy-gateway)'), 'the Envoy Gateway way');
});

test('check, the demo and the test command are what the code has', () => {
  const scripts = (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts;
  const checkFlags = readFileSync(join(root, 'src/cli/check.ts'), 'utf8');
  // A settings table's key, quoted or not: `'all-namespaces': {`, `wait: {`.
  // The flags after `check` on each line that runs it (docker's own flags come before).
  const checkRuns = [...section('Verify with `check`').matchAll(/ check( [^#\n]*)/g)].map((match) => match[1] ?? '');
  assert.ok(checkRuns.length >= 5, `${checkRuns.length} lines run check`);
  const flags = [...checkRuns.join(' ').matchAll(/ --([a-z-]+)/g)].map((match) => match[1] as string);
  assert.ok(flags.length >= 5, `the check lines pass flags: ${flags.join(', ')}`);
  for (const flag of flags) assert.match(checkFlags, new RegExp(`^ {2}('${flag}'|${flag}): \\{`, 'm'), `check has --${flag}`);
  const packageName = (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { name: string; version: string });
  assert.ok(section('Verify with `check`').includes(`npx ${packageName.name}@${packageName.version} check`), 'npx of the CLI package at this version');
  assert.ok(scripts['check']?.includes('dist/main.js check'), "npm run check runs the built CLI's check");

  const demo = section('See it work');
  const demoSource = readFileSync(join(root, 'test/e2e/demo.ts'), 'utf8');
  assert.ok(scripts['demo']?.includes('test/e2e/demo.ts'), 'npm run demo runs test/e2e/demo.ts');
  const runs = [...demo.matchAll(/^npm run demo(.*?)(?:#.*)?$/gm)].map((match) => (match[1] ?? '').trim());
  assert.ok(runs.includes('') && runs.some((args) => args.includes('--unprotected')), 'with and without the protection');
  const scenarios = [...demo.matchAll(/--scenario=([a-z-]+)/g)].map((match) => match[1] as string);
  assert.ok(scenarios.length >= 2, `the README runs the demo's scenarios: ${scenarios.join(', ')}`);
  for (const scenario of scenarios) assert.ok(demoSource.includes(`'${scenario}'`), `the demo has --scenario=${scenario}`);

  const development = section('Development');
  assert.match(development, /^npm test\b/m, 'the README gives npm test as the test command');
  assert.ok(scripts['test'] !== undefined && scripts['bench'] !== undefined && scripts['fuzz'] !== undefined, 'the test, bench and fuzz scripts the README names exist');
  assert.ok(development.includes('(docs/development.md)'), 'the README links docs/development.md');
});

test('the proof headline and the docs section link into docs/', () => {
  assert.ok(section('What the proof shows').includes('(docs/proof.md)'), 'the proof section links docs/proof.md');
  const links = [...section('Documentation').matchAll(/\]\((docs\/[^)#]+)\)/g)].map((match) => match[1]);
  for (const page of ['docs/design.md', 'docs/distributions.md', 'docs/reference/configuration.md', 'docs/operations/monitoring.md', 'docs/operations/troubleshooting.md', 'docs/development.md']) {
    assert.ok(links.includes(page), page);
  }
});

test("the proof's headline is what docs/proof.md's load-balancer table says, row for row", () => {
  const rows = readPatterns('lb-models', readFileSync(join(root, 'docs/proof.md'), 'utf8'));
  const lost = (row: RowPattern): boolean => Object.entries(row.losses).some(([title, value]) => title !== 'killed' && value === 'non-zero');
  const killed = (row: RowPattern): boolean => row.losses['killed'] === 'non-zero';
  const of = (model: string, drain: string): RowPattern[] => rows.filter((row) => row.key.startsWith(model) && row.key.includes(drain));
  assert.ok(rows.length > 0, 'docs/proof.md has load-balancer rows');
  // "Without the sidecar, requests are lost behind every load balancer."
  const controls = of('', 'no sidecar');
  assert.ok(controls.length >= 5 && controls.every(lost), 'every control row lost requests');
  // "A fixed check-delay above the load balancer's lag loses nothing."
  const above = of('', 'fixed: check-delay').filter((row) => row.key.includes('(above the lag)'));
  assert.ok(above.length >= 5 && above.every((row) => !lost(row) && row.checked === 'yes'), 'the fixed rule above the lag');
  // "... lost nothing behind kube-proxy, the GKE-like L4 and the ALB-like L7 load balancers, and killed no pod."
  for (const model of ['kube-proxy (Service)', 'kube-proxy, slow sync', 'L4, GKE-like', 'L7 pooling, ALB-like']) {
    const [observed, ...more] = of(model, 'observed');
    assert.ok(observed !== undefined && more.length === 0, model);
    assert.ok(!lost(observed) && !killed(observed) && observed.checked === 'yes', `the observed rule behind ${model}`);
  }
  // "Behind a load balancer that keeps sending for about two minutes (AWS NLB-like IP targets), that rule does not protect reliably."
  const [nlb] = of('L4, NLB-like', 'observed');
  assert.ok(nlb?.key.includes('| 110-120 s |'), 'the NLB-like model keeps sending for about two minutes');
  assert.match(nlb?.checked ?? '', /^no \(varies: [^)]*\b[1-9]\d* lost/, 'and its verdict varies, with losses');
  assert.match(readme, /about two minutes \(AWS NLB-like IP targets\), that rule does not\s+protect reliably/);
});
