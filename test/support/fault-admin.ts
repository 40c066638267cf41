/**
 * A scriptable, fault-injecting stand-in for Envoy's admin API on a real loopback TCP socket, for regression
 * tests and a model-based fault search. It models ONE Envoy process at a time, and only what the sidecar
 * can observe of it; src/emulator/envoy-emulator.ts is the one with real data listeners and drain close.
 *
 *   const admin = await FaultAdmin.start({ listeners: { ingress: 3 } });
 *   admin.script('/healthcheck/fail', 'delay:2100');      // the next call to that path answers late
 *   admin.chooseWith((call) => (call.path === '/stats' ? 'reset' : undefined)); // or decide per call
 *   ... client calls http://127.0.0.1:${admin.port} ...
 *   admin.calls;      // every call received: what, which process, which behaviour, whether it took effect
 *   await admin.close();
 *
 * The process (see ProcessView): state (PRE_INITIALIZING until `finishInitializing`, then DRAINING if and only
 * if health checks are failed, else LIVE: Envoy's source/server/utils.cc Utility::serverState; drain_listeners
 * leaves it LIVE), whether health checks are failed, whether listeners were drained, its restart epoch, its
 * start on its own wall clock (`stepWallClock` moves that clock, so uptimes can go negative), its admin
 * listener's connection counter, and the open connections of each listener.
 *
 * Fidelity, per docs/emulator.md and shared/reference/envoy-admin.md:
 * - `listener.admin.downstream_cx_total` counts accepted admin connections (+1 at accept, before the request
 *   is read; 0 for a new process). `listener.<name>.downstream_cx_active` is the listener's total, with
 *   per-worker copies `listener.<name>.worker_<n>.downstream_cx_active` (connections spread round robin) and
 *   the admin listener's `listener.admin.main_thread.downstream_cx_active`; the admin gauge includes the
 *   connection asking. Every stat counts as used: `usedonly` is ignored.
 * - `/stats?filter=` is applied as a JavaScript RegExp, partial match (`test`), as Envoy's RE2 partial match;
 *   an invalid one is 400. `format=json` gives `{"stats":[{"name","value"}…]}`, anything else `name: value` lines.
 * - `/server_info`: state, `uptime_current_epoch` and `uptime_all_epochs` as protobuf JSON durations of whole
 *   seconds truncated toward zero (C++ duration_cast), e.g. "12s" or "-3580s" after a step back,
 *   `hot_restart_version`, `command_line_options.restart_epoch`. `/ready`: 200 `LIVE` or 503 and the state.
 * - Mutations (`/healthcheck/fail`, `/healthcheck/ok`, `/drain_listeners`, `/quitquitquit`) answer `OK\n` to a
 *   POST; a GET is 405 "Method GET not allowed, POST required." as recent Envoy (the docs say 400). After
 *   `/quitquitquit` the process exits once its answer is written: the port then refuses, until `restart()`.
 * - Not modelled: keep-alive (every answer closes its connection; the client uses none), request bodies,
 *   other endpoints (404), INITIALIZING, drain timing and drain close (see docs/emulator.md).
 *
 * When a call takes effect (`FaultCall.effect`): a mutation takes effect when Envoy's handler runs, which is
 * when its answer is decided. 'answer', 'reset' and 'endless' run the handler (the answer was being sent):
 * 'applied'. 'delay' runs it on receipt and answers late, the overloaded-network case where a timed-out call
 * still acted; `{ kind: 'delay', effect: 'on-answer' }` runs it when the answer is due, whether or not the
 * client still waits (a stuck main thread): 'pending' until then, 'withheld' if the process goes first. 'status', 'upgrade', 'deep-json', 'huge' and
 * 'silent' are something else answering or nothing answering: 'withheld'. A refused call is never seen, so
 * never logged. Reads and rejected requests (404, 405, 400) have effect 'none'.
 */
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { systemClock, type Clock } from '../../src/clock.js';

export type FaultServerState = 'LIVE' | 'DRAINING' | 'PRE_INITIALIZING';

