/**
 * Where the admin API is: a Unix socket (Contour's) or a host and port, decided once from the one address string,
 * and what is at a socket's path now, to tell a moved socket from an exited Envoy.
 */
import { adminSocketPath } from '../config/values.js';

const fs = process.getBuiltinModule('node:fs');

/** What is at a Unix socket path now (lstat): for messages, and to tell a moved socket from an exited Envoy. */
export type SocketPathState = 'socket' | 'missing' | 'file' | 'directory' | 'other';

/**
 * A Unix socket (Contour's admin API), or a host and port over TCP. A host name that resolves to both families
 * (`localhost` to 127.0.0.1 and ::1) is tried on each address in turn (Node's autoSelectFamily, RFC 8305),
 * so the sidecar reaches Envoy on the family it listens on: Envoy Gateway binds ::1 only on IPv6 clusters.
 */
export type ConnectTarget = { readonly socketPath: string } | { readonly host: string; readonly port: number };

/** What is at `path` now, without following a symbolic link. */
export function socketPathState(path: string): SocketPathState {
  if (isAbstractSocket(path)) return 'socket';
  try {
    const stat = fs.lstatSync(path);
    if (stat.isSocket()) return 'socket';
    if (stat.isFile()) return 'file';
    if (stat.isDirectory()) return 'directory';
    return 'other';
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'ENOENT' || (error as NodeJS.ErrnoException).code === 'ENOTDIR' ? 'missing' : 'other';
  }
}

function isAbstractSocket(path: string): boolean {
  return path.startsWith('\0') || path.startsWith('@');
}

/** `device:inode` of the socket at `path`; undefined when it is none. */
export function inodeOf(path: string): string | undefined {
  // An abstract name has no file, and is bound by one socket at a time, as a port is.
  if (isAbstractSocket(path)) return 'abstract';
  try {
    const stat = fs.lstatSync(path);
    return stat.isSocket() ? `${stat.dev}:${stat.ino}` : undefined;
  } catch {
    return undefined;
  }
}

/** `host:port` of the admin API (IPv6 hosts in brackets), or `unix:/path` for a socket (`port` unused). */
export function adminHostPort(address: string, port: number): string {
  if (adminSocketPath(address) !== undefined) return address;
  return `${address.includes(':') ? `[${address}]` : address}:${port}`;
}

/** The admin API for logs and messages: `http://host:port`, or `unix:/path` for a socket. */
export function adminTarget(address: string, port: number): string {
  return adminSocketPath(address) === undefined ? `http://${adminHostPort(address, port)}` : address;
}

/** The target `address` names: its socket path, or the host and `port` (ignored for a socket). */
export function connectTargetOf(address: string, port: number): ConnectTarget {
  const socketPath = adminSocketPath(address);
  return socketPath === undefined ? { host: address, port } : { socketPath };
}

