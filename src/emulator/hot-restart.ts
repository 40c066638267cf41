/**
 * Envoy's hot restart, between two emulator processes: the parent (the emulator that is asked to restart) and a
 * child it forks with the next `--restart-epoch`, handed the parent's listen sockets over the fork's IPC channel. The
 * child shuts the parent's admin down and binds its address, tells the parent to drain, merges the parent's stats at
 * each flush (the first when its workers start), and terminates it after `--parent-shutdown-time-s`; the parent's
 * admin connections stay open until it exits. `server.hot_restart_epoch` is each process's `--restart-epoch`.
 *
 * The five steps and the Envoy source each follows: docs/emulator.md#hot-restart; the word:
 * docs/glossary.md#hot-restart.
 */
import { fork, type ChildProcess } from 'node:child_process';
import type net from 'node:net';
import { fileURLToPath } from 'node:url';
import type { StatValue } from './stats.js';
import type { EnvoyEmulatorOptions } from './types.js';

const CHILD_ENTRY = fileURLToPath(new URL('./hot-restart-child.ts', import.meta.url));

/** The messages of the parent-child channel (Envoy's HotRestartMessage, in spirit). */
export type HotRestartMessage =
  | { readonly type: 'options'; readonly options: EnvoyEmulatorOptions }
  | { readonly type: 'listen-socket'; readonly listener: 'http' | 'tcp' }
  | { readonly type: 'shutdown-parent-admin' }
  | { readonly type: 'parent-admin-closed' }
  | { readonly type: 'child-ready'; readonly pid: number; readonly ports: { readonly admin: number; readonly http: number; readonly tcp: number } }
  | { readonly type: 'child-failed'; readonly message: string }
  | { readonly type: 'get-parent-stats' }
  | { readonly type: 'parent-stats'; readonly stats: ParentStats }
  | { readonly type: 'terminate-parent' };

/** What the parent reports of itself at each of the child's flushes. */
export interface ParentStats {
  readonly gauges: Readonly<Record<string, number>>;
  readonly counters: Readonly<Record<string, number>>;
  /** The parent's open connections (InstanceImpl::numConnections). */
  readonly connections: number;
}

/** What the parent side needs from the emulator it belongs to. */
export interface HotRestartHost {
  readonly listenSockets: { readonly http: net.Server; readonly tcp: net.Server };
  /** The options a child is started with: the parent's own, function-valued ones left out. */
  childOptions(): EnvoyEmulatorOptions;
  /** shutdownAdmin: stop accepting on the admin listen socket, leaving its accepted connections open. */
  closeAdminListenSocket(): Promise<void>;
  /** drainParentListeners: stop accepting on every listener, and start the drain sequence. */
  drainListeners(): void;
  statValues(): StatValue[];
  openConnections(): number;
  /** Exits, as a terminated parent does: every connection closed. */
  terminate(): Promise<void>;
}

export interface HotRestartedChild {
  readonly pid: number;
  readonly ports: { readonly admin: number; readonly http: number; readonly tcp: number };
  /** The child process, for a test to stop it. */
  readonly process: ChildProcess;
}

/**
 * The parent's half: forks the child, hands it the listen sockets, shuts its own admin down for the child to
 * bind, drains, answers the child's stats requests, and exits when the child terminates it.
 */