/** How one call is answered. */
export type Behaviour =
  | { readonly kind: 'answer' }
  | { readonly kind: 'delay'; readonly ms: number; readonly effect?: 'on-receipt' | 'on-answer' }
  | { readonly kind: 'status'; readonly status: number }
  /** `101 Switching Protocols`, then the socket is held open. */
  | { readonly kind: 'upgrade' }
  /** Headers and part of the body, then a TCP reset. */
  | { readonly kind: 'reset' }
  /** 200 headers, then a byte every 50 ms forever. */
  | { readonly kind: 'endless' }
  /** A 200 whose JSON nests `depth` arrays (default 1e6). */
  | { readonly kind: 'deep-json'; readonly depth?: number }
  /** A 200 of `bytes` (default 16 MiB, twice the client's largest limit), with or without content-length. */
  | { readonly kind: 'huge'; readonly bytes?: number; readonly declareLength?: boolean }
  /** Accepts, reads the request, never answers. */
  | { readonly kind: 'silent' };

export type BehaviourText = 'answer' | `delay:${number}` | `status:${number}` | 'upgrade' | 'reset' | 'endless' | 'deep-json' | 'huge' | 'silent';
export type BehaviourSpec = Behaviour | BehaviourText;

export type CallEffect = 'none' | 'applied' | 'pending' | 'withheld';

/** One call received, in arrival order. Times are monotonic milliseconds (the clock's `now`). */
export interface FaultCall {
  readonly seq: number;
  readonly method: string;
  readonly path: string;
  /** The raw query string without "?". */
  readonly query: string;
  /** The id of the process that received it. */
  readonly processId: number;
  readonly behaviour: Behaviour;
  readonly effect: CallEffect;
  readonly receivedAt: number;
  /** When its status line was written; undefined while or if it never was. */
  readonly answeredAt: number | undefined;
  /**
   * For a `/stats` answer that was rendered: the admin counter (the process's mark), the counts it showed (listeners
   * with connections open, and `ingress`; a hot restart child's include its parent's), and the client connections
   * each process alive then held, its own, by process id (the child's and a hot restart parent's).
   */
  readonly rendered?: {
    readonly adminConnectionsTotal: number;
    readonly connections: Readonly<Record<string, number>>;
    readonly held: Readonly<Record<number, number>>;
  };
}

/** A decision per call; undefined falls through to the default, 'answer'. */
export type Chooser = (call: { readonly method: string; readonly path: string; readonly query: string; readonly seq: number }) => BehaviourSpec | undefined;

export interface ProcessOptions {
  /** `command_line_options.restart_epoch`; default 0 (a container restart). Above 0, uptime_all_epochs carries on. */
  readonly restartEpoch?: number;
  /** Start in PRE_INITIALIZING until `finishInitializing()`; default false (LIVE at once). */
  readonly initializing?: boolean;
  /** The process started this long ago; default 0. */
  readonly uptimeMs?: number;
  /** Overrides FaultAdminOptions.statsExcluded for this process (a new process may run with another config); null: none. */
  readonly statsExcluded?: RegExp | null;
}

export interface FaultAdminOptions extends ProcessOptions {
  readonly host?: string;
  /** Default 0: a free port, kept by `restart()`. */
  readonly port?: number;
  /**
   * Serve on this Unix socket path instead of TCP (Envoy's admin `address: { pipe: { path } }`). Every process
   * that binds it first removes whatever is there, as Envoy unlinks a stale socket file before bind(2)
   * (source/common/network/socket_impl.cc, SocketImpl::bind for a pipe); a directory there, which keeps real Envoy
   * from starting, is removed too (the model explores a path changed while Envoy runs, not a failed start).
   */
  readonly socketPath?: string;
  /** Listener stat names and their open connections; default `{ ingress: 0 }`. */
  readonly listeners?: Readonly<Record<string, number>>;
  /** Envoy's --concurrency: the `worker_<n>` copies per listener; default 2. */
  readonly workers?: number;
  /**
   * Stats left out of every /stats answer, as Envoy's `stats_config.stats_matcher` exclusion list does: a name that
   * matches is absent, not 0 (e.g. /^listener\.admin\./ for an Envoy that trims its admin listener's stats).
   */
  readonly statsExcluded?: RegExp;
  /** `now` stamps the log, `wallNow` (plus `stepWallClock` steps) is the process's wall clock. */
  readonly clock?: Pick<Clock, 'now' | 'wallNow'>;
}

export interface ProcessView {
  readonly id: number;
  readonly state: FaultServerState;
  readonly healthCheckFailed: boolean;
  readonly listenersDrained: boolean;
  readonly restartEpoch: number;
  readonly uptimeSeconds: number;
  readonly adminConnectionsTotal: number;
  readonly adminConnectionsActive: number;
  readonly connections: Readonly<Record<string, number>>;
  /** False once stopped (`stop()`, `/quitquitquit`): its port refuses until `restart()`. */
  readonly running: boolean;
}

