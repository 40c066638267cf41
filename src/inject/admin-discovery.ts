/**
 * Where a pod's Envoy serves its admin API, as the pod itself says it: a declared container port, the bootstrap
 * in an inline --config-yaml (Envoy Gateway), or the socket path a `contour bootstrap` init container writes
 * (Contour). Pure: the pod in, findings and warnings out; nothing here reads a file or a network.
 */
import type { V1Container, V1Pod } from '@kubernetes/client-node';
import { parse as parseYaml } from 'yaml';
import { adminAddress, adminSocketPath } from '../config/values.js';

/** What one place in the pod says about the admin API. */
export type AdminFinding =
  /** `host` is undefined when the pod names no host (a declared port), or binds a wildcard: any loopback reaches it. */
  | { readonly kind: 'tcp'; readonly host: string | undefined; readonly port: number; readonly from: string }
  /** `address` is canonical: unix:/path. */
  | { readonly kind: 'socket'; readonly address: string; readonly from: string };

export interface AdminDiscovery {
  /** In the order of trust: the first one is used when no annotation says otherwise. */
  readonly findings: readonly AdminFinding[];
  /** What could not be read (bad YAML, an unusable address): the pod is still injected. */
  readonly warnings: readonly string[];
}

/** Envoy's own admin port names in the distributions' manifests (Authorino: `admin`). */
const ADMIN_PORT_NAMES = new Set(['admin', 'envoy-admin']);
/** Above this an inline bootstrap is not parsed: a review must stay cheap, and no real bootstrap is near it. */
export const MAX_CONFIG_YAML_BYTES = 1024 * 1024;
const CONFIG_YAML_FLAG = '--config-yaml';
/** Contour's default for `contour bootstrap --admin-address` (cmd/contour/bootstrap.go). */
export const CONTOUR_DEFAULT_ADMIN_SOCKET = '/admin/admin.sock';
const CONTOUR_ADMIN_FLAG = '--admin-address';

export function discoverAdmin(pod: V1Pod, envoy: V1Container): AdminDiscovery {
  const warnings: string[] = [];
  const findings = [
    findAdminPort(envoy),
    findInConfigYaml(envoy, warnings),
    findContourBootstrap(pod.spec?.initContainers ?? [], warnings),
  ].filter((finding): finding is AdminFinding => finding !== undefined);
  return { findings, warnings };
}

function findAdminPort(envoy: V1Container): AdminFinding | undefined {
  const port = envoy.ports?.find((candidate) => ADMIN_PORT_NAMES.has(candidate.name ?? ''));
  // The API server has validated a stored pod's ports, but a review is only shaped, not validated, when it arrives.
  if (port === undefined || portOf(port.containerPort) === undefined) return undefined;
  return { kind: 'tcp', host: undefined, port: port.containerPort, from: `container port ${JSON.stringify(port.name)}` };
}

// ---- inline --config-yaml ----

const CONFIG_YAML_SOURCE = 'inline --config-yaml';

function findInConfigYaml(envoy: V1Container, warnings: string[]): AdminFinding | undefined {
  const text = configYamlOf([...(envoy.command ?? []), ...(envoy.args ?? [])]);
  if (text === undefined) return undefined;
  if (Buffer.byteLength(text, 'utf8') > MAX_CONFIG_YAML_BYTES) {
    warnings.push(`${CONFIG_YAML_SOURCE} of "${envoy.name}" is over 1 MiB: admin address not read from it`);
    return undefined;
  }
  let bootstrap: unknown;
  try {
    // Aliases bounded: a small document must not expand into a huge one (billion laughs).
    bootstrap = parseYaml(text, { maxAliasCount: 100 });
  } catch (error) {
    const reason = error instanceof Error ? error.message.split('\n')[0] : String(error);
    // The reason last: admission warnings are cut at about 100 characters.
    warnings.push(`${CONFIG_YAML_SOURCE} of "${envoy.name}" is not valid YAML, admin address not read: ${reason}`);
    return undefined;
  }
  const found = adminOfBootstrap(bootstrap);
  if (typeof found === 'string') {
    warnings.push(`${CONFIG_YAML_SOURCE} of "${envoy.name}" ignored: ${found}`);
    return undefined;
  }
  return found;
}

