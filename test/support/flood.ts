/**
 * Sustained floods of well-formed HTTP/1.1 requests at a fixed rate for a fixed time, for the sidecar's
 * memory under attack: new connections each sending one request and reading its answer, or keep-alive
 * connections each pipelining a few requests at a time and reading every answer (a scraper gone wild).
 * Both are bounded: a rate ceiling (never more than `perSecond` requests started by any instant, so a slow
 * server is not answered with a burst), a cap on connections open at once, a duration, and a deadline on
 * each answer.
 *
 * Run in a child process (`spawnFlood`, through flood-cli.ts), so that the test process's event loop stays
 * free to time the kubelet's calls and sample the sidecar's memory.
 */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import net from 'node:net';
import { performance } from 'node:perf_hooks';
import { createInterface } from 'node:readline';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseWebhookConfig } from '../../src/config/webhook.js';
import { residentMemory, timedCall } from './abuse.js';
import { cleanEnvironment, REPO_ROOT, startNode } from './process.js';

export interface FloodSpec {
  /**
   * `new-connections`: one request per connection, closed once answered; `keep-alive`: `sockets` reused
   * connections; `unread-pipelines`: new connections, each writing its `pipelined` requests at once and never
   * reading, dropped by the client `holdMs` after it connected (`perSecond` and `dropped` then count connections).
   */
  readonly kind: 'new-connections' | 'keep-alive' | 'unread-pipelines';
  readonly port: number;
  readonly host?: string;
  /** Requests started per second at most (the ceiling is kept from the start, never caught up in a burst above it). */
  readonly perSecond: number;
  readonly seconds: number;
  /** Request paths, taken in turn. */
  readonly paths: readonly string[];
  /** new-connections, unread-pipelines: connections open at once at most. Default 64. */
  readonly concurrency?: number;
  /** keep-alive: connections. Default 8. */
  readonly sockets?: number;
  /** keep-alive: requests sent and not yet answered on one connection at most (the sidecar allows 4). Default 4. */
  readonly depth?: number;
  /** An answer not complete within this long counts as an error and its connection is dropped. Default 5 s. */
  readonly answerWithinMs?: number;
  /**
   * unread-pipelines: the requests each connection writes (the paths in turn), connection after connection taking
   * these counts in turn: [4, 400] alternates connections within the sidecar's bound of 4 in flight and past it. Default [4].
   */
  readonly pipelined?: readonly number[];
  /** unread-pipelines: how long a connection is held before the client drops it (a reset, its answers unread). Default 1 s. */
  readonly holdMs?: number;
}

export interface FloodResult {
  readonly kind: FloodSpec['kind'];
  /** Requests sent (unread-pipelines: written, never answered as far as the client knows). */
  readonly sent: number;
  /** unread-pipelines: connections opened. */
  readonly connections?: number;
  /** Due by the rate but not sent, every connection being busy: the server (or this client) kept up with less. */
  readonly dropped: number;
  readonly answered: number;
  /** Answers by status code. */
  readonly statuses: Readonly<Record<string, number>>;
  /** Connections refused, reset or closed before their answers, and answers past answerWithinMs. */
  readonly errors: number;
  readonly seconds: number;
  /** Answers per second over the flood. */
  readonly perSecond: number;
}

/** How often the pacer looks at the clock: 200 times a second, so that 5,000 a second go out 25 at a time. */
const TICK_MS = 5;

class Tally {
  sent = 0;
  dropped = 0;
  answered = 0;
  errors = 0;
  readonly statuses: Record<string, number> = {};
  answer(status: number): void {
    this.answered += 1;
    this.statuses[status] = (this.statuses[status] ?? 0) + 1;
  }
  result(kind: FloodSpec['kind'], startedAt: number): FloodResult {
    const seconds = (performance.now() - startedAt) / 1000;
    const { sent, dropped, answered, errors, statuses } = this;
    return { kind, sent, dropped, answered, statuses, errors, seconds, perSecond: answered / seconds };
  }
}

const requestHead = (path: string, host: string): string => `GET ${path} HTTP/1.1\r\nHost: ${host}\r\nUser-Agent: flood\r\n\r\n`;