interface EnvoyProcess {
  readonly id: number;
  /** False once it exited: its sockets are closed, its timers cleared. */
  alive: boolean;
  /** Its listeners' open client connections (its own, not a hot restart parent's). */
  readonly connections: Map<string, number>;
  /** The admin connections it accepted and still holds; they stay with it when its admin listen socket closes. */
  readonly sockets: Set<net.Socket>;
  /** Its delays, trickles and resets: cleared when it exits. */
  readonly timers: Set<NodeJS.Timeout>;
  readonly statsExcluded: RegExp | undefined;
  /** While a hot restart's parent lives: that parent (its stats merge into this process's). */
  parent: EnvoyProcess | undefined;
  initialized: boolean;
  healthCheckFailed: boolean;
  drained: boolean;
  readonly restartEpoch: number;
  readonly startWallMs: number;
  readonly allEpochsStartWallMs: number;
  adminTotal: number;
  adminActive: number;
}

interface Answer {
  readonly status: number;
  readonly type: string;
  /** Rendered when written, so that a late answer shows the state then. */
  readonly body: () => string;
  readonly effect?: (process: EnvoyProcess) => void;
}

type MutableCall = { -readonly [K in keyof FaultCall]: FaultCall[K] };

const MAX_REQUEST_HEAD = 16 * 1024;
const MUTATIONS = new Set(['/healthcheck/fail', '/healthcheck/ok', '/drain_listeners', '/quitquitquit']);
const REASONS: Readonly<Record<number, string>> = { 101: 'Switching Protocols', 200: 'OK', 400: 'Bad Request', 404: 'Not Found', 405: 'Method Not Allowed', 500: 'Internal Server Error', 503: 'Service Unavailable' };
const SERVER_STATE_ENUM: Readonly<Record<FaultServerState, number>> = { LIVE: 0, DRAINING: 1, PRE_INITIALIZING: 2 };
const TRICKLE_MS = 50;
const RESET_AFTER_MS = 20;

/** Reads `answer`, `delay:<ms>`, `status:<code>`, `upgrade`, `reset`, `endless`, `deep-json`, `huge`, `silent`. */
export function parseBehaviour(spec: BehaviourSpec): Behaviour {
  if (typeof spec !== 'string') return spec;
  const [kind, argument] = spec.split(':') as [string, string | undefined];
  const number = Number(argument);
  if (kind === 'delay' && Number.isFinite(number) && number >= 0) return { kind, ms: number };
  if (kind === 'status' && Number.isInteger(number) && number >= 200 && number <= 599) return { kind, status: number };
  if (argument === undefined && ['answer', 'upgrade', 'reset', 'endless', 'deep-json', 'huge', 'silent'].includes(kind)) return { kind } as Behaviour;
  throw new Error(`unknown fault behaviour ${JSON.stringify(spec)}`);
}

export class FaultAdmin {
  private readonly callLog: MutableCall[] = [];
  private readonly queues = new Map<string, Behaviour[]>();
  private chooser: Chooser | undefined;
  private readonly clock: Pick<Clock, 'now' | 'wallNow'>;
  private wallOffsetMs = 0;
  private current!: EnvoyProcess;
  private processCount = 0;
  private server: net.Server | undefined;
  private boundPort = 0;
  private closed = false;

  private constructor(private readonly options: FaultAdminOptions) {
    this.clock = options.clock ?? systemClock;
    this.newProcess(options, Object.keys(options.listeners ?? { ingress: 0 }));
    for (const [name, open] of Object.entries(options.listeners ?? { ingress: 0 })) this.current.connections.set(name, open);
  }

  static async start(options: FaultAdminOptions = {}): Promise<FaultAdmin> {
    const admin = new FaultAdmin(options);
    await admin.listen(options.port ?? 0);
    return admin;
  }

  get port(): number {
    return this.boundPort;
  }

  /** What the sidecar's --admin-address names: the host, or `unix:<path>` in Unix-socket mode. */
  get adminAddress(): string {
    return this.options.socketPath === undefined ? this.host : `unix:${this.options.socketPath}`;
  }

  get host(): string {
    return this.options.host ?? '127.0.0.1';
  }

  get calls(): readonly FaultCall[] {
    return this.callLog;
  }

