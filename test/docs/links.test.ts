/** Every relative link and anchor of the README and the docs tree leads somewhere (issue 30). */
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

for (const file of files) {
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

test('the anchor rule, and a broken link is caught (a control on the checker)', () => {
  assert.deepEqual([...anchorsOf("## What the drain promises\n## Envoy's release\n## `/shutdown`, protected\n## A\n## A")], [
    'what-the-drain-promises',
    'envoys-release',
    'shutdown-protected',
    'a',
    'a-1',
  ]);
  assert.deepEqual(relativeLinks('see [x](docs/missing.md#y), [z](https://example.com) and `[c](code.md)`'), ['docs/missing.md#y']);
});