/**
 * Reads answers with a Content-Length (the sidecar's all have one) off `socket`, calling `onAnswer` with each
 * status code. Latin-1: one character per byte, so Content-Length counts characters.
 */
function readAnswers(socket: net.Socket, onAnswer: (status: number) => void): void {
  let buffer = '';
  socket.setEncoding('latin1');
  socket.on('data', (chunk: string) => {
    buffer += chunk;
    for (;;) {
      const headEnd = buffer.indexOf('\r\n\r\n');
      if (headEnd === -1) return;
      const lengthMatch = /\r\ncontent-length:\s*(\d+)/i.exec(buffer.slice(0, headEnd));
      const end = headEnd + 4 + Number(lengthMatch?.[1] ?? 0);
      if (buffer.length < end) return;
      const status = Number(buffer.slice(9, 12));
      buffer = buffer.slice(end);
      onAnswer(status);
    }
  });
}

/** Calls `pump` every tick until `seconds` have passed, then waits (bounded) for `idle()`. */
async function paced(seconds: number, answerWithinMs: number, pump: (due: number) => void, idle: () => boolean): Promise<void> {
  const startedAt = performance.now();
  const deadline = startedAt + seconds * 1000;
  await new Promise<void>((resolve) => {
    const timer = setInterval(() => {
      const now = performance.now();
      if (now >= deadline) {
        clearInterval(timer);
        resolve();
        return;
      }
      pump(now - startedAt);
    }, TICK_MS);
  });
  const lastAnswerBy = performance.now() + answerWithinMs;
  while (!idle() && performance.now() < lastAnswerBy) await new Promise((resolve) => setTimeout(resolve, TICK_MS));
}

/** Requests due by `elapsedMs` at `perSecond`. */
const dueBy = (perSecond: number, elapsedMs: number): number => Math.floor((perSecond * elapsedMs) / 1000);

/** One request per connection: connect, send, read the answer, close; at most `concurrency` at once. */
export async function newConnectionFlood(spec: FloodSpec): Promise<FloodResult> {
  const { port, host = '127.0.0.1', perSecond, seconds, paths, concurrency = 64, answerWithinMs = 5_000 } = spec;
  const heads = paths.map((path) => requestHead(path, host));
  const tally = new Tally();
  let open = 0;
  const call = (head: string): void => {
    open += 1;
    let done = false;
    const socket = net.connect({ port, host });
    const finish = (status?: number): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      open -= 1;
      if (status === undefined) tally.errors += 1;
      else tally.answer(status);
      socket.destroy();
    };
    const timer = setTimeout(() => finish(), answerWithinMs);
    socket.setNoDelay(true);
    socket.once('connect', () => socket.write(head));
    readAnswers(socket, finish);
    socket.on('error', () => finish());
    socket.on('close', () => finish());
  };
  const startedAt = performance.now();
  await paced(
    seconds,
    answerWithinMs,
    (elapsedMs) => {
      const due = dueBy(perSecond, elapsedMs) - tally.dropped;
      while (tally.sent < due && open < concurrency) call(heads[tally.sent++ % heads.length]!);
      // Behind because every connection was busy: what was due is dropped, not sent later in a burst above the rate.
      tally.dropped += due - tally.sent;
    },
    () => open === 0,
  );
  return tally.result('new-connections', startedAt);
}

