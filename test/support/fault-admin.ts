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
 * Fidelity, per envoy-emulator.ts's notes and shared/reference/envoy-admin.md:
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
 *   other endpoints (404), INITIALIZING, drain timing and drain close (see envoy-emulator.ts).
 *
 * When a call takes effect (`FaultCall.effect`): a mutation takes effect when Envoy's handler runs, which is
 * when its answer is decided. 'answer', 'reset' and 'endless' run the handler (the answer was being sent):
 * 'applied'. 'delay' runs it on receipt and answers late, the overloaded-network case where a timed-out call
 * still acted; `{ kind: 'delay', effect: 'on-answer' }` runs it when the answer is due, whether or not the
 * client still waits (a stuck main thread): 'pending' until then, 'withheld' if the process goes first. 'status', 'upgrade', 'deep-json', 'huge' and
 * 'silent' are something else answering or nothing answering: 'withheld'. A refused call is never seen, so
 * never logged. Reads and rejected requests (404, 405, 400) have effect 'none'.
 */
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
  /** For a `/stats` answer that was rendered: the admin counter (the process's mark) and the counts it showed. */
  readonly rendered?: { readonly adminConnectionsTotal: number; readonly connections: Readonly<Record<string, number>> };
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
}

export interface FaultAdminOptions extends ProcessOptions {
  readonly host?: string;
  /** Default 0: a free port, kept by `restart()`. */
  readonly port?: number;
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
  private readonly connections = new Map<string, number>();
  private readonly sockets = new Set<net.Socket>();
  /** Delays, trickles and resets: all cleared when the process goes. */
  private readonly timers = new Set<NodeJS.Timeout>();
  private readonly clock: Pick<Clock, 'now' | 'wallNow'>;
  private wallOffsetMs = 0;
  private current!: EnvoyProcess;
  private processCount = 0;
  private server: net.Server | undefined;
  private boundPort = 0;
  private closed = false;

  private constructor(private readonly options: FaultAdminOptions) {
    this.clock = options.clock ?? systemClock;
    this.newProcess(options);
    for (const [name, open] of Object.entries(options.listeners ?? { ingress: 0 })) this.connections.set(name, open);
  }

  static async start(options: FaultAdminOptions = {}): Promise<FaultAdmin> {
    const admin = new FaultAdmin(options);
    await admin.listen(options.port ?? 0);
    return admin;
  }

