/**
 * Every relative link and anchor of the README, the docs tree and the notes in src/ (src/emulator/README.md) leads
 * somewhere (issue 30), and so does every `docs/….md#anchor` a module of src/ names (issue 34: short module headers
 * point into docs/glossary.md and docs/design.md).
 */
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../../', import.meta.url));

function markdownFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? markdownFiles(path) : name.endsWith('.md') ? [path] : [];
  });
}

/** GitHub's anchor for a heading: lower case, punctuation but hyphens and spaces dropped, spaces as hyphens; repeats numbered. */
function anchorsOf(markdown: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  let fenced = false;
  for (const line of markdown.split('\n')) {
    if (line.startsWith('```')) fenced = !fenced;
    const heading = fenced ? null : /^#{1,6} (.+)$/.exec(line);
    if (heading?.[1] === undefined) continue;
    const base = heading[1]
      .trim()
      .toLowerCase()
      .replace(/[^\p{L}\p{N} _-]/gu, '')
      .replaceAll(' ', '-');
    const count = seen.get(base) ?? 0;
    seen.set(base, count + 1);
    anchors.add(count === 0 ? base : `${base}-${count}`);
  }
  return anchors;
}

/** Links outside code: `[text](target)`, relative ones only. */
function relativeLinks(markdown: string): string[] {
  const prose = markdown.replace(/```[\s\S]*?```/g, '').replace(/`[^`\n]*`/g, '');
  return [...prose.matchAll(/\]\(([^)\s]+)\)/g)].map((match) => match[1] ?? '').filter((target) => !/^[a-z]+:/i.test(target));
}

const files = [join(root, 'README.md'), ...(existsSync(join(root, 'docs')) ? markdownFiles(join(root, 'docs')) : [])];
/** Notes that live beside the code they describe; checked like the docs, but not required to be reached from the README. */
const sourceNotes = markdownFiles(join(root, 'src'));

for (const file of [...files, ...sourceNotes]) {
  test(`${relative(root, file)}: every relative link and anchor resolves`, () => {
    const text = readFileSync(file, 'utf8');
    const broken: string[] = [];
    for (const target of relativeLinks(text)) {
      const [path = '', anchor] = target.split('#');
      const destination = path === '' ? file : resolve(dirname(file), decodeURIComponent(path));
      if (!existsSync(destination)) {
        broken.push(`${target}: no such file`);
        continue;
      }
      if (anchor !== undefined && anchor !== '' && destination.endsWith('.md') && !anchorsOf(readFileSync(destination, 'utf8')).has(anchor)) {
        broken.push(`${target}: no heading with that anchor`);
      }
    }
    assert.deepEqual(broken, []);
  });
}

test('every path of the repository the README and the docs name in code (`src/...`, `test/...`) exists', () => {
  const missing: string[] = [];
  let named = 0;
  for (const file of files) {
    for (const match of readFileSync(file, 'utf8').matchAll(/`((?:src|test|bench|tools|manifests|docs)\/[\w./-]+)`/g)) {
      named += 1;
      if (!existsSync(join(root, match[1] ?? ''))) missing.push(`${relative(root, file)}: ${match[1]}`);
    }
  }
  assert.ok(named > 50, `the docs name ${named} paths: the pattern finds them`);
  assert.deepEqual(missing, []);
});

test('every page of docs/ is reached from the README, through the links of the README and the docs', () => {
  const reached = new Set<string>();
  const queue = [join(root, 'README.md')];
  while (queue.length > 0) {
    const file = queue.shift() as string;
    if (reached.has(file) || !existsSync(file) || !file.endsWith('.md')) continue;
    reached.add(file);
    for (const target of relativeLinks(readFileSync(file, 'utf8'))) {
      const [path = ''] = target.split('#');
      if (path !== '') queue.push(resolve(dirname(file), decodeURIComponent(path)));
    }
  }
  assert.deepEqual(
    files.filter((file) => !reached.has(file)).map((file) => relative(root, file)),
    [],
    'pages nothing links to',
  );
});

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? sourceFiles(path) : /\.c?ts$/.test(name) ? [path] : [];
  });
}

/** `docs/<page>.md` and `docs/<page>.md#anchor` as a module's comments name them (Envoy's own docs are .rst: not matched). */
function docReferences(text: string): { page: string; anchor: string | undefined }[] {
  return [...text.matchAll(/\bdocs\/([\w./-]+?\.md)(?:#([\w-]+))?/g)].map((match) => ({ page: match[1] ?? '', anchor: match[2] }));
}

test('every docs/ page and anchor a module of src/ names exists: docs/glossary.md#… and docs/design.md#… above all', () => {
  const broken: string[] = [];
  const anchored = new Map<string, number>();
  for (const file of sourceFiles(join(root, 'src'))) {
    for (const { page, anchor } of docReferences(readFileSync(file, 'utf8'))) {
      const destination = join(root, 'docs', page);
      const where = `${relative(root, file)}: docs/${page}${anchor === undefined ? '' : `#${anchor}`}`;
      if (!existsSync(destination)) broken.push(`${where}: no such page`);
      else if (anchor !== undefined && !anchorsOf(readFileSync(destination, 'utf8')).has(anchor)) broken.push(`${where}: no heading with that anchor`);
      if (anchor !== undefined) anchored.set(page, (anchored.get(page) ?? 0) + 1);
    }
  }
  assert.ok((anchored.get('glossary.md') ?? 0) >= 5, `src/ names ${anchored.get('glossary.md') ?? 0} glossary anchors: the pattern finds them`);
  assert.deepEqual(broken, []);
});

test('the anchor rule, and a broken link is caught (a control on the checker)', () => {
  assert.deepEqual([...anchorsOf("## What the drain promises\n## Envoy's release\n## `/shutdown`, protected\n## A\n## A")], [
    'what-the-drain-promises',
    'envoys-release',
    'shutdown-protected',
    'a',
    'a-1',
  ]);
  assert.deepEqual(relativeLinks('see [x](docs/missing.md#y), [z](https://example.com) and `[c](code.md)`'), ['docs/missing.md#y']);
  assert.deepEqual(docReferences(' * see docs/glossary.md#witness, docs/design.md. (docs/root/operations/admin.rst)'), [
    { page: 'glossary.md', anchor: 'witness' },
    { page: 'design.md', anchor: undefined },
  ]);
});
