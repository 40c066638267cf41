/**
 * Golden files: a test's expected output kept as a YAML file beside it, compared as data (comments, key order and
 * quoting do not count) and rewritten on request, as Istio's injector keeps its testdata (`*.yaml.injected`). A
 * file is only ever written by a run with UPDATE_GOLDEN=1, on a developer's machine, and its diff is reviewed
 * like code: a missing file fails, naming it, and CI (CI=true) refuses to rewrite anything, so that a run never
 * approves its own output.
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { relative } from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { stringify } from 'yaml';
import { parseYamlText } from './manifests.js';
import { REPO_ROOT } from './process.js';

export type GoldenMode = 'compare' | 'update';

/** `compare` unless UPDATE_GOLDEN=1; any other value is a mistyped request, and CI=true refuses the update. */
export function goldenMode(env: NodeJS.ProcessEnv = process.env): GoldenMode {
  const update = env['UPDATE_GOLDEN'];
  if (update === undefined || update === '') return 'compare';
  if (update !== '1') throw new Error(`UPDATE_GOLDEN=${update}: set it to 1 to rewrite the golden files, or leave it unset`);
  if (env['CI'] === 'true') {
    throw new Error('UPDATE_GOLDEN=1 is refused in CI (CI=true): rewrite the golden files on your machine and commit them');
  }
  return 'update';
}

export interface GoldenFile {
  readonly path: string;
  /** Comment lines written at the top of the file (without `# `): what it holds and how it is written. */
  readonly header: readonly string[];
  /** The command that rewrites the file, named in every failure. */
  readonly updateCommand: string;
}

/** The data of a golden file (one YAML document, read as kubectl would); a missing file fails, naming it. */
export function readGolden(file: GoldenFile): unknown {
  const name = relative(REPO_ROOT, file.path);
  assert.ok(existsSync(file.path), `${name} is missing: write it with ${file.updateCommand}, and review it`);
  const documents = parseYamlText(readFileSync(file.path, 'utf8'), name);
  assert.equal(documents.length, 1, `${name} holds one YAML document`);
  return documents[0];
}

/**
 * In `update` mode writes `actual` into the file; otherwise asserts that the file holds it, failing with a line
 * diff of the two as YAML. Returns the golden data.
 */
export function expectGolden(file: GoldenFile, actual: unknown, mode: GoldenMode): unknown {
  if (mode === 'update') {
    writeFileSync(file.path, `${comment(file.header)}${goldenYaml(actual)}`);
    return actual;
  }
  const golden = readGolden(file);
  assertSameAsGolden(actual, golden, file);
  return golden;
}

/** Deep equality of plain data; on a difference, Node's line diff of both as YAML, under the file's name. */
export function assertSameAsGolden(actual: unknown, golden: unknown, file: GoldenFile): void {
  if (isDeepStrictEqual(actual, golden)) return;
  const name = relative(REPO_ROOT, file.path);
  try {
    assert.equal(goldenYaml(actual), goldenYaml(golden));
  } catch (error) {
    if (error instanceof assert.AssertionError) {
      error.message = `${name} differs (+ actual, - golden); if the change is meant, run ${file.updateCommand} and review the diff\n${error.message}`;
    }
    throw error;
  }
  // The same YAML from unequal data: a value YAML cannot tell apart (undefined and null, a class instance).
  assert.fail(`${name}: the data differs but reads the same as YAML; is the actual value plain JSON?`);
}

/** The header as YAML comment lines, each entry wrapped at HEADER_WIDTH columns. */
function comment(header: readonly string[]): string {
  return header.flatMap((entry) => wrap(entry, HEADER_WIDTH - 2).map((line) => `# ${line}`.trimEnd())).map((line) => `${line}\n`).join('');
}

const HEADER_WIDTH = 120;

function wrap(text: string, width: number): string[] {
  const lines: string[] = [];
  let line = '';
  for (const word of text.split(' ')) {
    if (line !== '' && line.length + 1 + word.length > width) {
      lines.push(line);
      line = word;
    } else {
      line = line === '' ? word : `${line} ${word}`;
    }
  }
  return [...lines, line];
}

/** Long strings stay on one line: a changed flag or message is then one line of the diff. */
function goldenYaml(value: unknown): string {
  return stringify(value, { lineWidth: 0 });
}
