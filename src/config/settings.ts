/**
 * A small declarative settings reader: each mode lists its settings once (flag name, kind, default, help),
 * and this module reads them from command-line flags, then environment variables, then the default.
 * Defaults therefore live in exactly one place per setting, and --help is generated from the same table.
 */
import { UsageError } from '../errors.js';
import { ConfigError, ConfigErrors } from './errors.js';
import * as kinds from './values.js';
import { expectedForm, type ValueKind } from './values.js';

/** Not imported: an ESM import of node:util reads all its exports, which costs 1 MiB more on Node 24 (see src/envoy/admin-client.ts). */
const { parseArgs } = process.getBuiltinModule('node:util');

export interface Setting<T> {
  readonly kind: ValueKind<T>;
  readonly default: T;
  readonly help: string;
  /**
   * false: a flag only, never read from the environment. For a flag whose variable another mode sets for its own
   * meaning (check's --namespace against the webhook pod's SHUTDOWN_MANAGER_NAMESPACE).
   */
  readonly env?: false;
}

export type SettingTable = Record<string, Setting<any>>; // eslint-disable-line @typescript-eslint/no-explicit-any -- each row has its own value type

export type ValuesOf<Table extends SettingTable> = {
  -readonly [Name in keyof Table]: Table[Name] extends Setting<infer Value> ? Value : never;
};

export const ENV_PREFIX = 'SHUTDOWN_MANAGER_';

/** "check-interval" → "SHUTDOWN_MANAGER_CHECK_INTERVAL". */
export function envName(flag: string): string {
  return ENV_PREFIX + flag.toUpperCase().replaceAll('-', '_');
}

export class HelpRequested extends Error {
  override readonly name = 'HelpRequested';
}

/** Runs `parse`; on --help prints `usage()` and returns undefined, so that the caller simply stops. */
export function parseOrShowHelp<Config>(parse: () => Config, usage: () => string): Config | undefined {
  try {
    return parse();
  } catch (error) {
    if (!(error instanceof HelpRequested)) throw error;
    process.stdout.write(usage());
    return undefined;
  }
}

/**
 * Reads every setting of `table` (keys are the flag names) from `args` (`--name=value` or `--name value`),
 * then `env`. Collects every bad value before throwing, so one run names all the mistakes.
 */
export function readSettings<Table extends SettingTable>(
  table: Table,
  args: readonly string[],
  env: NodeJS.ProcessEnv,
): ValuesOf<Table> {
  const flags = parseFlags(table, args);
  const values: Record<string, unknown> = {};
  const errors: ConfigError[] = [];
  for (const [name, setting] of Object.entries(table)) {
    const fromFlag = flags[name];
    // An empty variable counts as unset: manifests often declare a variable and leave its value empty.
    const fromEnv = setting.env === false ? undefined : env[envName(name)] || undefined;
    const [raw, source] =
      fromFlag !== undefined ? [fromFlag, `flag --${name}`] : [fromEnv, `environment variable ${envName(name)}`];
    if (raw === undefined) {
      values[name] = setting.default;
      continue;
    }
    const value = setting.kind.parse(raw);
    if (value === undefined) errors.push(new ConfigError(source, raw, expectedForm(setting.kind, raw), name));
    else values[name] = value;
  }
  if (errors.length > 0) throw new ConfigErrors(errors);
  return values as ValuesOf<Table>;
}

function parseFlags(table: SettingTable, args: readonly string[]): Record<string, string | undefined> {
  const options = Object.fromEntries(Object.keys(table).map((name) => [name, { type: 'string' as const }]));
  // A bare switch (`--dev-certs`) means true; `--dev-certs=false` and `--dev-certs false` still work.
  const switches = new Set(Object.keys(table).filter((name) => table[name]?.kind === kinds.boolean).map((name) => `--${name}`));
  const normalized = args.map((arg, i) => {
    const next = args[i + 1]?.trim().toLowerCase();
    return switches.has(arg) && next !== 'true' && next !== 'false' ? `${arg}=true` : arg;
  });
  let parsed;
  try {
    parsed = parseArgs({
      args: normalized,
      options: { ...options, help: { type: 'boolean', short: 'h' } },
      strict: true,
      allowPositionals: false,
    });
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    const unknown = /^Unknown option '(-[^']*)'/.exec(reason)?.[1];
    if (unknown !== undefined) throw new UsageError(unknownFlagMessage(unknown, Object.keys(table)));
    // parseArgs explains stray words and missing values well; say where to look for the valid ones.
    throw new ConfigErrors([new ConfigError('command line', args.join(' '), `known flags only (see --help): ${reason}`)]);
  }
  if (parsed.values.help) throw new HelpRequested('help requested');
  return parsed.values as Record<string, string | undefined>;
}

/** "unknown flag --check-dely; did you mean --check-delay? (see --help)": the closest known flag, if it is near enough to be a typo. */
function unknownFlagMessage(flag: string, flags: readonly string[]): string {
  const closest = closestName(flag.replace(/^--?/, ''), [...flags, 'help', 'version']);
  return `unknown flag ${flag}${closest === undefined ? '' : `; did you mean --${closest}?`} (see --help)`;
}

/** The candidate nearest to `word` in edits (Levenshtein), when near enough to be a typo of it. */
export function closestName(word: string, candidates: readonly string[]): string | undefined {
  let best: { name: string; distance: number } | undefined;
  for (const name of candidates) {
    const distance = editDistance(word.toLowerCase(), name.toLowerCase());
    if (best === undefined || distance < best.distance) best = { name, distance };
  }
  if (best === undefined) return undefined;
  const allowed = Math.max(1, Math.floor(Math.max(word.length, best.name.length) / 3));
  return best.distance <= allowed ? best.name : undefined;
}

/** Edits (insert, delete, substitute, swap two neighbours: "hlep" is one from "help") from `a` to `b`. */
function editDistance(a: string, b: string): number {
  const rows: number[][] = [Array.from({ length: b.length + 1 }, (_, j) => j)];
  for (let i = 1; i <= a.length; i += 1) {
    const row = [i];
    for (let j = 1; j <= b.length; j += 1) {
      const above = rows[i - 1] as number[];
      let best = Math.min((above[j] as number) + 1, (row[j - 1] as number) + 1, (above[j - 1] as number) + (a[i - 1] === b[j - 1] ? 0 : 1));
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) best = Math.min(best, ((rows[i - 2] as number[])[j - 2] as number) + 1);
      row.push(best);
    }
    rows.push(row);
  }
  return (rows[a.length] as number[])[b.length] as number;
}

/** The --help text: one line per flag with its environment variable and default. */
export function describeSettings(table: SettingTable): string {
  return Object.entries(table)
    .map(([name, setting]) => {
      const fallback = setting.kind.format(setting.default);
      const variable = setting.env === false ? 'no environment variable' : `env ${envName(name)}`;
      return `  --${name}\n      ${setting.help}\n      ${variable}, default ${fallback === '' ? '(none)' : fallback}`;
    })
    .join('\n');
}

/** Turns values back into flags, e.g. to start the sidecar with the settings the webhook resolved. */
export function toFlags<Table extends SettingTable>(table: Table, values: Partial<ValuesOf<Table>>): string[] {
  return Object.entries(values)
    .filter(([name, value]) => value !== undefined && table[name] !== undefined)
    .map(([name, value]) => `--${name}=${(table[name] as Setting<unknown>).kind.format(value)}`);
}
