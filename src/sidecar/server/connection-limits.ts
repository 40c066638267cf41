/**
 * The bounds the server holds every connection to (ConnectionLimits), sized for this process: its open-file
 * limit, and a container of 128Mi. The ConnectionGuard (connection-guard.ts) enforces them.
 */
import { readFileSync } from 'node:fs';
import type { SidecarLog } from '../log.js';

/**
 * How the server keeps its port usable, and its memory bounded, whatever a client does: every file
 * descriptor a stranger holds is one the kubelet's /shutdown and probes may not get (past the process's
 * open-file limit Node resets new connections as it accepts them), and every answer it asks for and does not
 * read is memory in a container limited to 128Mi. The kubelet's own use (a few probes, two preStop hooks
 * held for the length of a drain, a scrape) stays far inside every bound.
 */
export interface ConnectionLimits {
  /**
   * A connection must deliver a complete request head within this long of opening, or of its previous
   * answer (keep-alive); otherwise it is closed. A request being answered (a held /shutdown) is never cut.
   */
  readonly requestWithinMs: number;
  /**
   * Open connections at most. At the limit a new connection still gets served: it closes the connection
   * that has waited longest without a request in progress, or else the one that has left its answers
   * unread longest. Only when every connection has a request awaiting its answer is the new one closed.
   */
  readonly maxConnections: number;
  /**
   * Requests received on one connection and not yet answered in full. Node stops reading a connection whose
   * answers pile up, but only between reads: one 64 KiB read holds some 1,800 pipelined requests, each
   * answered into a queue of its own. A request beyond the bound closes the connection.
   */
  readonly maxRequestsInFlight: number;
  /**
   * Bytes of answers written to one connection and not yet taken by the kernel. A client that reads keeps
   * this near 0; one that does not fills the kernel's socket buffers first, then this. An answer written while
   * more than this of the answers that go out before it are untaken closes the connection; answers queued
   * behind a request still awaiting its answer (a held /shutdown) do not count.
   */
  readonly maxUnflushedBytes: number;
  /**
   * Once every request of a connection is answered, an answer must be taken within this long (of being
   * written, or of the previous one taken); otherwise the connection is closed. Answers queued behind a
   * request still awaiting its answer (a held /shutdown) wait with it: that request is never cut.
   */
  readonly writeWithinMs: number;
}

/** A kubelet, curl or Prometheus sends its request head within milliseconds of connecting; 5 s leaves room for a loaded node. */
const REQUEST_HEAD_TIMEOUT_MS = 5_000;
/** Legitimate clients are a handful (probes, two preStop hooks, a scrape): the limit only bounds descriptors and memory. */
const MAX_CONNECTIONS_CAP = 512;
const MIN_CONNECTIONS = 8;
/** Descriptors left for everything but served connections: stdio, epoll, the admin client's sockets, libuv's own (21 at rest, measured). */
const RESERVED_DESCRIPTORS = 64;
/**
 * The kubelet, curl and Prometheus send one request and read its answer before the next; 4 leaves room for
 * a client that pipelines a little. 512 connections × 4 requests is 2,048 queued answers at most, instead of
 * hundreds of thousands (measured before this bound: 500 connections pipelining GET /drain without reading
 * took the sidecar past 1.9 GiB of resident memory within 10 s).
 */
const MAX_REQUESTS_IN_FLIGHT = 4;
/**
 * Our answers are 0.2 to 2 KiB, /metrics 6 to 15 KiB (its per-listener series are capped: see metrics.ts): 32 KiB
 * is several whole answers, and 512 connections × (32 KiB + one answer) stays under 20 MiB, which, on a sidecar
 * of 45-55 MiB at rest, keeps every client behaviour within a 96 MiB budget under the pod's 128Mi. /drain grows
 * by some 70 bytes per Envoy listener (200 KB with 3,000), but those bytes are one Buffer per poll, shared by
 * every connection it is queued on (JsonParts), not a copy per answer.
 */
const MAX_UNFLUSHED_BYTES = 32 * 1024;
/** A kubelet or Prometheus takes its answer within milliseconds; 5 s leaves room for a loaded node, as for the request head. */
const WRITE_TIMEOUT_MS = 5_000;

/** The limits for this process: at most 512 connections, fewer when the open-file limit is below 576. */
export function defaultConnectionLimits(openFilesLimit: number | undefined = openFilesSoftLimit()): ConnectionLimits {
  const budget = openFilesLimit === undefined ? MAX_CONNECTIONS_CAP : openFilesLimit - RESERVED_DESCRIPTORS;
  return {
    requestWithinMs: REQUEST_HEAD_TIMEOUT_MS,
    maxConnections: Math.max(MIN_CONNECTIONS, Math.min(MAX_CONNECTIONS_CAP, budget)),
    maxRequestsInFlight: MAX_REQUESTS_IN_FLIGHT,
    maxUnflushedBytes: MAX_UNFLUSHED_BYTES,
    writeWithinMs: WRITE_TIMEOUT_MS,
  };
}

/** The soft RLIMIT_NOFILE from /proc (Node has no getrlimit); undefined when unlimited or not on Linux. */
export function openFilesSoftLimit(limitsFile = '/proc/self/limits'): number | undefined {
  let text: string;
  try {
    text = readFileSync(limitsFile, 'utf8');
  } catch {
    return undefined;
  }
  const match = /^Max open files\s+(\d+)\s/m.exec(text);
  return match?.[1] === undefined ? undefined : Number(match[1]);
}

/** The limits in force, logged once the server listens. */
export function logLimits(log: SidecarLog, limits: ConnectionLimits): void {
  const { maxConnections, requestWithinMs, maxRequestsInFlight, maxUnflushedBytes, writeWithinMs } = limits;
  log.info(
    {
      event: 'connection_limits',
      max_connections: maxConnections,
      request_within_ms: requestWithinMs,
      max_requests_in_flight: maxRequestsInFlight,
      max_unflushed_bytes: maxUnflushedBytes,
      write_within_ms: writeWithinMs,
    },
    `serving at most ${maxConnections} connections; each must send its request within ${requestWithinMs} ms, ` +
      `pipeline at most ${maxRequestsInFlight} requests, and take each answer within ${writeWithinMs} ms, leaving at most ${maxUnflushedBytes} bytes unread`,
  );
}
