/**
 * The admin API the sidecar drains, decided per pod: the pod's annotations first, then what the pod itself
 * says (admin-discovery.ts), then the webhook's defaults. Also what the sidecar needs to reach a Unix socket:
 * the volume holding it, and a user the socket lets connect. Pure.
 */
import { posix } from 'node:path';
import type { V1Container, V1PodSecurityContext, V1VolumeMount } from '@kubernetes/client-node';
import { ANNOTATIONS } from '../config/annotation-names.js';
import { ConfigError } from '../config/errors.js';
import { adminSocketPath } from '../config/values.js';
import type { AdminDiscovery, AdminFinding } from './admin-discovery.js';

export const DEFAULT_SOURCE = 'default';

export interface AdminEndpoint {
  /** A host, or unix:/path. */
  readonly address: string;
  /** Meaningless for a socket (the plan's default stays). */
  readonly port: number;
  /** Where it came from, for the status annotation: `annotation …`, `default`, or a finding's `from`. */
  readonly from: string;
  /** True when some of it came from the pod's own spec (then the warning says so). */
  readonly discovered: boolean;
  readonly warnings: readonly string[];
}

export interface AdminInputs {
  /** The plan's values: annotations where set, else the webhook's defaults. */
  readonly planAddress: string;
  readonly planPort: number;
  readonly annotated: { readonly address: boolean; readonly port: boolean };
  readonly discovery: AdminDiscovery;
  readonly envoyName: string;
}

/**
 * Each of address and port: the annotation when set, else what the pod says (its first finding), else the
 * default. An annotated socket leaves no port to find; an annotated port means TCP, so only a host is taken
 * from a TCP finding. Every finding that disagrees with the result is named in a warning.
 */
export function resolveAdminEndpoint(inputs: AdminInputs): AdminEndpoint {
  const { planAddress, planPort, annotated, discovery } = inputs;
  const found = discovery.findings[0];
  const annotatedSocket = annotated.address && adminSocketPath(planAddress) !== undefined;
  let address = planAddress;
  let port = planPort;
  const discoveredParts: string[] = [];
  if (found?.kind === 'socket' && !annotated.address && !annotated.port) {
    address = found.address;
    discoveredParts.push('address');
  } else if (found?.kind === 'tcp') {
    if (!annotated.address) {
      const host = found.host ?? defaultHost(planAddress);
      if (host !== planAddress || found.host !== undefined) discoveredParts.push('address');
      address = host;
    }
    if (!annotated.port && !annotatedSocket) {
      port = found.port;
      discoveredParts.push('port');
    }
  }
  const from = sourceOf(annotated, found, discoveredParts);
  const endpoint = { address, port };
  const warnings = [...discovery.warnings];
  // Said only when it changes what the sidecar would have used: a pod declaring the default port needs no note.
  const changed = address !== planAddress || (port !== planPort && adminSocketPath(address) === undefined);
  if (discoveredParts.length > 0 && found !== undefined && changed) {
    warnings.push(`Envoy admin found at ${describe(endpoint)} (${found.from}); the sidecar drains it there`);
  }
  for (const finding of discovery.findings) {
    const conflict = contradiction(endpoint, finding);
    if (conflict !== undefined) warnings.push(`admin ${describe(endpoint)} (${briefSource(from)}) but ${finding.from} says ${conflict}`);
  }
  return { address, port, from, discovered: discoveredParts.length > 0, warnings };
}

/** A declared port names no host: the configured one, unless that is a socket (then IPv4 loopback). */
function defaultHost(planAddress: string): string {
  return adminSocketPath(planAddress) === undefined ? planAddress : '127.0.0.1';
}

function sourceOf(annotated: AdminInputs['annotated'], found: AdminFinding | undefined, discoveredParts: readonly string[]): string {
  const keys = [
    ...(annotated.address ? [ANNOTATIONS.envoyAdminAddress] : []),
    ...(annotated.port ? [ANNOTATIONS.envoyAdminPort] : []),
  ];
  const discovered = found !== undefined && discoveredParts.length > 0 ? found.from : undefined;
  if (keys.length === 0) return discovered ?? DEFAULT_SOURCE;
  const annotations = `annotation ${keys.join(' and ')}`;
  return discovered === undefined ? annotations : `${annotations}, ${discoveredParts.join(' and ')} from ${discovered}`;
}

/** What a finding says that the endpoint does not, or undefined when they agree. */
function contradiction(endpoint: { address: string; port: number }, finding: AdminFinding): string | undefined {
  const socket = adminSocketPath(endpoint.address);
  if (finding.kind === 'socket') return finding.address === endpoint.address ? undefined : finding.address;
  const says = finding.host === undefined ? `port ${finding.port}` : hostPort(finding.host, finding.port);
  if (socket !== undefined) return says;
  if (finding.port !== endpoint.port) return says;
  if (finding.host !== undefined && finding.host !== endpoint.address) return says;
  return undefined;
}