  get process(): ProcessView {
    const p = this.current;
    return {
      id: p.id, state: this.stateOf(p), healthCheckFailed: p.healthCheckFailed, listenersDrained: p.drained, restartEpoch: p.restartEpoch,
      uptimeSeconds: this.uptimeSince(p.startWallMs), adminConnectionsTotal: p.adminTotal, adminConnectionsActive: p.adminActive,
      connections: Object.fromEntries(p.connections), running: p.alive,
    };
  }

  /** A hot restart's parent while it lives (see `hotRestart`), else undefined. */
  get parentProcess(): { readonly id: number; readonly restartEpoch: number; readonly connections: Readonly<Record<string, number>> } | undefined {
    const parent = this.current.parent;
    return parent === undefined ? undefined : { id: parent.id, restartEpoch: parent.restartEpoch, connections: Object.fromEntries(parent.connections) };
  }

  /** Sets a listener's open connections (adds the listener if new). */
  setConnections(listener: string, open: number): void {
    this.current.connections.set(listener, open);
  }

  /**
   * Sets the open connections of a hot restart parent's listener, if a parent lives: it may only lose them (it was
   * told to drain and stopped accepting: HotRestartingParent drainListeners), so a higher count is ignored.
   */
  setParentConnections(listener: string, open: number): void {
    const parent = this.current.parent;
    if (parent === undefined) return;
    parent.connections.set(listener, Math.min(open, parent.connections.get(listener) ?? 0));
  }

  /** Queues behaviours for the next calls to `path` ('*': any path without a queue of its own). */
  script(path: string, ...behaviours: BehaviourSpec[]): void {
    this.queues.set(path, [...(this.queues.get(path) ?? []), ...behaviours.map(parseBehaviour)]);
  }

  /** Decides calls that no queue decides; undefined removes the chooser. */
  chooseWith(chooser: Chooser | undefined): void {
    this.chooser = chooser;
  }

  /** Steps the process's wall clock (negative: back): uptimes move, nothing else does. */
  stepWallClock(ms: number): void {
    this.wallOffsetMs += ms;
  }

  finishInitializing(): void {
    this.current.initialized = true;
  }

  /** A new process on the same listening socket: the old one's connections are cut, its pending effects withheld. */
  replaceProcess(options: ProcessOptions = {}): void {
    this.exitProcesses();
    this.newProcess(options);
  }

  /**
   * Envoy's hot restart (docs/root/intro/arch_overview/operations/hot_restart.rst; source/server/hot_restarting_child.cc,
   * hot_restarting_parent.cc; src/emulator/hot-restart.ts for the emulator's version): a child of the next restart
   * epoch asks the parent to shut its admin down (InstanceImpl::shutdownAdmin closes the admin LISTEN socket only:
   * the admin connections it accepted, the sidecar's witness among them, stay open until it exits), binds the admin
   * address, and tells the parent to drain its listeners (it stops accepting; its open connections stay). The
   * child's stats merge the parent's (source/common/stats/stat_merger.cc: listener gauges Accumulate), and
   * `server.parent_connections` is the parent's open connections (InstanceBase::updateServerStats). Merges are
   * taken as instant here; Envoy's happen at each stats flush, and a draining parent only loses connections, so a
   * merge that lags shows more, never fewer. The model keeps at most two processes: a parent still alive exits
   * first. The parent exits on `parentExit()` (`--parent-shutdown-time-s`: the child terminates it).
   */
  async hotRestart(options: Omit<ProcessOptions, 'restartEpoch'> = {}): Promise<void> {
    const parent = this.current;
    if (!parent.alive) throw new Error('hotRestart: no process runs to be the parent');
    this.parentExit();
    await this.closeListenSocket();
    this.newProcess({ ...options, restartEpoch: parent.restartEpoch + 1 });
    parent.drained = true;
    this.current.parent = parent;
    await this.listen(this.boundPort);
  }

  /** The hot restart parent exits (terminated by the child): every socket it held closes, its connections with them. */
  parentExit(): void {
    const parent = this.current.parent;
    if (parent === undefined) return;
    this.current.parent = undefined;
    this.exit(parent);
  }

  /**
   * The admin address changes while the process runs, and the process holds every connection it has. Over a Unix
   * socket: the path is unlinked ('unlink'), or replaced by a regular file or a directory (a tmp cleaner, a volume
   * remounted, someone's mistake); the process still listens on the unlinked socket, which nothing can reach by
   * name any more. Over TCP, the closest: the admin listen socket closes and the process runs on (what
   * InstanceImpl::shutdownAdmin does to a hot restart parent): the port refuses, accepted connections stay open.
   */
  async changeSocketPath(change: 'unlink' | 'file' | 'directory'): Promise<void> {
    const path = this.options.socketPath;
    if (path === undefined) return this.closeListenSocket();
    rmSync(path, { force: true, recursive: true });
    if (change === 'file') writeFileSync(path, 'not a socket\n');
    if (change === 'directory') mkdirSync(path);
  }

