/** Reading Prometheus text exposition in tests. */

/** The value of one series, written exactly as exposed (`name{label="value"}`), or undefined if absent. */
export function sampleOf(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

export interface ExposedSample {
  /** The series' own name: a histogram's end in _bucket, _sum or _count. */
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  /** `+Inf` and `-Inf` as Infinity and -Infinity. */
  readonly value: number;
}

export interface ExposedFamily {
  readonly name: string;
  /** As `# TYPE` says: counter, gauge, histogram... */
  readonly type: string;
  readonly samples: readonly ExposedSample[];
}

const SAMPLE_LINE = /^([A-Za-z_:][\w:]*)(?:\{(.*)\})? (\S+)$/;
const LABEL_PAIR = /(\w+)="((?:[^"\\]|\\.)*)"/g;

/** The metric families of a text exposition in their order, each `# TYPE` with the samples that follow it. */
export function exposedFamilies(text: string): ExposedFamily[] {
  const families: { name: string; type: string; samples: ExposedSample[] }[] = [];
  for (const line of text.split('\n')) {
    const type = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (type !== null) {
      families.push({ name: type[1] as string, type: type[2] as string, samples: [] });
      continue;
    }
    const sample = SAMPLE_LINE.exec(line);
    if (sample === null) continue;
    const [, name, body = '', raw] = sample as unknown as [string, string, string | undefined, string];
    const labels = Object.fromEntries([...body.matchAll(LABEL_PAIR)].map(([, label, value]) => [label, (value as string).replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c))]));
    const value = raw === '+Inf' ? Infinity : raw === '-Inf' ? -Infinity : Number(raw);
    const family = families.at(-1);
    if (family === undefined || !name.startsWith(family.name)) throw new Error(`sample ${name} outside its family's # TYPE`);
    family.samples.push({ name, labels, value });
  }
  return families;
}