export function describe(endpoint: { address: string; port: number }): string {
  return adminSocketPath(endpoint.address) === undefined ? hostPort(endpoint.address, endpoint.port) : endpoint.address;
}

/** Admission warnings are cut at about 100 characters (webhook/admission.ts): annotations by kind alone. */
function briefSource(source: string): string {
  return source.startsWith('annotation ') ? 'annotation' : source;
}

function hostPort(host: string, port: number): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}

// ---- reaching a Unix socket ----

export type SocketMountLookup =
  | { readonly found: true; readonly mount: V1VolumeMount }
  | { readonly found: false; readonly reason: string };

/**
 * The Envoy container's mount holding the socket's directory (the most specific, when several do), as the
 * sidecar must mount it: the same volume, sub-path and mount path, so that the socket has the same path in
 * both. Read-only is enough: connect(2) on a socket checks only write permission on the socket's inode, and
 * a read-only mount refuses writes only to regular files, directories and symlinks (Linux fs/namei.c,
 * sb_permission), so a socket on it still accepts connections; the sidecar can change nothing else there.
 */
export function socketMount(envoy: V1Container, socketPath: string): SocketMountLookup {
  const directory = posix.dirname(posix.normalize(socketPath));
  // Only shaped by the review's schema (objects): a mount without a path string holds nothing.
  const mounts = (envoy.volumeMounts ?? []).filter((mount) => typeof mount.mountPath === 'string' && typeof mount.name === 'string');
  const holding = mounts
    .filter((mount) => isSameOrParent(normalizedDir(mount.mountPath), directory))
    .sort((a, b) => normalizedDir(b.mountPath).length - normalizedDir(a.mountPath).length);
  const mount = holding[0];
  const mounted = mounts.map((m) => m.mountPath).join(', ') || 'none';
  if (mount === undefined) {
    return { found: false, reason: `container "${envoy.name}" mounts no volume at ${directory} or a parent directory (its mounts: ${mounted})` };
  }
  if (mount.subPathExpr !== undefined) {
    // Its $(VARS) are the Envoy container's environment, which the sidecar does not have.
    return { found: false, reason: `container "${envoy.name}" mounts volume "${mount.name}" at ${mount.mountPath} with subPathExpr, which the sidecar cannot expand` };
  }
  return {
    found: true,
    mount: { name: mount.name, mountPath: mount.mountPath, ...(typeof mount.subPath === 'string' ? { subPath: mount.subPath } : {}), readOnly: true },
  };
}

function normalizedDir(path: string): string {
  const normal = posix.normalize(path);
  return normal.length > 1 && normal.endsWith('/') ? normal.slice(0, -1) : normal;
}

function isSameOrParent(parent: string, child: string): boolean {
  return parent === child || child.startsWith(parent === '/' ? '/' : `${parent}/`);
}

/** The user (and group) Envoy runs as, by its container's securityContext, else the pod's. */
export interface RunAs {
  readonly user: number;
  readonly group: number | undefined;
}

export function envoyRunAs(envoy: V1Container, podContext: V1PodSecurityContext | undefined): RunAs | undefined {
  const user = envoy.securityContext?.runAsUser ?? podContext?.runAsUser;
  if (!isUserId(user)) return undefined;
  const group = envoy.securityContext?.runAsGroup ?? podContext?.runAsGroup;
  return { user, group: isUserId(group) ? group : undefined };
}

/** The API server validates these later; a review's own must not reach the sidecar's spec unless they are ids. */
function isUserId(value: unknown): value is number {
  return typeof value === 'number' && Number.isInteger(value) && value >= 0 && value <= 2 ** 31 - 1;
}

/** Denied when the socket came from the webhook's configuration or an annotation: nobody could drain that pod. */
export function unreachableSocketError(endpoint: AdminEndpoint, reason: string): ConfigError {
  const source = endpoint.from === DEFAULT_SOURCE ? 'webhook flag --admin-address (the default for every pod)' : endpoint.from;
  return new ConfigError(
    source,
    endpoint.address,
    `a Unix socket in a volume the Envoy container mounts, so that the sidecar can mount it too; but ${reason}: mount the socket's volume in the Envoy container, or set annotation ${ANNOTATIONS.envoyAdminAddress} to the admin host`,
    'envoy-admin-address',
  );
}

/** Short, as admission warnings are (about 100 characters): what is unreachable and what to mount; the warning that found it names the source. */
export function unreachableSocketWarning(endpoint: AdminEndpoint, envoyName: string): string {
  const directory = posix.dirname(adminSocketPath(endpoint.address) ?? '/');
  return `no volume holds admin socket ${endpoint.address}: mount one at ${directory} in "${envoyName}"`;
}