  /**
   * `POST /reset_counters` as StatsHandler::handlerResetCounters does it, to the process running: every counter to 0
   * (the admin counter, the process's mark, included), gauges and connections untouched. The same process goes on.
   */
  resetCounters(): void {
    this.current.adminTotal = 0;
  }

  /** The process exits (and a hot restart parent with it): the port refuses, open connections are cut. */
  async stop(): Promise<void> {
    this.exitProcesses();
    await this.closeListenSocket();
  }

  /** A new process listening again on the same port (after `stop()` or `/quitquitquit`). */
  async restart(options: ProcessOptions = {}): Promise<void> {
    await this.stop();
    this.newProcess(options);
    await this.listen(this.boundPort);
  }

  /** Stops for good: every socket destroyed, every timer cleared. Idempotent. */
  async close(): Promise<void> {
    this.closed = true;
    await this.stop();
  }

  // --- the process --------------------------------------------------------------------------------

  private newProcess(options: ProcessOptions, listeners: Iterable<string> = this.current.connections.keys()): void {
    const start = this.wallNow() - (options.uptimeMs ?? 0);
    const restartEpoch = options.restartEpoch ?? 0;
    // A hot restart (epoch above 0) carries uptime_all_epochs on; a container restart starts it again.
    const allEpochsStart = restartEpoch > 0 && this.processCount > 0 ? this.current.allEpochsStartWallMs : start;
    this.processCount += 1;
    const excluded = options.statsExcluded === undefined ? this.options.statsExcluded : (options.statsExcluded ?? undefined);
    this.current = {
      id: this.processCount, alive: true, initialized: options.initializing !== true, healthCheckFailed: false, drained: false,
      restartEpoch, startWallMs: start, allEpochsStartWallMs: allEpochsStart, adminTotal: 0, adminActive: 0,
      connections: new Map([...listeners].map((name) => [name, 0])), sockets: new Set(), timers: new Set(), statsExcluded: excluded, parent: undefined,
    };
  }

  /** The process running exits, and its hot restart parent if one lives. */
  private exitProcesses(): void {
    this.parentExit();
    this.exit(this.current);
  }

  /** A process exits: the kernel closes every socket it held; calls whose effect was pending never take effect. */
  private exit(envoy: EnvoyProcess): void {
    envoy.alive = false;
    for (const timer of envoy.timers) clearTimeout(timer);
    envoy.timers.clear();
    for (const socket of envoy.sockets) socket.destroy();
    envoy.sockets.clear();
    for (const call of this.callLog) if (call.effect === 'pending' && call.processId === envoy.id) call.effect = 'withheld';
  }

  private wallNow(): number {
    return this.clock.wallNow() + this.wallOffsetMs;
  }

  private uptimeSince(startWallMs: number): number {
    return Math.trunc((this.wallNow() - startWallMs) / 1000) || 0;
  }

  private stateOf(envoy: EnvoyProcess): FaultServerState {
    if (!envoy.initialized) return 'PRE_INITIALIZING';
    return envoy.healthCheckFailed ? 'DRAINING' : 'LIVE';
  }

  // --- sockets --------------------------------------------------------------------------------------

