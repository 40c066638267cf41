/**
 * The test files `npm test` runs, in the order it gives them to the runner: every `*.test.ts` under test/, sorted,
 * with the files that run alone (they call runsAlone(): see exclusive.ts) spread evenly among the others. The runner
 * takes the files in order, two at a time; a file waiting for the lock holds its slot idle, so two such files next to
 * each other (the sorted order puts five server-* ones together) would leave one core unused while they run.
 *
 * Plain JavaScript, printed one path a line, so that package.json's test command can read it with $(...).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

function testFiles(directory) {
  return readdirSync(directory, { withFileTypes: true }).flatMap((entry) => {
    const path = join(directory, entry.name);
    if (entry.isDirectory()) return testFiles(path);
    return entry.name.endsWith('.test.ts') ? [relative(ROOT, path)] : [];
  });
}

const all = testFiles(join(ROOT, 'test')).sort();
const alone = all.filter((file) => /^runsAlone\(\);$/m.test(readFileSync(join(ROOT, file), 'utf8')));
const others = all.filter((file) => !alone.includes(file));
// One file that runs alone after every `gap` others, the first at once (they are the longest).
const gap = Math.max(1, Math.floor(others.length / Math.max(1, alone.length)));
const ordered = [];
for (let index = 0; index < others.length; index += 1) {
  if (index % gap === 0 && alone.length > 0) ordered.push(alone.shift());
  ordered.push(others[index]);
}
ordered.push(...alone);
process.stdout.write(`${ordered.join('\n')}\n`);