/** `sockets` keep-alive connections, each with at most `depth` requests unanswered; a connection cut is reopened. */
export async function keepAliveFlood(spec: FloodSpec): Promise<FloodResult> {
  const { port, host = '127.0.0.1', perSecond, seconds, paths, sockets: count = 8, depth = 4, answerWithinMs = 5_000 } = spec;
  const heads = paths.map((path) => requestHead(path, host));
  const tally = new Tally();
  interface Connection {
    socket: net.Socket;
    connected: boolean;
    unanswered: number;
    lastAnswerAt: number;
  }
  const open = (): Connection => {
    const socket = net.connect({ port, host });
    const connection: Connection = { socket, connected: false, unanswered: 0, lastAnswerAt: performance.now() };
    socket.setNoDelay(true);
    socket.once('connect', () => (connection.connected = true));
    readAnswers(socket, (status) => {
      connection.unanswered -= 1;
      connection.lastAnswerAt = performance.now();
      tally.answer(status);
    });
    socket.on('error', () => undefined);
    socket.on('close', () => {
      // Closed by the server (or past answerWithinMs): each unanswered request is an error, an idle connection cut one.
      if (!stopping) tally.errors += Math.max(1, connection.unanswered);
      connection.unanswered = 0;
      connection.connected = false;
    });
    return connection;
  };
  let stopping = false;
  const connections = Array.from({ length: count }, open);
  const startedAt = performance.now();
  await paced(
    seconds,
    answerWithinMs,
    (elapsedMs) => {
      const now = performance.now();
      for (const [index, connection] of connections.entries()) {
        if (connection.socket.destroyed) connections[index] = open();
        else if (connection.unanswered > 0 && now - connection.lastAnswerAt > answerWithinMs) connection.socket.destroy();
      }
      const due = dueBy(perSecond, elapsedMs) - tally.dropped;
      const batches = connections.map(() => '');
      let room = true;
      while (tally.sent < due && room) {
        room = false;
        for (const [index, connection] of connections.entries()) {
          if (tally.sent >= due) break;
          if (!connection.connected || connection.unanswered >= depth) continue;
          room = true;
          connection.unanswered += 1;
          batches[index] += heads[tally.sent % heads.length]!;
          tally.sent += 1;
        }
      }
      // Every connection full: what was due is dropped, not sent later in a burst above the rate.
      tally.dropped += due - tally.sent;
      for (const [index, batch] of batches.entries()) if (batch !== '') connections[index]!.socket.write(batch);
    },
    () => connections.every((connection) => connection.unanswered === 0),
  );
  stopping = true;
  for (const connection of connections) connection.socket.destroy();
  return tally.result('keep-alive', startedAt);
}

/**
 * Strangers who ask and never read: each connection writes its whole pipeline at once, reads nothing, and is
 * dropped by the client after holdMs, with at most `concurrency` open at once; `perSecond` connections a second.
 */
export async function unreadPipelineFlood(spec: FloodSpec): Promise<FloodResult> {
  const { port, host = '127.0.0.1', perSecond, seconds, paths, concurrency = 64, pipelined = [4], holdMs = 1_000 } = spec;
  const payloads = pipelined.map((count) => Buffer.from(Array.from({ length: count }, (_, index) => requestHead(paths[index % paths.length]!, host)).join('')));
  const tally = new Tally();
  let open = 0;
  let connections = 0;
  const call = (payload: Buffer, requests: number): void => {
    open += 1;
    connections += 1;
    tally.sent += requests;
    let done = false;
    const socket = net.connect({ port, host });
    socket.pause(); // never read: the answers stay in the kernel's buffers, then in the server's
    const finish = (): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      open -= 1;
      socket.destroy();
    };
    const timer = setTimeout(finish, holdMs);
    socket.once('connect', () => socket.write(payload));
    socket.on('error', () => {
      tally.errors += 1;
      finish();
    });
    socket.on('close', finish);
  };
  const startedAt = performance.now();
  let next = 0;
  await paced(
    seconds,
    holdMs,
    (elapsedMs) => {
      const due = dueBy(perSecond, elapsedMs) - tally.dropped;
      while (connections < due && open < concurrency) {
        const turn = next++ % payloads.length;
        call(payloads[turn]!, pipelined[turn]!);
      }
      tally.dropped += due - connections;
    },
    () => open === 0,
  );
  return { ...tally.result('unread-pipelines', startedAt), connections };
}

export function flood(spec: FloodSpec): Promise<FloodResult> {
  if (spec.kind === 'unread-pipelines') return unreadPipelineFlood(spec);
  return spec.kind === 'new-connections' ? newConnectionFlood(spec) : keepAliveFlood(spec);
}

const CLI = fileURLToPath(new URL('./flood-cli.ts', import.meta.url));

export interface FloodProcess {
  /** Resolves once the child has opened its first connections and starts the clock. */
  readonly started: Promise<void>;
  readonly result: Promise<FloodResult>;
  readonly pid: number;
  /** SIGKILL if still running; for t.after(). */
  kill(): void;
}