  private async listen(port: number): Promise<void> {
    if (this.closed) throw new Error('FaultAdmin is closed');
    const server = net.createServer((socket) => this.accept(socket));
    const path = this.options.socketPath;
    if (path !== undefined) rmSync(path, { force: true, recursive: true });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      if (path === undefined) server.listen(port, this.host, () => resolve());
      else server.listen(path, () => resolve());
    });
    this.server = server;
    if (path === undefined) this.boundPort = (server.address() as net.AddressInfo).port;
  }

  /**
   * Closes the admin listen socket only: accepted connections stay with the processes holding them. Not awaiting
   * the server's 'close' event, which Node emits only once every accepted connection has ended: a witness held
   * open by a live process would hold it forever. The listening handle itself is closed at once (and its Unix
   * socket path unlinked by libuv), so the address is free for a successor from the next turn of the loop.
   */
  private async closeListenSocket(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    if (server === undefined) return;
    server.close();
    await new Promise((resolve) => setImmediate(resolve));
  }

  private accept(socket: net.Socket): void {
    const envoy = this.current;
    if (!envoy.alive) return void socket.destroy();
    envoy.adminTotal += 1;
    envoy.adminActive += 1;
    envoy.sockets.add(socket);
    socket.on('error', () => undefined);
    socket.once('close', () => {
      envoy.adminActive -= 1;
      envoy.sockets.delete(socket);
    });
    let head = '';
    const onData = (chunk: Buffer): void => {
      head += chunk.toString('latin1');
      const end = head.indexOf('\r\n\r\n');
      if (end === -1 && head.length <= MAX_REQUEST_HEAD) return;
      socket.off('data', onData);
      if (end === -1) return void socket.destroy();
      this.receive(socket, envoy, head.slice(0, end));
    };
    socket.on('data', onData);
  }

  /** Runs `action` after `ms`, unless `envoy` exits first. */
  private later(envoy: EnvoyProcess, ms: number, action: () => void): void {
    const timer = setTimeout(() => {
      envoy.timers.delete(timer);
      action();
    }, ms);
    envoy.timers.add(timer);
  }

  // --- calls ----------------------------------------------------------------------------------------

  private receive(socket: net.Socket, envoy: EnvoyProcess, head: string): void {
    const [method = '', target = '/'] = (head.split('\r\n')[0] ?? '').split(' ');
    const url = URL.parse(target, 'http://admin');
    if (url === null) return void socket.destroy();
    const seq = this.callLog.length + 1;
    const query = url.search.slice(1);
    const behaviour = this.behaviourFor({ method, path: url.pathname, query, seq });
    const call: MutableCall = { seq, method, path: url.pathname, query, processId: envoy.id, behaviour, effect: 'none', receivedAt: this.clock.now(), answeredAt: undefined };
    this.callLog.push(call);
    const answer = this.route(envoy, method, url, call);
    const takeEffect = (): void => {
      if (answer.effect === undefined) return;
      if (!envoy.alive) return void (call.effect = 'withheld');
      answer.effect(envoy);
      call.effect = 'applied';
    };
    if (answer.effect !== undefined) call.effect = 'withheld';
    // Envoy exits once its answer to /quitquitquit is out: here, once that connection has closed.
    if (url.pathname === '/quitquitquit') socket.once('close', () => void this.exitAfter(call, envoy));
    this.perform(envoy, socket, call, answer, takeEffect);
  }

  private behaviourFor(call: Parameters<Chooser>[0]): Behaviour {
    for (const key of [call.path, '*']) {
      const next = this.queues.get(key)?.shift();
      if (next !== undefined) return next;
    }
    return parseBehaviour(this.chooser?.(call) ?? 'answer');
  }

  private perform(envoy: EnvoyProcess, socket: net.Socket, call: MutableCall, answer: Answer, takeEffect: () => void): void {
    const b = call.behaviour;
    const write = (text: string, end = false): void => {
      if (socket.destroyed) return;
      call.answeredAt ??= this.clock.now();
      if (end) socket.end(text);
      else socket.write(text);
    };
    switch (b.kind) {
      case 'answer':
        takeEffect();
        return write(render(answer.status, answer.type, answer.body()), true);
      case 'delay':
        if (b.effect === 'on-answer') call.effect = answer.effect === undefined ? 'none' : 'pending';
        else takeEffect();
        // Envoy's handler runs whether or not the client is still there; the answer needs the client.
        return this.later(envoy, b.ms, () => {
          if (call.effect === 'pending') takeEffect();
          write(render(answer.status, answer.type, answer.body()), true);
        });
      case 'status':
        return write(render(b.status, 'text/plain', `fault-admin: scripted HTTP ${b.status}\n`), true);
      case 'upgrade':
        return write(`HTTP/1.1 101 ${REASONS[101]}\r\nconnection: upgrade\r\nupgrade: websocket\r\n\r\n`);
      case 'reset': {
        takeEffect();
        const body = answer.body();
        write(render(answer.status, answer.type, body).slice(0, -Math.ceil(body.length / 2) || undefined));
        // A moment for the part to reach the client: a reset can discard data not yet read.
        // A Unix socket has no reset (Node throws ERR_INVALID_HANDLE_TYPE): the closest is an abrupt close.
        return this.later(envoy, RESET_AFTER_MS, () => void (socket.destroyed || (this.options.socketPath === undefined ? socket.resetAndDestroy() : socket.destroy())));
      }
      case 'endless':
        takeEffect();
        write(`HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n{"stats":[`);
        return this.trickle(envoy, socket);
      case 'deep-json':
        return write(render(200, 'application/json', deepJson(b.depth ?? 1_000_000)), true);
      case 'huge':
        return this.sendHuge(socket, b.bytes ?? 16 * 1024 * 1024, b.declareLength === true, write);
      case 'silent':
        return;
    }
  }

  private trickle(envoy: EnvoyProcess, socket: net.Socket): void {
    this.later(envoy, TRICKLE_MS, () => {
      if (socket.destroyed) return;
      socket.write(' ');
      this.trickle(envoy, socket);
    });
  }

  /** A valid-looking stats body of `bytes`, written as fast as the client reads it (backpressure respected). */
  private sendHuge(socket: net.Socket, bytes: number, declareLength: boolean, write: (text: string) => void): void {
    const length = declareLength ? `content-length: ${bytes}\r\n` : '';
    write(`HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n${length}connection: close\r\n\r\n`);
    const chunk = Buffer.from('{"name":"listener.huge.downstream_cx_active","value":0},'.repeat(1024));
    let left = bytes;
    const pump = (): void => {
      while (left > 0 && !socket.destroyed) {
        const piece = left >= chunk.length ? chunk : chunk.subarray(0, left);
        left -= piece.length;
        if (!socket.write(piece)) return void socket.once('drain', pump);
      }
      if (!socket.destroyed) socket.end();
    };
    pump();
  }

  private async exitAfter(call: FaultCall, envoy: EnvoyProcess): Promise<void> {
    if (call.effect === 'applied' && envoy === this.current && envoy.alive) await this.stop();
  }

  // --- endpoints ------------------------------------------------------------------------------------

  private route(envoy: EnvoyProcess, method: string, url: URL, call: MutableCall): Answer {
    const path = url.pathname;
    const text = (status: number, body: string): Answer => ({ status, type: 'text/plain', body: () => body });
    if (MUTATIONS.has(path)) {
      if (method !== 'POST') return text(405, `Method ${method} not allowed, POST required.`);
      return { ...text(200, 'OK\n'), effect: mutation(path) };
    }
    switch (path) {
      case '/ready':
        return { status: this.stateOf(envoy) === 'LIVE' ? 200 : 503, type: 'text/plain', body: () => `${this.stateOf(envoy)}\n` };
      case '/server_info':
        return { status: 200, type: 'application/json', body: () => this.serverInfo(envoy) };
      case '/stats':
        return this.stats(envoy, url.searchParams, call);
      default:
        return text(404, 'invalid path. admin commands are:\n  /ready\n  /server_info\n  /stats\n  /healthcheck/fail\n  /healthcheck/ok\n  /drain_listeners\n  /quitquitquit\n');
    }
  }

  private serverInfo(p: EnvoyProcess): string {
    const info = {
      version: 'fault-admin/1.36.2/Clean/RELEASE/BoringSSL', state: this.stateOf(p),
      uptime_current_epoch: `${this.uptimeSince(p.startWallMs)}s`, uptime_all_epochs: `${this.uptimeSince(p.allEpochsStartWallMs)}s`,
      hot_restart_version: '11.104', command_line_options: { restart_epoch: p.restartEpoch, concurrency: this.workers, drain_strategy: 'Gradual', drain_time: '600s' },
    };
    return `${JSON.stringify(info, null, 2)}\n`;
  }

  private stats(envoy: EnvoyProcess, params: URLSearchParams, call: MutableCall): Answer {
    let filter: RegExp | undefined;
    try {
      filter = new RegExp(params.get('filter') ?? '');
    } catch {
      return { status: 400, type: 'text/plain', body: () => 'Invalid re2 regex\n' };
    }
    const json = params.get('format') === 'json';
    const body = (): string => {
      const shown = mergedConnections(envoy);
      call.rendered = {
        adminConnectionsTotal: envoy.adminTotal,
        connections: Object.fromEntries([...shown].filter(([name, open]) => open > 0 || name === 'ingress')),
        held: Object.fromEntries([envoy, envoy.parent].flatMap((p) => (p?.alive === true ? [[p.id, sum(p.connections.values())]] : []))),
      };
      const excluded = envoy.statsExcluded;
      const stats = this.statValues(envoy, shown).filter(([name]) => filter.test(name) && (excluded === undefined || !excluded.test(name)));
      if (!json) return stats.map(([name, value]) => `${name}: ${value}\n`).join('');
      return `{"stats":[${stats.map(([name, value]) => `\n{"name":${JSON.stringify(name)},"value":${value}}`).join(',')}]}\n`;
    };
    return { status: 200, type: json ? 'application/json' : 'text/plain', body };
  }

  private get workers(): number {
    return Math.max(1, this.options.workers ?? 2);
  }

  /**
   * `shown`: the listener gauges as merged (mergedConnections). `server.hot_restart_epoch` and
   * `server.parent_connections` are the process's own (server gauges are not merged: InstanceBase::updateServerStats
   * sets them), 0 when no parent lives.
   */
  private statValues(p: EnvoyProcess, shown: ReadonlyMap<string, number>): Array<[string, number]> {
    const values: Array<[string, number]> = [
      ['listener.admin.downstream_cx_active', p.adminActive],
      ['listener.admin.downstream_cx_total', p.adminTotal],
      ['listener.admin.main_thread.downstream_cx_active', p.adminActive],
      ['server.hot_restart_epoch', p.restartEpoch],
      ['server.live', p.healthCheckFailed ? 0 : 1],
      ['server.parent_connections', p.parent?.alive === true ? sum(p.parent.connections.values()) : 0],
      ['server.state', SERVER_STATE_ENUM[this.stateOf(p)]],
      ['server.uptime', this.uptimeSince(p.startWallMs)],
    ];
    for (const [name, open] of shown) {
      values.push([`listener.${name}.downstream_cx_active`, open]);
      for (let worker = 0; worker < this.workers; worker += 1) {
        const share = Math.floor(open / this.workers) + (worker < open % this.workers ? 1 : 0);
        values.push([`listener.${name}.worker_${worker}.downstream_cx_active`, share]);
      }
    }
    // Envoy sorts its stats by name. Sorting thousands of names at every call would starve the event loop this
    // fake shares with the sidecar under test: the order is cached per set of names (listeners are only added).
    const order = this.orderOf(values.map(([name]) => name));
    return order.map((index) => values[index]!);
  }

  private sortedOrder: { readonly key: string; readonly order: readonly number[] } | undefined;

  private orderOf(names: readonly string[]): readonly number[] {
    const key = `${names.length}:${names[0]}:${names.at(-1)}`;
    if (this.sortedOrder?.key === key) return this.sortedOrder.order;
    const order = names.map((_, index) => index).sort((a, b) => (names[a]! < names[b]! ? -1 : names[a]! > names[b]! ? 1 : 0));
    this.sortedOrder = { key, order };
    return order;
  }
}