  get port(): number {
    return this.boundPort;
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
      connections: Object.fromEntries(this.connections), running: this.server !== undefined,
    };
  }

  /** Sets a listener's open connections (adds the listener if new). */
  setConnections(listener: string, open: number): void {
    this.connections.set(listener, open);
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
    this.dropConnections();
    this.newProcess(options);
  }

  /**
   * `POST /reset_counters` as StatsHandler::handlerResetCounters does it, to the process running: every counter to 0
   * (the admin counter, the process's mark, included), gauges and connections untouched. The same process goes on.
   */
  resetCounters(): void {
    this.current.adminTotal = 0;
  }

  /** The process exits: the port refuses, open connections are cut. */
  async stop(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    this.dropConnections();
    if (server !== undefined) await new Promise<void>((resolve) => server.close(() => resolve()));
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

  private newProcess(options: ProcessOptions): void {
    const start = this.wallNow() - (options.uptimeMs ?? 0);
    const restartEpoch = options.restartEpoch ?? 0;
    // A hot restart (epoch above 0) carries uptime_all_epochs on; a container restart starts it again.
    const allEpochsStart = restartEpoch > 0 && this.processCount > 0 ? this.current.allEpochsStartWallMs : start;
    this.processCount += 1;
    this.current = {
      id: this.processCount, initialized: options.initializing !== true, healthCheckFailed: false, drained: false,
      restartEpoch, startWallMs: start, allEpochsStartWallMs: allEpochsStart, adminTotal: 0, adminActive: 0,
    };
    for (const name of this.connections.keys()) this.connections.set(name, 0);
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
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, this.host, () => resolve());
    });
    this.server = server;
    this.boundPort = (server.address() as net.AddressInfo).port;
  }

  private accept(socket: net.Socket): void {
    const envoy = this.current;
    envoy.adminTotal += 1;
    envoy.adminActive += 1;
    this.sockets.add(socket);
    socket.on('error', () => undefined);
    socket.once('close', () => {
      envoy.adminActive -= 1;
      this.sockets.delete(socket);
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

  /** Cuts every connection; calls whose effect was pending never take effect. */
  private dropConnections(): void {
    for (const timer of this.timers) clearTimeout(timer);
    this.timers.clear();
    for (const socket of this.sockets) socket.destroy();
    this.sockets.clear();
    for (const call of this.callLog) if (call.effect === 'pending') call.effect = 'withheld';
  }

  /** Runs `action` after `ms`, unless the process goes first. */
  private later(ms: number, action: () => void): void {
    const timer = setTimeout(() => {
      this.timers.delete(timer);
      action();
    }, ms);
    this.timers.add(timer);
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
    const answer = this.route(method, url, call);
    const takeEffect = (): void => {
      if (answer.effect === undefined) return;
      if (envoy !== this.current || this.server === undefined) return void (call.effect = 'withheld');
      answer.effect(envoy);
      call.effect = 'applied';
    };
    if (answer.effect !== undefined) call.effect = 'withheld';
    // Envoy exits once its answer to /quitquitquit is out: here, once that connection has closed.
    if (url.pathname === '/quitquitquit') socket.once('close', () => void this.exitAfter(call, envoy));
    this.perform(socket, call, answer, takeEffect);
  }

  private behaviourFor(call: Parameters<Chooser>[0]): Behaviour {
    for (const key of [call.path, '*']) {
      const next = this.queues.get(key)?.shift();
      if (next !== undefined) return next;
    }
    return parseBehaviour(this.chooser?.(call) ?? 'answer');
  }

  private perform(socket: net.Socket, call: MutableCall, answer: Answer, takeEffect: () => void): void {
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
        return this.later(b.ms, () => {
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
        return this.later(RESET_AFTER_MS, () => void (socket.destroyed || socket.resetAndDestroy()));
      }
      case 'endless':
        takeEffect();
        write(`HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n{"stats":[`);
        return this.trickle(socket);
      case 'deep-json':
        return write(render(200, 'application/json', deepJson(b.depth ?? 1_000_000)), true);
      case 'huge':
        return this.sendHuge(socket, b.bytes ?? 16 * 1024 * 1024, b.declareLength === true, write);
      case 'silent':
        return;
    }
  }

  private trickle(socket: net.Socket): void {
    this.later(TRICKLE_MS, () => {
      if (socket.destroyed) return;
      socket.write(' ');
      this.trickle(socket);
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
    if (call.effect === 'applied' && envoy === this.current && this.server !== undefined) await this.stop();
  }

  // --- endpoints ------------------------------------------------------------------------------------

  private route(method: string, url: URL, call: MutableCall): Answer {
    const path = url.pathname;
    const text = (status: number, body: string): Answer => ({ status, type: 'text/plain', body: () => body });
    if (MUTATIONS.has(path)) {
      if (method !== 'POST') return text(405, `Method ${method} not allowed, POST required.`);
      return { ...text(200, 'OK\n'), effect: mutation(path) };
    }
    switch (path) {
      case '/ready':
        return { status: this.stateOf(this.current) === 'LIVE' ? 200 : 503, type: 'text/plain', body: () => `${this.stateOf(this.current)}\n` };
      case '/server_info':
        return { status: 200, type: 'application/json', body: () => this.serverInfo() };
      case '/stats':
        return this.stats(url.searchParams, call);
      default:
        return text(404, 'invalid path. admin commands are:\n  /ready\n  /server_info\n  /stats\n  /healthcheck/fail\n  /healthcheck/ok\n  /drain_listeners\n  /quitquitquit\n');
    }
  }

  private serverInfo(): string {
    const p = this.current;
    const info = {
      version: 'fault-admin/1.36.2/Clean/RELEASE/BoringSSL', state: this.stateOf(p),
      uptime_current_epoch: `${this.uptimeSince(p.startWallMs)}s`, uptime_all_epochs: `${this.uptimeSince(p.allEpochsStartWallMs)}s`,
      hot_restart_version: '11.104', command_line_options: { restart_epoch: p.restartEpoch, concurrency: this.workers, drain_strategy: 'Gradual', drain_time: '600s' },
    };
    return `${JSON.stringify(info, null, 2)}\n`;
  }

  private stats(params: URLSearchParams, call: MutableCall): Answer {
    let filter: RegExp | undefined;
    try {
      filter = new RegExp(params.get('filter') ?? '');
    } catch {
      return { status: 400, type: 'text/plain', body: () => 'Invalid re2 regex\n' };
    }
    const json = params.get('format') === 'json';
    const body = (): string => {
      call.rendered = { adminConnectionsTotal: this.current.adminTotal, connections: Object.fromEntries(this.connections) };
      const excluded = this.options.statsExcluded;
      const stats = this.statValues().filter(([name]) => filter.test(name) && (excluded === undefined || !excluded.test(name)));
      if (!json) return stats.map(([name, value]) => `${name}: ${value}\n`).join('');
      return `{"stats":[${stats.map(([name, value]) => `\n{"name":${JSON.stringify(name)},"value":${value}}`).join(',')}]}\n`;
    };
    return { status: 200, type: json ? 'application/json' : 'text/plain', body };
  }

  private get workers(): number {
    return Math.max(1, this.options.workers ?? 2);
  }

  private statValues(): Array<[string, number]> {
    const p = this.current;
    const values: Array<[string, number]> = [
      ['listener.admin.downstream_cx_active', p.adminActive],
      ['listener.admin.downstream_cx_total', p.adminTotal],
      ['listener.admin.main_thread.downstream_cx_active', p.adminActive],
      ['server.live', p.healthCheckFailed ? 0 : 1],
      ['server.state', SERVER_STATE_ENUM[this.stateOf(p)]],
      ['server.uptime', this.uptimeSince(p.startWallMs)],
    ];
    for (const [name, open] of this.connections) {
      values.push([`listener.${name}.downstream_cx_active`, open]);
      for (let worker = 0; worker < this.workers; worker += 1) {
        const share = Math.floor(open / this.workers) + (worker < open % this.workers ? 1 : 0);
        values.push([`listener.${name}.worker_${worker}.downstream_cx_active`, share]);
      }
    }
    return values.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  }
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