/** Runs `flood(spec)` in a child process (node --import tsx flood-cli.ts), killed if it overruns its time by 15 s. */
export function spawnFlood(spec: FloodSpec): FloodProcess {
  const child = spawn(process.execPath, ['--import', 'tsx', CLI, JSON.stringify(spec)], {
    cwd: REPO_ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: cleanEnvironment(),
    timeout: (spec.seconds + 15) * 1000,
    killSignal: 'SIGKILL',
  });
  let stderr = '';
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  const lines = createInterface({ input: child.stdout! });
  let markStarted: () => void = () => undefined;
  const started = new Promise<void>((resolve) => (markStarted = resolve));
  const result = new Promise<FloodResult>((resolve, reject) => {
    let last: FloodResult | undefined;
    lines.on('line', (line) => {
      const message = JSON.parse(line) as { event: 'started' } | { event: 'done'; result: FloodResult };
      if (message.event === 'started') markStarted();
      else last = message.result;
    });
    child.once('close', (code, signal) => {
      markStarted();
      if (last !== undefined && code === 0) resolve(last);
      else reject(new Error(`the flood exited with ${code ?? signal} before its result; stderr: ${stderr}`));
    });
  });
  // A test that fails before awaiting it must not leave an unhandled rejection behind.
  result.catch(() => undefined);
  return {
    started,
    result,
    pid: child.pid!,
    kill: () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    },
  };
}

export interface WatchOptions {
  /** Paths the kubelet calls during the flood, each on a new connection, one round every `probeEveryMs`. */
  readonly probePaths: readonly string[];
  readonly probeEveryMs?: number;
  /** Called once, halfway through the flood (the kubelet's preStop hook, say); its result is returned. */
  readonly midway?: () => Promise<unknown>;
  /** How often VmRSS is read. Default 20 ms. */
  readonly sampleEveryMs?: number;
}

export interface WatchedFlood<Midway> {
  readonly flood: FloodResult;
  /** VmRSS before the flood. */
  readonly restMiB: number;
  /** The highest VmRSS sampled during the flood, or the process's VmHWM if higher (which also sees between samples). */
  readonly peakMiB: number;
  readonly samples: number;
  /** Milliseconds of each call, by path. */
  readonly probes: ReadonlyMap<string, readonly number[]>;
  readonly midway: Midway | undefined;
}

/**
 * Floods `target` (see spawnFlood) while sampling its resident memory from /proc and calling `probePaths` as
 * the kubelet does, each with a 5 s deadline (a slow answer is measured, not cut at 1 s).
 */
export async function floodWhileWatching<Midway>(
  target: { readonly pid: number; url(path: string): string },
  spec: FloodSpec,
  options: WatchOptions & { readonly midway?: () => Promise<Midway> },
): Promise<WatchedFlood<Midway>> {
  const { probePaths, probeEveryMs = 100, sampleEveryMs = 20 } = options;
  const restMiB = residentMemory(target.pid).rssMiB;
  const child = spawnFlood(spec);
  let sampled = 0;
  let samples = 0;
  const sample = (): void => {
    sampled = Math.max(sampled, residentMemory(target.pid).rssMiB);
    samples += 1;
  };
  const probes = new Map(probePaths.map((path) => [path, [] as number[]]));
  let sampler: NodeJS.Timeout | undefined;
  try {
    await child.started;
    sampler = setInterval(sample, sampleEveryMs);
    let flooding = true;
    void child.result.finally(() => (flooding = false)).catch(() => undefined);
    const midway = options.midway === undefined ? undefined : new Promise((resolve) => setTimeout(resolve, (spec.seconds * 1000) / 2)).then(options.midway);
    midway?.catch(() => undefined); // awaited below; not unhandled if a probe fails first
    while (flooding) {
      for (const [path, durations] of probes) {
        const call = await timedCall(target.url(path), { timeoutMs: 5_000 }).catch((error: unknown) => {
          throw new Error(`${path} during the flood: ${String(error)}`);
        });
        if (call.status !== 200) throw new Error(`${path} during the flood answered ${call.status}: ${call.body}`);
        durations.push(call.ms);
      }
      await new Promise((resolve) => setTimeout(resolve, probeEveryMs));
    }
    const flood = await child.result;
    const midwayResult = await midway;
    sample();
    return { flood, restMiB, peakMiB: Math.max(sampled, residentMemory(target.pid).peakMiB), samples, probes, midway: midwayResult };
  } finally {
    clearInterval(sampler);
    child.kill();
  }
}