export async function hotRestart(host: HotRestartHost, timeoutMs = 15_000): Promise<HotRestartedChild> {
  const child = fork(CHILD_ENTRY, [], { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const send = (message: HotRestartMessage, handle?: net.Server): void => {
    if (child.connected) child.send(message, handle);
  };
  child.on('message', (message: HotRestartMessage) => {
    if (message.type === 'shutdown-parent-admin') {
      void host.closeAdminListenSocket().then(() => {
        host.drainListeners();
        send({ type: 'parent-admin-closed' });
      });
    } else if (message.type === 'get-parent-stats') {
      send({ type: 'parent-stats', stats: parentStats(host) });
    } else if (message.type === 'terminate-parent') {
      void host.terminate();
    }
  });
  const ready = new Promise<HotRestartedChild>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the hot restart child did not start within ${timeoutMs} ms`)), timeoutMs);
    child.on('message', (message: HotRestartMessage) => {
      if (message.type === 'child-ready') {
        clearTimeout(timer);
        resolve({ pid: message.pid, ports: message.ports, process: child });
      } else if (message.type === 'child-failed') {
        clearTimeout(timer);
        reject(new Error(`the hot restart child failed: ${message.message}`));
      }
    });
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`the hot restart child exited before it was ready (code ${String(code)}, signal ${String(signal)})`));
    });
  });
  send({ type: 'options', options: host.childOptions() });
  send({ type: 'listen-socket', listener: 'http' }, host.listenSockets.http);
  send({ type: 'listen-socket', listener: 'tcp' }, host.listenSockets.tcp);
  return ready;
}

function parentStats(host: HotRestartHost): ParentStats {
  const gauges: Record<string, number> = {};
  const counters: Record<string, number> = {};
  for (const stat of host.statValues()) {
    // The `server.*` gauges are never imported (ServerStats are NeverImport / set from the child's own state).
    if (stat.name.startsWith('server.')) continue;
    if (stat.type === 'gauge') gauges[stat.name] = stat.value;
    else counters[stat.name] = stat.value;
  }
  return { gauges, counters, connections: host.openConnections() };
}

/**
 * The child's view of its parent's stats, merged at each flush (mergeParentStatsIfAny): gauges as the parent
 * last reported them, counters by the parent's growth since the first merge, and none once the parent is gone.
 */
export class ParentStatsMerger {
  private latest: ParentStats | undefined;
  private firstCounters: Readonly<Record<string, number>> | undefined;
  private parentGone = false;
  /** Whether the first merge has happened (the child's workers have started: docs/emulator.md#hot-restart, step 4). */
  mergedOnce = false;
  /** Whether this child has terminated its parent (after which the parent's going away is expected). */
  terminatedParent = false;
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly channel: NodeJS.Process,
    intervalMs: number,
    parentShutdownTimeMs: number,
  ) {
    channel.on('message', (message: HotRestartMessage) => {
      if (message.type !== 'parent-stats' || this.parentGone) return;
      this.firstCounters ??= message.stats.counters;
      this.latest = message.stats;
      // The merge and the server stats are one update (updateServerStats): the uptime is set with them.
      this.mergedOnce = true;
    });
    channel.once('disconnect', () => (this.parentGone = true));
    const flush = (): void => {
      // Merged at the flush: once the parent is gone, the merge gives nothing (its contributions dropped).
      if (this.parentGone) {
        this.latest = undefined;
        this.mergedOnce = true;
      } else if (channel.connected) channel.send?.({ type: 'get-parent-stats' } satisfies HotRestartMessage);
    };
    this.timer = setInterval(flush, intervalMs);
    this.timer.unref();
    const terminate = setTimeout(() => {
      this.terminatedParent = true;
      if (channel.connected) channel.send?.({ type: 'terminate-parent' } satisfies HotRestartMessage);
    }, parentShutdownTimeMs);
    terminate.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /** The parent's open connections as last merged (`server.parent_connections`); 0 once it is gone. */
  get parentConnections(): number {
    return this.latest?.connections ?? 0;
  }

  /** `stat` with the parent's share added, as the child's store holds it after the merge. */
  merged(stat: StatValue): StatValue {
    const latest = this.latest;
    if (latest === undefined || stat.name.startsWith('server.')) return stat;
    if (stat.type === 'gauge') {
      const parent = latest.gauges[stat.name];
      return parent === undefined ? stat : { ...stat, value: stat.value + parent, used: true };
    }
    const parent = latest.counters[stat.name];
    const first = this.firstCounters?.[stat.name] ?? parent;
    return parent === undefined || first === undefined ? stat : { ...stat, value: stat.value + Math.max(0, parent - first) };
  }
}
