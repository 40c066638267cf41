/**
 * Sections of a Markdown document written by a command, between `<!-- <kind>:<name>:begin -->` and
 * `<!-- <kind>:<name>:end -->`: `npm run proof` writes docs/proof.md's tables (kind `proof`), `npm run bench --
 * --write-docs` docs/performance.md's (kind `bench`). A figure is written by the command that measures it, never pasted.
 */
export const beginMarker = (kind: string, name: string): string => `<!-- ${kind}:${name}:begin -->`;
export const endMarker = (kind: string, name: string): string => `<!-- ${kind}:${name}:end -->`;

/** The text between a section's markers (without them); throws when they are missing. */
export function between(markdown: string, kind: string, name: string): string {
  const begin = markdown.indexOf(beginMarker(kind, name));
  const end = markdown.indexOf(endMarker(kind, name));
  if (begin < 0 || end < begin) throw new Error(`no ${beginMarker(kind, name)} ... ${endMarker(kind, name)} section`);
  return markdown.slice(begin + beginMarker(kind, name).length, end);
}

/** `markdown` with the text between a section's markers replaced by `content`. */
export function replaceBetween(markdown: string, kind: string, name: string, content: string): string {
  between(markdown, kind, name);
  const begin = markdown.indexOf(beginMarker(kind, name)) + beginMarker(kind, name).length;
  const end = markdown.indexOf(endMarker(kind, name));
  return `${markdown.slice(0, begin)}\n${content.trimEnd()}\n${markdown.slice(end)}`;
}

/** Every section of `kind` in document order, with its content; throws on a marker without its pair or sections nested. */
export function sectionsOf(markdown: string, kind: string): { name: string; content: string }[] {
  const marker = new RegExp(`<!-- ${kind}:([\\w.-]+):(begin|end) -->`, 'g');
  const sections: { name: string; content: string }[] = [];
  let open: { name: string; from: number } | undefined;
  for (const match of markdown.matchAll(marker)) {
    const [text, name = '', side] = match;
    if (side === 'begin') {
      if (open !== undefined) throw new Error(`${text} inside the unclosed section ${open.name}`);
      open = { name, from: match.index + text.length };
    } else {
      if (open?.name !== name) throw new Error(`${text} without its ${beginMarker(kind, name)}`);
      sections.push({ name, content: markdown.slice(open.from, match.index) });
      open = undefined;
    }
  }
  if (open !== undefined) throw new Error(`${beginMarker(kind, open.name)} without its ${endMarker(kind, open.name)}`);
  return sections;
}