/** A sidecar to watch: its process, where it listens, and its log (for its first poll). */
export interface DrainTarget {
  readonly pid: number;
  readonly port: number;
  url(path: string): string;
  waitForLog(predicate: (line: Record<string, unknown>) => boolean, timeoutMs?: number): Promise<unknown>;
}

export interface DrainFloodOptions {
  /** The sidecar's --drain-timeout: an Envoy whose connections stay open holds the drain to it. */
  readonly drainTimeoutMs: number;
  /** The pod's token, for /shutdown. */
  readonly token: string;
  /** How long the sidecar's CPU is read while it drains without the flood, before it starts. */
  readonly quietMs: number;
  /** The flood, run from a child process (spawnFlood) from the end of the quiet stretch. */
  readonly flood: Omit<FloodSpec, 'port'>;
  /** The kubelet's /healthz, one every this long on a new connection each, from /shutdown to its answer. Default 100 ms. */
  readonly probeEveryMs?: number;
  /** A probe not answered within this long counts as this long, and as a failure. Default 5 s. */
  readonly probeTimeoutMs?: number;
}

export interface DrainFlood {
  readonly flood: FloodResult;
  readonly restMiB: number;
  /** VmRSS sampled every 20 ms from /shutdown to its answer and the flood's end, or VmHWM if higher. */
  readonly peakMiB: number;
  /** The sidecar's CPU a second while it drained without the flood (its polls of Envoy), in ms. */
  readonly quietCpuMsPerSecond: number;
  /** Its CPU during the flood beyond that rate, in ms: the flood's cost. */
  readonly floodCpuMs: number;
  /** floodCpuMs per connection of the flood. */
  readonly cpuMsPerConnection: number;
  /** Each /healthz's milliseconds (a failed or late one as probeTimeoutMs), and how many failed. */
  readonly healthz: readonly number[];
  readonly healthzFailures: number;
  /** /shutdown's answer, or undefined when none came within the drain time and 10 s more. */
  readonly shutdown: { readonly status: number; readonly body: string } | undefined;
  /** How long after the drain's deadline (counted from the call) /shutdown was answered; negative when before. */
  readonly shutdownLateMs: number;
}