/**
 * The value of Envoy's --config-yaml: `--config-yaml`, `<yaml>` as two items, `--config-yaml=<yaml>`, or one
 * item `--config-yaml <yaml>` (Envoy Gateway's spelling), which Envoy's TCLAP splits at the first space.
 * The last one wins, as in TCLAP.
 */
export function configYamlOf(argv: readonly string[]): string | undefined {
  let value: string | undefined;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] as string;
    if (arg === CONFIG_YAML_FLAG) value = argv[++i];
    else if (arg.startsWith(`${CONFIG_YAML_FLAG}=`) || arg.startsWith(`${CONFIG_YAML_FLAG} `)) value = arg.slice(CONFIG_YAML_FLAG.length + 1);
  }
  return value;
}

/** The admin address of a parsed bootstrap: a finding, undefined when it names none, or what is wrong with it. */
function adminOfBootstrap(bootstrap: unknown): AdminFinding | string | undefined {
  const address = field(field(bootstrap, 'admin'), 'address');
  if (address === undefined) return undefined;
  const pipe = field(address, 'pipe');
  if (pipe !== undefined) {
    const path = field(pipe, 'path');
    const canonical = typeof path === 'string' ? adminAddress.parse(path) : undefined;
    if (canonical === undefined || adminSocketPath(canonical) === undefined) return `admin pipe path ${JSON.stringify(path)} is not absolute`;
    return { kind: 'socket', address: canonical, from: CONFIG_YAML_SOURCE };
  }
  const socket = field(address, 'socket_address');
  if (socket === undefined) return undefined;
  const port = portOf(field(socket, 'port_value'));
  if (port === undefined) return `admin port_value ${JSON.stringify(field(socket, 'port_value'))} is not a port`;
  const host = field(socket, 'address');
  const parsed = typeof host === 'string' ? adminAddress.parse(host) : undefined;
  if (parsed === undefined || adminSocketPath(parsed) !== undefined) return `admin address ${JSON.stringify(host)} is not a host`;
  return { kind: 'tcp', host: reachableHost(parsed), port, from: CONFIG_YAML_SOURCE };
}

/** A wildcard bind is reached on any of the pod's addresses: the configured host does. */
function reachableHost(host: string): string | undefined {
  return host === '0.0.0.0' || host === '::' ? undefined : host;
}

function portOf(value: unknown): number | undefined {
  const port = typeof value === 'string' && /^\d+$/.test(value) ? Number(value) : value;
  return typeof port === 'number' && Number.isInteger(port) && port >= 1 && port <= 65535 ? port : undefined;
}

function field(value: unknown, key: string): unknown {
  if (typeof value !== 'object' || value === null || Array.isArray(value) || !Object.hasOwn(value, key)) return undefined;
  return (value as Record<string, unknown>)[key];
}

// ---- contour bootstrap ----

const CONTOUR_SOURCE = 'contour bootstrap';

/** Contour's init container writes Envoy's bootstrap, with the admin API on a Unix socket. */
function findContourBootstrap(initContainers: readonly V1Container[], warnings: string[]): AdminFinding | undefined {
  for (const container of initContainers) {
    const argv = [...(container.command ?? []), ...(container.args ?? [])];
    if (!isContourBootstrap(container, argv)) continue;
    const path = flagValue(argv, CONTOUR_ADMIN_FLAG) ?? CONTOUR_DEFAULT_ADMIN_SOCKET;
    const canonical = adminAddress.parse(path);
    if (canonical === undefined || adminSocketPath(canonical) === undefined) {
      warnings.push(`${CONTOUR_SOURCE} in "${container.name}" ignored: ${CONTOUR_ADMIN_FLAG} ${JSON.stringify(path)} is not an absolute path`);
      return undefined;
    }
    return { kind: 'socket', address: canonical, from: CONTOUR_SOURCE };
  }
  return undefined;
}

function isContourBootstrap(container: V1Container, argv: readonly string[]): boolean {
  if (!argv.includes('bootstrap')) return false;
  const runsContour = argv.some((arg) => arg === 'contour' || arg.endsWith('/contour'));
  return runsContour || (container.image ?? '').includes('contour');
}

/** A kingpin flag's value: `--flag=value` or `--flag value`; the last one wins. */
function flagValue(argv: readonly string[], flag: string): string | undefined {
  let value: string | undefined;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] as string;
    if (arg === flag) value = argv[++i];
    else if (arg.startsWith(`${flag}=`)) value = arg.slice(flag.length + 1);
  }
  return value;
}
