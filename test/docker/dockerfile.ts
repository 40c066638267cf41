/**
 * Just enough of the Dockerfile and .dockerignore formats to check the image's invariants without a
 * Docker engine: instructions with line continuations, stages, exec-form arrays, and ignore patterns
 * evaluated the way BuildKit does (last matching pattern wins; a pattern also matches everything below
 * a matching directory).
 */
import { posix } from 'node:path';

export interface Instruction {
  /** Upper-cased keyword: FROM, RUN, COPY... */
  readonly keyword: string;
  /** Everything after the keyword, continuations joined. */
  readonly args: string;
  /** 1-based line where the instruction starts, for messages. */
  readonly line: number;
}

export interface Stage {
  readonly image: string;
  readonly name: string | undefined;
  readonly instructions: readonly Instruction[];
}

export interface Dockerfile {
  readonly global: readonly Instruction[];
  readonly stages: readonly Stage[];
}

export function parseDockerfile(text: string): Dockerfile {
  const instructions: Instruction[] = [];
  const lines = text.split('\n');
  let pending = '';
  let start = 0;
  lines.forEach((raw, index) => {
    const line = raw.trimEnd();
    // Parser directives and comments are whole-line only; inside a continuation they are skipped too.
    if (/^\s*#/.test(line)) return;
    if (pending === '' && line.trim() === '') return;
    if (pending === '') start = index + 1;
    if (line.endsWith('\\')) {
      pending += `${line.slice(0, -1)} `;
      return;
    }
    pending += line;
    const match = /^\s*([A-Za-z]+)\s*(.*)$/.exec(pending);
    if (!match) throw new Error(`Dockerfile line ${start}: cannot parse ${JSON.stringify(pending)}`);
    instructions.push({ keyword: (match[1] as string).toUpperCase(), args: (match[2] as string).trim(), line: start });
    pending = '';
  });
  if (pending !== '') throw new Error('Dockerfile ends inside a line continuation');

  const global: Instruction[] = [];
  const stages: { image: string; name: string | undefined; instructions: Instruction[] }[] = [];
  for (const instruction of instructions) {
    if (instruction.keyword === 'FROM') {
      const words = instruction.args.split(/\s+/).filter((word) => !word.startsWith('--platform='));
      const [image, as, name] = words;
      if (image === undefined) throw new Error(`Dockerfile line ${instruction.line}: FROM without an image`);
      stages.push({ image, name: as?.toUpperCase() === 'AS' ? name : undefined, instructions: [] });
    } else if (stages.length === 0) {
      global.push(instruction);
    } else {
      (stages[stages.length - 1] as { instructions: Instruction[] }).instructions.push(instruction);
    }
  }
  return { global, stages };
}

/** The JSON array of an exec-form ENTRYPOINT/CMD, or undefined for shell form. */
export function execForm(instruction: Instruction): string[] | undefined {
  if (!instruction.args.startsWith('[')) return undefined;
  const parsed: unknown = JSON.parse(instruction.args);
  return Array.isArray(parsed) && parsed.every((part) => typeof part === 'string') ? parsed : undefined;
}

export interface Copy {
  readonly from: string | undefined;
  readonly sources: readonly string[];
  readonly destination: string;
}

/** COPY/ADD arguments: flags (--from, --chown, ...) then sources and a destination. */
export function parseCopy(instruction: Instruction): Copy {
  const words = instruction.args.startsWith('[')
    ? (JSON.parse(instruction.args) as string[])
    : instruction.args.split(/\s+/);
  const flags = words.filter((word) => word.startsWith('--'));
  const paths = words.filter((word) => !word.startsWith('--'));
  const from = flags.find((flag) => flag.startsWith('--from='))?.slice('--from='.length);
  const destination = paths.pop();
  if (destination === undefined || paths.length === 0) {
    throw new Error(`Dockerfile line ${instruction.line}: ${instruction.keyword} needs a source and a destination`);
  }
  return { from, sources: paths, destination };
}

function globToRegExp(pattern: string): RegExp {
  let source = '';
  for (let index = 0; index < pattern.length; index++) {
    const char = pattern[index] as string;
    if (char === '*' && pattern[index + 1] === '*') {
      source += '.*';
      index++;
    } else if (char === '*') {
      source += '[^/]*';
    } else if (char === '?') {
      source += '[^/]';
    } else {
      source += char.replace(/[.+^${}()|[\]\\]/g, '\\$&');
    }
  }
  return new RegExp(`^${source}$`);
}

/** Whether `path` (relative, forward slashes) is sent to the builder under these .dockerignore rules. */
export function isInContext(ignoreText: string, path: string): boolean {
  const rules = ignoreText
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line !== '' && !line.startsWith('#'))
    .map((line) => {
      const negated = line.startsWith('!');
      const pattern = (negated ? line.slice(1) : line).replace(/^\/+/, '').replace(/\/+$/, '');
      return { negated, regexp: globToRegExp(pattern) };
    });
  const segments = path.split('/');
  const prefixes = segments.map((_, index) => segments.slice(0, index + 1).join('/'));
  let included = true;
  for (const rule of rules) {
    if (prefixes.some((prefix) => rule.regexp.test(prefix))) included = rule.negated;
  }
  return included;
}