/** A process's listener gauges as its stats show them: its own, plus a live hot restart parent's (StatMerger: Accumulate). */
function mergedConnections(envoy: EnvoyProcess): Map<string, number> {
  const shown = new Map(envoy.connections);
  const parent = envoy.parent;
  if (parent?.alive === true) for (const [name, open] of parent.connections) shown.set(name, (shown.get(name) ?? 0) + open);
  return shown;
}

function sum(values: Iterable<number>): number {
  let total = 0;
  for (const value of values) total += value;
  return total;
}

/** What a mutation does to its process; /quitquitquit's exit follows its answer (see `exitAfter`). */
function mutation(path: string): (envoy: EnvoyProcess) => void {
  switch (path) {
    case '/healthcheck/fail':
      return (envoy) => void (envoy.healthCheckFailed = true);
    case '/healthcheck/ok':
      return (envoy) => void (envoy.healthCheckFailed = false);
    case '/drain_listeners':
      // Its query (graceful, inboundonly…) is in the call's log; either way this process's drain cannot be undone.
      return (envoy) => void (envoy.drained = true);
    default:
      return () => undefined;
  }
}

function render(status: number, type: string, body: string): string {
  const reason = REASONS[status] ?? 'Unknown';
  return `HTTP/1.1 ${status} ${reason}\r\ncontent-type: ${type}\r\ncontent-length: ${Buffer.byteLength(body)}\r\nserver: envoy\r\nconnection: close\r\n\r\n${body}`;
}

const deepCache = new Map<number, string>();

/** `{"stats":[[[…]]]}`, `depth` arrays deep: 2 bytes per level. */
function deepJson(depth: number): string {
  let body = deepCache.get(depth);
  if (body === undefined) {
    body = `{"stats":${'['.repeat(depth)}${']'.repeat(depth)}}`;
    deepCache.set(depth, body);
  }
  return body;
}
