/**
 * `npm run demo` through its real interface: test/e2e/demo.ts in a child process, as the npm script runs it
 * (after the build, which npm test does first). The flag errors take a second each; --unprotected runs the whole
 * rollout step without the sidecar (about 6 s here), to show the loss the README promises.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { REPO_ROOT, runNode, type Finished } from '../support/process.js';

function demo(args: readonly string[], timeoutMs: number): Promise<Finished> {
  return runNode(['--import', 'tsx', 'test/e2e/demo.ts', ...args], { cwd: REPO_ROOT, timeoutMs });
}

describe('npm run demo', () => {
  test('a mistyped flag or value: one line naming it (with the flag meant), exit 2, no stack trace, nothing run', async () => {
    const cases: [string[], RegExp][] = [
      [['--unprotectd'], /^npm run demo: unknown flag --unprotectd; did you mean --unprotected\? \(flags: --scenario=deletion\|sidecar-restart\|modify-only, --unprotected\)\n$/],
      [['--scenaro=modify-only'], /^npm run demo: unknown flag --scenaro; did you mean --scenario\?/],
      [['--scenario=sidecar-restar'], /^npm run demo: unknown --scenario=sidecar-restar; did you mean --scenario=sidecar-restart\?/],
      [['--scenario'], /^npm run demo: Option '--scenario <value>' argument missing/],
      [['unprotected'], /^npm run demo: unexpected argument "unprotected": the demo takes flags only/],
      [['--frobnicate'], /^npm run demo: unknown flag --frobnicate \(flags:/],
    ];
    await Promise.all(
      cases.map(async ([args, message]) => {
        const run = await demo(args, 20_000);
        assert.equal(run.code, 2, `${args.join(' ')}: ${run.stderr}`);
        assert.match(run.stderr, message, args.join(' '));
        assert.equal(run.stderr.trim().split('\n').length, 1, `one line: ${run.stderr}`);
        assert.doesNotMatch(run.stderr, /\n\s+at /, 'no stack trace');
        assert.equal(run.stdout, '', 'nothing ran');
      }),
    );
  });

  test('--unprotected: the same rollout without the sidecar loses requests, says so, and exits 0 (it showed the loss)', { timeout: 60_000 }, async () => {
    const run = await demo(['--unprotected'], 50_000);
    assert.equal(run.code, 0, `${run.stdout}\n${run.stderr}`);
    assert.match(run.stdout, /sidecar args: \(no shutdown-manager container\)/);
    assert.doesNotMatch(run.stdout, /preStop-sent/, 'no hook: Envoy is sent SIGTERM at once');
    // At once: a loaded machine may take a few milliseconds to get there, never the drain's hundreds.
    const sigterm = /\n +(\d+) {2}envoy {13}SIGTERM\n/.exec(run.stdout);
    assert.ok(sigterm !== null && Number(sigterm[1]) < 100, `Envoy's SIGTERM at ${sigterm?.[1] ?? 'no time'} ms after the deletion`);
    const failed = Number(/requests failed: (\d+)/.exec(run.stdout)?.[1]);
    assert.ok(failed > 0, `requests were lost: ${run.stdout}`);
    assert.match(run.stdout, new RegExp(`\\n${failed} requests lost\\.\\nThat is the loss the shutdown-manager prevents`));
  });
});