/** One file or directory the runtime stage copies from the build stage: where it is built, where it lands. */
export interface RuntimeFile {
  /** In the build stage, relative to its WORKDIR (which is the repository's root there: dist/app). */
  readonly built: string;
  /** In the image, absolute (/app/dist/app). */
  readonly shipped: string;
}

/**
 * What the last stage copies from the stage named `build`, resolved against both stages' WORKDIRs: the
 * payload the image adds on top of its base, which test/docker/runtime-payload.test.ts starts every mode from.
 */
export function runtimeFiles(dockerfile: Dockerfile): RuntimeFile[] {
  const stages = dockerfile.stages;
  const final = stages[stages.length - 1];
  const build = stages.find((stage) => stage.name === 'build');
  if (final === undefined || build === undefined) throw new Error('the Dockerfile needs a build stage and a runtime stage');
  const workdirOf = (stage: Stage): string =>
    stage.instructions.filter((instruction) => instruction.keyword === 'WORKDIR').reduce((dir, instruction) => posix.resolve(dir, instruction.args), '/');
  const buildDir = workdirOf(build);
  const finalDir = workdirOf(final);
  return final.instructions
    .filter((instruction) => instruction.keyword === 'COPY')
    .map(parseCopy)
    .filter((copy) => copy.from === 'build')
    .flatMap((copy) =>
      copy.sources.map((source) => {
        const destination = posix.resolve(finalDir, copy.destination);
        const shipped = copy.destination.endsWith('/') || copy.sources.length > 1 ? posix.join(destination, posix.basename(source)) : destination;
        return { built: posix.relative(buildDir, posix.resolve(buildDir, source)), shipped };
      }),
    );
}

/**
 * The environment the runtime stage's ENV instructions set (`ENV NAME=value`, one or several per line, values
 * bare or double-quoted; the legacy `ENV NAME value` form too), later ones winning, as the image's processes get it.
 */
export function runtimeEnv(dockerfile: Dockerfile): Record<string, string> {
  const final = dockerfile.stages[dockerfile.stages.length - 1];
  const env: Record<string, string> = {};
  for (const instruction of final?.instructions.filter((candidate) => candidate.keyword === 'ENV') ?? []) {
    const legacy = /^([A-Za-z_][A-Za-z0-9_]*)\s+([^=].*)$/.exec(instruction.args);
    if (legacy) {
      env[legacy[1] as string] = legacy[2] as string;
      continue;
    }
    for (const pair of instruction.args.matchAll(/([A-Za-z_][A-Za-z0-9_]*)=(?:"((?:[^"\\]|\\.)*)"|(\S*))/g)) {
      env[pair[1] as string] = pair[2] !== undefined ? pair[2].replace(/\\(.)/g, '$1') : (pair[3] as string);
    }
  }
  return env;
}
