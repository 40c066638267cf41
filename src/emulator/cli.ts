/**
 * The Envoy emulator as a process, standing in for the Envoy container in end-to-end tests and behind `npm run
 * envoy-emulator`: `node --import tsx src/emulator/cli.ts [Envoy's own args] [emulator flags]`. It takes Envoy's flags
 * as a pod spec passes them (the value as the next argument, after a space, or after `=`) and its own; prints one JSON
 * line with its pid, ports and listener names once listening; and on SIGTERM, SIGINT or POST /quitquitquit cuts every
 * connection, as Envoy does, and exits 0.
 *
 * Every flag, the JSON line, and the control paths /emulator/fault and /emulator/requests:
 * docs/emulator.md#running-it.
 */
import { realpathSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import {
  EnvoyEmulator,
  parseEnvoyVersion,
  parseFault,
  seededRandom,
  type DrainStrategy,
  type DrainType,
  type EnvoyCommandLine,
  type EnvoyEmulatorOptions,
  type TrafficDirection,
} from '../../src/emulator/envoy-emulator.js';

/** What the command line asks for: the emulator's options, and a seed for its random source. */
export interface CliConfig {
  readonly options: EnvoyEmulatorOptions;
  readonly randomSeed?: number;
}

type Mutable<T> = { -readonly [K in keyof T]: T[K] };
interface Draft {
  options: Mutable<EnvoyEmulatorOptions>;
  commandLine: Mutable<EnvoyCommandLine>;
  httpListener: { direction?: TrafficDirection; drainType?: DrainType };
  tcpListener: { direction?: TrafficDirection; drainType?: DrainType };
  randomSeed?: number;
}
type ValueFlag = (draft: Draft, value: string, name: string) => void;

function integer(name: string, text: string): number {
  const value = Number(text);
  if (text.trim() === '' || !Number.isSafeInteger(value) || value < 0) {
    throw new Error(`--${name}: ${JSON.stringify(text)} is not a whole number`);
  }
  return value;
}

/** A file mode in octal, as `chmod` takes it: "0644", "644", "0o644". */
function octalMode(name: string, text: string): number {
  const match = /^(?:0o?)?([0-7]{3,4})$/.exec(text.trim());
  if (match === null) throw new Error(`--${name}: ${JSON.stringify(text)} is not an octal file mode such as 0644`);
  return parseInt(match[1] ?? '', 8);
}

function oneOf<T extends string>(name: string, text: string, allowed: readonly T[]): T {
  const found = allowed.find((value) => value === text);
  if (found === undefined) throw new Error(`--${name}: ${JSON.stringify(text)} is not one of ${allowed.join(', ')}`);
  return found;
}

/** OptionsImpl (source/server/options_impl.cc): "immediate" or "gradual", else "unknown drain-strategy". */
const drainStrategy: ValueFlag = (draft, value, name) => {
  draft.options.drainStrategy = oneOf<DrainStrategy>(name, value, ['gradual', 'immediate']);
};
const drainType = (side: 'httpListener' | 'tcpListener'): ValueFlag => (draft, value, name) => {
  draft[side].drainType = oneOf<DrainType>(name, value.toLowerCase(), ['default', 'modify_only']);
};
const direction = (side: 'httpListener' | 'tcpListener'): ValueFlag => (draft, value, name) => {
  draft[side].direction = oneOf<TrafficDirection>(name, value.toLowerCase(), ['inbound', 'outbound', 'unspecified']);
};
const shown = (key: 'configPath' | 'configYaml' | 'logLevel' | 'componentLogLevel' | 'logFormat' | 'logPath' | 'serviceCluster' | 'serviceNode' | 'serviceZone'): ValueFlag =>
  (draft, value) => {
    draft.commandLine[key] = value;
  };
/** --mode serve|validate|init_only, shown as the CommandLineOptions.Mode enum name. */
const MODES: Readonly<Record<string, string>> = { serve: 'Serve', validate: 'Validate', init_only: 'InitOnly' };

const VALUE_FLAGS: Readonly<Record<string, ValueFlag>> = {
  // Envoy's flags.
  'drain-strategy': drainStrategy,
  'drain-time-s': (draft, value, name) => (draft.options.drainTimeMs = integer(name, value) * 1000),
  concurrency: (draft, value, name) => (draft.options.workers = integer(name, value)),
  'config-path': shown('configPath'),
  'config-yaml': shown('configYaml'),
  'log-level': shown('logLevel'),
  'component-log-level': shown('componentLogLevel'),
  'log-format': shown('logFormat'),
  'log-path': shown('logPath'),
  'service-cluster': shown('serviceCluster'),
  'service-node': shown('serviceNode'),
  'service-zone': shown('serviceZone'),
  'base-id': (draft, value, name) => (draft.commandLine.baseId = integer(name, value)),
  'parent-shutdown-time-s': (draft, value, name) => (draft.commandLine.parentShutdownTimeS = integer(name, value)),
  mode: (draft, value, name) => (draft.commandLine.mode = MODES[oneOf(name, value, Object.keys(MODES))]),
  // The emulator's.
  'admin-port': (draft, value, name) => (draft.options.adminPort = integer(name, value)),
  'http-port': (draft, value, name) => (draft.options.httpPort = integer(name, value)),
  'tcp-port': (draft, value, name) => (draft.options.tcpPort = integer(name, value)),
  host: (draft, value) => (draft.options.host = value),
  'stat-address': (draft, value) => (draft.options.statAddress = value),
  workers: (draft, value, name) => (draft.options.workers = integer(name, value)),
  'drain-time': (draft, value, name) => (draft.options.drainTimeMs = integer(name, value)),
  'http-drain-type': drainType('httpListener'),
  'tcp-drain-type': drainType('tcpListener'),
  'http-direction': direction('httpListener'),
  'tcp-direction': direction('tcpListener'),
  'random-seed': (draft, value, name) => (draft.randomSeed = integer(name, value)),
  'started-at': (draft, value, name) => (draft.options.startedAt = integer(name, value)),
  fault: (draft, value) => {
    const fault = parseFault(value);
    if (fault === undefined) throw new Error(`--fault: ${JSON.stringify(value)} is not none, slow:<ms>, status:<code>, garbage, empty or down`);
    draft.options.fault = fault;
  },
  'fault-paths': (draft, value) => (draft.options.faultPaths = value.split(',').filter((path) => path !== '')),
  'upstream-port': (draft, value, name) => (draft.options.upstreamPort = integer(name, value)),
  version: (draft, value, name) => {
    if (parseEnvoyVersion(value) === undefined) throw new Error(`--${name}: ${JSON.stringify(value)} is not a version X.Y.Z or X.Y.Z-dev`);
    draft.options.version = value;
  },
  'admin-socket': (draft, value, name) => {
    if (value.trim() === '') throw new Error(`--${name} needs a path`);
    draft.options.adminSocketPath = value;
  },
  'admin-socket-mode': (draft, value, name) => (draft.options.adminSocketMode = octalMode(name, value)),
  'readonly-admin-port': (draft, value, name) => (draft.options.readonlyAdminPort = integer(name, value)),
  'http-drain-timeout': (draft, value, name) => (draft.options.httpDrainTimeoutMs = integer(name, value)),
  'health-check-path': (draft, value, name) => {
    if (!value.startsWith('/')) throw new Error(`--${name}: ${JSON.stringify(value)} is not a path starting with "/"`);
    draft.options.healthCheckPath = value;
  },
};

const SWITCHES: Readonly<Record<string, (draft: Draft) => void>> = {
  'disable-hot-restart': (draft) => (draft.commandLine.disableHotRestart = true),
  'use-dynamic-base-id': (draft) => (draft.commandLine.useDynamicBaseId = true),
};

/** Envoy's one-letter spellings (TCLAP short names) of the flags above. */
const SHORT_NAMES: Readonly<Record<string, string>> = { c: 'config-path', l: 'log-level' };

/**
 * `--name`, `-c`, `--name value` as one argument, or `--name=value` → the flag's long name and its inline
 * value, if any. Envoy's TCLAP parser (source/server/options_impl.cc: `TCLAP::CmdLine cmd("envoy", ' ', …)`)
 * splits one argument at its first space (Arg::trimFlag), which is how Envoy Gateway passes
 * "--drain-strategy immediate"; `=` is the emulator's own leniency (Envoy rejects `--drain-time-s=30`).
 */
function splitFlag(argument: string): { name: string; inline?: string } | undefined {
  const match = /^(--?)([^\s=]+)(?:[\s=]([\s\S]*))?$/.exec(argument);
  if (match === null) return undefined;
  const [, dashes, raw = '', inline] = match;
  const name = dashes === '--' ? raw : (SHORT_NAMES[raw] ?? raw);
  return inline === undefined ? { name } : { name, inline };
}

/** Reads Envoy's and the emulator's flags; throws on a bad value of a flag it understands. */
export function parseCliArgs(argv: readonly string[]): CliConfig {
  const draft: Draft = { options: {}, commandLine: {}, httpListener: {}, tcpListener: {} };
  for (let index = 0; index < argv.length; index += 1) {
    const flag = splitFlag(argv[index] ?? '');
    if (flag === undefined) continue; // a bare argument: Envoy takes none, nothing to do
    const next = argv[index + 1];
    const takesNext = flag.inline === undefined && next !== undefined && !next.startsWith('-');
    const setter = VALUE_FLAGS[flag.name];
    if (setter !== undefined) {
      const value = flag.inline ?? (takesNext ? next : undefined);
      if (value === undefined) throw new Error(`--${flag.name} needs a value`);
      if (flag.inline === undefined) index += 1;
      setter(draft, value, flag.name);
    } else if (SWITCHES[flag.name] !== undefined) {
      SWITCHES[flag.name]?.(draft);
    } else if (takesNext) {
      index += 1; // another Envoy flag and its value: ignored
    }
  }
  const options: EnvoyEmulatorOptions = {
    ...draft.options,
    ...(Object.keys(draft.commandLine).length > 0 ? { commandLine: draft.commandLine } : {}),
    ...(Object.keys(draft.httpListener).length > 0 ? { httpListener: draft.httpListener } : {}),
    ...(Object.keys(draft.tcpListener).length > 0 ? { tcpListener: draft.tcpListener } : {}),
  };
  return draft.randomSeed === undefined ? { options } : { options, randomSeed: draft.randomSeed };
}

async function main(): Promise<void> {
  const { options, randomSeed } = parseCliArgs(process.argv.slice(2));
  const emulator = await EnvoyEmulator.start({ ...options, ...(randomSeed === undefined ? {} : { random: seededRandom(randomSeed) }) });
  // Envoy exits 0 after a shutdown, whether /quitquitquit or a signal asked for it (server.cc).
  void emulator.exited.then(() => process.exit(0));
  process.once('SIGTERM', () => void emulator.close());
  process.once('SIGINT', () => void emulator.close());
  const line = {
    pid: process.pid,
    host: emulator.host,
    ...emulator.ports,
    // Served on a Unix socket, the admin API has no port: `admin` is null and `adminSocket` its path.
    ...(emulator.adminSocket === undefined ? {} : { admin: null, adminSocket: emulator.adminSocket }),
    ...(emulator.readonlyAdminPort === undefined ? {} : { readonlyAdmin: emulator.readonlyAdminPort }),
    listeners: emulator.listenerNames,
    startedAt: emulator.startedAt,
    drainStrategy: emulator.drainStrategy,
    drainTimeMs: emulator.drainTimeMs,
    version: emulator.envoyVersion,
  };
  process.stdout.write(`${JSON.stringify(line)}\n`);
}

// Run only as the entry point, so that tests can import parseCliArgs.
if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(realpathSync(process.argv[1])).href) {
  main().catch((error: unknown) => {
    process.stderr.write(`envoy-emulator: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(2);
  });
}
