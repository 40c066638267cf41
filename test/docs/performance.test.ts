/**
 * docs/performance.md's tables of figures are written by the bench (`npm run bench -- --write-docs`, `npm run
 * bench:budgets -- --write-docs`; bench/doc-sections.ts), never pasted (issue 35): each section is what the writer
 * writes, every row a figure the bench reports, and the prose around them (and the settings' help, which the
 * reference is generated from) states none of the figures the issue found drifted, but points to the tables.
 * Nothing is measured here.
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { describe, it } from 'node:test';
import { CHECK_FIGURE } from '../../bench/check.js';
import { benchFigureNames, parseSection, PERFORMANCE_DOC, renderSection, SECTION_KIND, type RunRecord } from '../../bench/doc-sections.js';
import { BIG_DRAIN } from '../../bench/sidecar.js';
import { RESOURCE_SETTINGS } from '../../src/config/resources.js';
import { sectionsOf } from '../support/generated-sections.js';

/** The sections' rows, or the first thing wrong with them. */
function readTables(markdown: string): ReturnType<typeof parseSection>[] {
  const known = benchFigureNames();
  return sectionsOf(markdown, SECTION_KIND).map(({ name, content }) => {
    const table = parseSection(name, content);
    for (const row of table.rows) {
      if (!known.has(row.name)) throw new Error(`${name}: "${row.name}" is no figure the bench reports`);
      const expected = row.target === '' ? ['info'] : ['PASS', 'FAIL'];
      if (!expected.includes(row.result)) throw new Error(`${name}: "${row.name}" has target "${row.target}" and result ${row.result}`);
    }
    if (table.rows.length === 0) throw new Error(`${name}: no rows`);
    return table;
  });
}

/**
 * Figures the issue found stated in prose and drifted from what the bench measures: the prose and the help may
 * name them, and point to the generated tables, but state no value of theirs.
 */
const NOT_STATED: readonly { figure: string; stated: RegExp }[] = [
  { figure: CHECK_FIGURE, stated: /`?check`? on 10,000 pods[^.]*?(?<![≤<≥>]\s?|[\d.,])\d+(?:\.\d+)? s\b/ },
  { figure: BIG_DRAIN, stated: /10,000 connections[^.]*?(?<![≤<≥>]\s?|[\d.,])\d+(?:\.\d+)? MiB/ },
];

/** The document without its generated sections. */
function proseOf(markdown: string): string {
  return markdown.replace(/<!-- bench:([\w.-]+):begin -->[\s\S]*?<!-- bench:\1:end -->/g, '');
}

const record: RunRecord = { command: 'bench', quick: false, date: '2026-01-02', nodeVersion: 'v24.1.0', cpus: 2, loadAtStart: '1.00', loadAtEnd: '2.00', seconds: 300 };
const figure = { name: CHECK_FIGURE, value: 'median 4.00 s; 400 API calls', target: '≤ 5 s', pass: true };
const sample = (content: string): string => `# Performance\n\n<!-- bench:results-node24:begin -->\n${content}\n<!-- bench:results-node24:end -->\n`;

describe('docs/performance.md: the tables are written by the bench', () => {
  it('has a well-formed section for each command, each row a figure the bench reports', async () => {
    const tables = readTables(await readFile(PERFORMANCE_DOC, 'utf8'));
    assert.deepEqual([...new Set(tables.map(({ run }) => run.command))].sort(), ['bench', 'bench:budgets']);
    for (const { run } of tables) assert.ok(run.cpus > 0 && Number(run.loadAtStart) >= 0, JSON.stringify(run));
  });

  it('refuses a hand-edited table (the controls)', () => {
    assert.equal(readTables(sample(renderSection(record, [figure]))).length, 1);
    const edited = {
      'a renamed figure': sample(renderSection(record, [{ ...figure, name: `${figure.name}, on a quiet day` }])),
      'a result not its target': sample(renderSection(record, [{ ...figure, target: '' }])),
      'a pasted row': sample(`${renderSection(record, [figure])}\n| ${figure.name} | 1 s | ≤ 5 s |`),
      'an edited header': sample(renderSection(record, [figure]).replace('load average 1.00', 'load average 1')),
      'a section of another Node': sample(renderSection({ ...record, nodeVersion: 'v20.1.0' }, [figure])),
      'a missing end marker': sample(renderSection(record, [figure])).replace('<!-- bench:results-node24:end -->', ''),
      'an unopened end marker': `${sample(renderSection(record, [figure]))}<!-- bench:budgets-node24:end -->\n`,
    };
    for (const [what, markdown] of Object.entries(edited)) assert.throws(() => readTables(markdown), Error, what);
  });

  it('its prose and the settings help state no value of the figures the bench measures, which drifted', async () => {
    const known = benchFigureNames();
    const texts = {
      'docs/performance.md': proseOf(await readFile(PERFORMANCE_DOC, 'utf8')),
      'src/config/resources.ts help': Object.values(RESOURCE_SETTINGS)
        .map((setting) => setting.help)
        .join('\n'),
    };
    for (const { figure: name, stated } of NOT_STATED) {
      assert.ok(known.has(name), `${name} is no longer a figure of the bench`);
      for (const [where, text] of Object.entries(texts)) assert.doesNotMatch(text, stated, `${where} states "${name}": point to the generated table instead`);
    }
    // The controls: the sentences the issue found are caught.
    assert.match('`check` on 10,000 pods measured 6.15 s against its ≤ 5 s target', NOT_STATED[0]?.stated as RegExp);
    assert.match('its peak while Envoy holds 10,000 connections is 53 MiB resident on Node 24', NOT_STATED[1]?.stated as RegExp);
    // A target is no measured value.
    assert.doesNotMatch('`check` on 10,000 pods in 200 namespaces has a target of ≤ 5 s', NOT_STATED[0]?.stated as RegExp);
  });
});