/** CPU time a process has used so far (user + system), in ms; /proc counts it in clock ticks (10 ms). */
function cpuMs(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? [];
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

/**
 * The kubelet's preStop hook and liveness probe against a sidecar whose Envoy holds its connections (so that
 * the drain lasts to its deadline), while strangers flood the serve port: /shutdown, then `quietMs` of the
 * drain alone (the CPU its polls take), then the flood from a child process. /healthz is called throughout,
 * and the sidecar's memory sampled, until /shutdown is answered and the flood is over.
 */
export async function drainUnderFlood(target: DrainTarget, options: DrainFloodOptions): Promise<DrainFlood> {
  const { drainTimeoutMs, token, quietMs, probeEveryMs = 100, probeTimeoutMs = 5_000 } = options;
  const restMiB = residentMemory(target.pid).rssMiB;
  let sampled = restMiB;
  const sampler = setInterval(() => (sampled = Math.max(sampled, residentMemory(target.pid).rssMiB)), 20);
  let child: FloodProcess | undefined;
  try {
    const calledAt = performance.now();
    let answeredAt: number | undefined;
    const shutdown = timedCall(target.url('/shutdown'), { headers: { authorization: `Bearer ${token}` }, timeoutMs: drainTimeoutMs + 10_000 }).then(
      (answer) => {
        answeredAt = performance.now();
        return answer;
      },
      () => undefined,
    );
    const healthz: number[] = [];
    let healthzFailures = 0;
    let probing = true;
    const probes = (async () => {
      while (probing) {
        const startedAt = performance.now();
        const answer = await timedCall(target.url('/healthz'), { timeoutMs: probeTimeoutMs }).catch(() => undefined);
        if (answer?.status === 200) healthz.push(answer.ms);
        else {
          healthzFailures += 1;
          healthz.push(Math.max(probeTimeoutMs, performance.now() - startedAt));
        }
        await new Promise((resolve) => setTimeout(resolve, probeEveryMs));
      }
    })();

    await target.waitForLog((line) => line['event'] === 'poll', drainTimeoutMs);
    const quietFrom = cpuMs(target.pid);
    await new Promise((resolve) => setTimeout(resolve, quietMs));
    const quietCpuMsPerSecond = ((cpuMs(target.pid) - quietFrom) * 1000) / quietMs;

    child = spawnFlood({ ...options.flood, port: target.port });
    await child.started;
    const floodFrom = { cpu: cpuMs(target.pid), at: performance.now() };
    const flood = await child.result;
    const floodCpuMs = cpuMs(target.pid) - floodFrom.cpu - (quietCpuMsPerSecond * (performance.now() - floodFrom.at)) / 1000;
    const answer = await shutdown;
    probing = false;
    await probes;
    const peakMiB = Math.max(sampled, residentMemory(target.pid).peakMiB);
    return {
      flood,
      restMiB,
      peakMiB,
      quietCpuMsPerSecond,
      floodCpuMs,
      cpuMsPerConnection: floodCpuMs / Math.max(1, flood.connections ?? flood.sent),
      healthz,
      healthzFailures,
      shutdown: answer === undefined ? undefined : { status: answer.status, body: answer.body },
      shutdownLateMs: (answeredAt ?? Infinity) - (calledAt + drainTimeoutMs),
    };
  } finally {
    clearInterval(sampler);
    child?.kill();
  }
}

const FAULT_ADMIN = fileURLToPath(new URL('./fault-admin.ts', import.meta.url));

/** Runs in the child: the fault admin with the listeners of argv[1], each holding one connection. */
const LISTENER_HEAVY_ENVOY = `
const { FaultAdmin } = await import(process.argv[1]);
const count = Number(process.argv[2]);
const listeners = Object.fromEntries(Array.from({ length: count }, (_, index) => ['0.0.0.0_' + (20000 + index), 1]));
const admin = await FaultAdmin.start({ listeners });
process.stdout.write(JSON.stringify({ event: 'listening', port: admin.port }) + '\\n');
`;

/**
 * The injector's default plan for a sidecar whose drain is checked at once (no check-delay, no quiet period) and
 * polled every `checkIntervalMs`, to a deadline of `drainTimeoutMs` (else the injector's): what the flood tests and
 * benches run, so that a /shutdown's answer time is the server's, not the check delay's (a minute by default).
 */
export function promptDrainPlan(drain: { readonly checkIntervalMs: number; readonly drainTimeoutMs?: number }): ReturnType<typeof parseWebhookConfig>['injection']['defaults'] {
  return {
    ...parseWebhookConfig([], {}).injection.defaults,
    'check-delay': 0,
    'quiet-period': 0,
    'check-interval': drain.checkIntervalMs,
    ...(drain.drainTimeoutMs === undefined ? {} : { 'drain-timeout': drain.drainTimeoutMs }),
  };
}

/**
 * An Envoy admin API (test/support/fault-admin.ts) with `listeners` listeners, each holding one connection (a
 * drain of it lasts to its deadline), in a process of its own: its answers to /stats (a megabyte at 5,000
 * listeners) are then not rendered on the event loop that times the kubelet's calls. Close with kill().
 */
export async function spawnListenerHeavyEnvoy(listeners: number): Promise<{ readonly port: number; kill(): Promise<void> }> {
  const child = await startNode(['--import', 'tsx', '--input-type=module', '--eval', LISTENER_HEAVY_ENVOY, pathToFileURL(FAULT_ADMIN).href, String(listeners)], {
    ready: (line) => line['event'] === 'listening',
    cwd: REPO_ROOT,
  });
  return { port: Number(child.ready['port']), kill: () => child.kill() };
}
