/**
 * A model-based fault search for the drain's promises (docs/design.md "What the drain promises"). fast-check generates
 * sequences of what Envoy's admin API does per call (answer, answer late, 500/404, 101 and hold, reset mid-body,
 * an endless body, deep JSON, silence), of what happens to Envoy (connections open and close, its process is
 * replaced, it exits and restarts, its counters are reset, its wall clock steps, it hot-restarts and the parent
 * lives on with its connections until it exits, its admin socket's path is unlinked or replaced by a file or a
 * directory while it runs) and of what clients do (/shutdown, /wait, SIGTERM, strangers on the serve port). Each
 * run also draws how Envoy is set up: its admin API on TCP or on a Unix socket, one listener or a few thousand,
 * and stats trimmed by a stats_matcher (no admin counter, no listener gauges, no hot restart gauges), per process. Each sequence runs against the real sidecar (startSidecar: its server, its
 * supervisor and drain, its admin client) in this process, on a wall clock that can step, talking to the fault
 * admin server over a real loopback socket, which logs every call it received and what it rendered. After every
 * run the invariants are checked on what the clients got, what the sidecar logged and what the server saw:
 *
 * - I1 every /shutdown, /wait and SIGTERM is answered by drain-timeout + one check interval (+ scheduling slack);
 * - I2 "drained" only when every process holding client connections (the one drained, and a hot restart's parent
 *   and child) had them at or below min-open-connections when the read that ended the drain was rendered, or had
 *   exited; never by the count of a process that is neither the one pinned nor a hot restart child;
 * - I3 a /shutdown answered with an earlier drain's outcome found that drained process (or none) running, or one
 *   that never answered the sidecar (its admin address lost as it started: nothing could see it);
 * - I4 the reported reason matches what the admin server saw (connections-closed: /healthcheck/fail took effect on
 *   the process whose count ended the drain);
 * - I5 bounded resources: nothing the run started is left (sockets, timers), memory grows by no more than a bound.
 *
 * test/sidecar/drain-model.test.ts runs a bounded number of them in `npm test`, and keeps every counterexample
 * ever found as a named regression test; `npm run fuzz -- --drain` (bench/fuzz-drain.ts) runs many more.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { systemClock, type Clock } from '../../src/clock.js';
import { parseSidecarConfig } from '../../src/config/sidecar.js';
import { startSidecar, type RunningSidecar } from '../../src/sidecar/main.js';
import { httpRequest } from './connections.js';
import { MemoryLog, type MemoryLogLine } from './memory-log.js';
import { FaultAdmin, type BehaviourSpec, type FaultCall } from './fault-admin.js';

// --- the system's settings: short, so that a run takes well under a second ------------------------------

const CHECK_INTERVAL_MS = 25;
const CHECK_DELAY_MS = 60;
const DRAIN_TIMEOUT_MS = 600;
const ADMIN_TIMEOUT_MS = 80;
const WAIT_WINDOW_MS = 150;
/** How late a timer may fire on a loaded 2-core machine, on top of the bound the sidecar promises. */
const SLACK_MS = 400;

// --- the generated steps ------------------------------------------------------------------------------

const PATHS = ['/stats', '/healthcheck/fail', '/drain_listeners', '/server_info', '/ready', '*'] as const;
const BEHAVIOURS: readonly BehaviourSpec[] = [
  'answer',
  `delay:${ADMIN_TIMEOUT_MS / 2}`,
  `delay:${ADMIN_TIMEOUT_MS + 40}`,
  'status:500',
  'status:404',
  'upgrade',
  'reset',
  'endless',
  { kind: 'deep-json', depth: 100_000 },
  'silent',
];

/**
 * What a stats_matcher may leave out of a process's /stats (Envoy's stats_config.stats_matcher: an excluded stat is
 * absent, not 0): the admin listener's connection counter (the process's mark), every listener's connection gauges
 * but the admin one's, or the hot restart gauges.
 */
export type Trim = 'none' | 'admin-counter' | 'listener-gauges' | 'hot-restart-gauges';
const TRIMS: Readonly<Record<Trim, RegExp | null>> = {
  none: null,
  'admin-counter': /^listener\.admin\.downstream_cx_total$/,
  'listener-gauges': /^listener\.(?!admin\.).*downstream_cx_active$/,
  'hot-restart-gauges': /^server\.(hot_restart_epoch|parent_connections)$/,
};

export type Step =
  | { readonly kind: 'script'; readonly path: (typeof PATHS)[number]; readonly behaviours: readonly BehaviourSpec[] }
  | { readonly kind: 'connections'; readonly open: number }
  | { readonly kind: 'replace'; readonly open: number; readonly trim?: Trim }
  /** A hot restart (FaultAdmin.hotRestart): a child of the next epoch, which may run with another stats config. */
  | { readonly kind: 'hot-restart'; readonly open: number; readonly trim?: Trim }
  /** A hot restart parent's ingress connections go down to `open` (it only loses them). */
  | { readonly kind: 'parent-connections'; readonly open: number }
  /** The hot restart parent exits (terminated by the child after --parent-shutdown-time-s). */
  | { readonly kind: 'parent-exit' }
  /** The admin socket's path unlinked, or replaced by a file or a directory, while the process runs (TCP: its admin listen socket closed). */
  | { readonly kind: 'socket-path'; readonly change: 'unlink' | 'file' | 'directory' }
  /** POST /reset_counters to the process running: its mark goes to 0, its connections stay (issue 28, item 1). */
  | { readonly kind: 'reset-counters' }
  | { readonly kind: 'stop' }
  | { readonly kind: 'restart'; readonly open: number; readonly trim?: Trim }
  | { readonly kind: 'step-wall'; readonly ms: number }
  | { readonly kind: 'shutdown' }
  | { readonly kind: 'wait' }
  | { readonly kind: 'sigterm' }
  | { readonly kind: 'strangers'; readonly count: number; readonly style: 'idle' | 'pipeline' | 'junk' }
  | { readonly kind: 'pause'; readonly ms: number };

const open = fc.integer({ min: 0, max: 3 });
/** Mostly untrimmed: a trimmed process is one kind of Envoy among several. */
const trim: fc.Arbitrary<Trim> = fc.oneof(
  { arbitrary: fc.constant('none' as const), weight: 5 },
  { arbitrary: fc.constantFrom('admin-counter' as const, 'listener-gauges' as const, 'hot-restart-gauges' as const), weight: 1 },
);
const stepArbitrary: fc.Arbitrary<Step> = fc.oneof(
  { arbitrary: fc.record({ kind: fc.constant('script' as const), path: fc.constantFrom(...PATHS), behaviours: fc.array(fc.constantFrom(...BEHAVIOURS), { minLength: 1, maxLength: 4 }) }), weight: 4 },
  { arbitrary: fc.record({ kind: fc.constant('connections' as const), open }), weight: 3 },
  { arbitrary: fc.record({ kind: fc.constant('replace' as const), open, trim }), weight: 1 },
  { arbitrary: fc.record({ kind: fc.constant('hot-restart' as const), open, trim }), weight: 2 },
  { arbitrary: fc.record({ kind: fc.constant('parent-connections' as const), open }), weight: 2 },
  { arbitrary: fc.constant({ kind: 'parent-exit' as const }), weight: 1 },
  { arbitrary: fc.record({ kind: fc.constant('socket-path' as const), change: fc.constantFrom('unlink' as const, 'file' as const, 'directory' as const) }), weight: 1 },
  { arbitrary: fc.constant({ kind: 'stop' as const }), weight: 1 },
  { arbitrary: fc.constant({ kind: 'reset-counters' as const }), weight: 1 },
  { arbitrary: fc.record({ kind: fc.constant('restart' as const), open, trim }), weight: 1 },
  { arbitrary: fc.record({ kind: fc.constant('step-wall' as const), ms: fc.constantFrom(-3_600_000, -5_000, 5_000, 3_600_000) }), weight: 1 },
  { arbitrary: fc.constant({ kind: 'shutdown' as const }), weight: 4 },
  { arbitrary: fc.constant({ kind: 'wait' as const }), weight: 1 },
  { arbitrary: fc.record({ kind: fc.constant('strangers' as const), count: fc.integer({ min: 1, max: 30 }), style: fc.constantFrom('idle' as const, 'pipeline' as const, 'junk' as const) }), weight: 1 },
  { arbitrary: fc.record({ kind: fc.constant('pause' as const), ms: fc.integer({ min: 5, max: 200 }) }), weight: 4 },
);

/**
 * A run: its steps (a SIGTERM, if any, last), the drain settings that vary between runs, and how Envoy is set up
 * (absent: TCP, one listener, nothing trimmed, as before these were drawn).
 */
export interface Scenario {
  readonly steps: readonly Step[];
  readonly minOpenConnections: number;
  readonly drainDelayMs: number;
  /** The admin API on 127.0.0.1 or on a Unix socket (`--admin-address=unix:<path>`). */
  readonly transport?: 'tcp' | 'unix';
  /** Listeners besides `ingress`, with no connections: a listener-heavy Envoy's /stats is thousands of lines. */
  readonly extraListeners?: number;
  /** The first process's stats trim; later ones draw their own. */
  readonly trim?: Trim;
}

/** A few thousand listeners: enough to make /stats hundreds of KB, few enough that a run stays well under a second. */
export const HEAVY_LISTENERS = 2_000;

export const scenarioArbitrary: fc.Arbitrary<Scenario> = fc.record({
  steps: fc
    .tuple(fc.array(stepArbitrary, { minLength: 2, maxLength: 14 }), fc.boolean())
    .map(([steps, sigterm]) => [...steps.filter((step) => step.kind !== 'sigterm'), { kind: 'shutdown' as const }, ...(sigterm ? [{ kind: 'sigterm' as const }] : [])]),
  minOpenConnections: fc.constantFrom(0, 1),
  drainDelayMs: fc.constantFrom(0, 40),
  transport: fc.constantFrom('tcp' as const, 'unix' as const),
  extraListeners: fc.oneof({ arbitrary: fc.constant(0), weight: 5 }, { arbitrary: fc.constant(HEAVY_LISTENERS), weight: 1 }),
  trim,
});

// --- the world a run happens in ------------------------------------------------------------------------

/** The real monotonic clock, and a wall clock that steps. */
class SteppingClock implements Clock {
  private offsetMs = 0;
  now(): number {
    return systemClock.now();
  }
  wallNow(): number {
    return Date.now() + this.offsetMs;
  }
  sleep(ms: number, signal: AbortSignal): Promise<void> {
    return systemClock.sleep(ms, signal);
  }
  step(ms: number): void {
    this.offsetMs += ms;
  }
}

interface ClientCall {
  readonly kind: 'shutdown' | 'wait' | 'sigterm';
  readonly sentAt: number;
  /** The Envoy process running when the call was sent; null when none was. */
  readonly processAtSend: number | null;
  answeredAt?: number;
  status?: number;
  body?: string;
}

export interface RunReport {
  readonly scenario: Scenario;
  readonly pace: Pace;
  readonly calls: readonly ClientCall[];
  readonly adminCalls: readonly FaultCall[];
  readonly log: readonly MemoryLogLine[];
  /** Which process was running from when: a new entry at every change (null: none running). */
  readonly processes: readonly { readonly at: number; readonly id: number | null }[];
  /** Each hot restart: the child's process id and its parent's. */
  readonly hotRestarts: readonly { readonly child: number; readonly parent: number }[];
  readonly leftovers: readonly string[];
}

/**
 * How fast the world moves against the sidecar's own timers (issue 38: a verdict that depends on the machine's pace
 * means nothing). On a loaded machine the sidecar's reads come late against the steps' pauses, which are timers
 * too; on a quiet one it reads between every two steps. A pace scales every pause, and may add a gap between
 * consecutive steps, so that a scenario's interleavings are tried on purpose rather than by the machine's load.
 */
export interface Pace {
  readonly name: 'as written' | 'brisk' | 'leisurely';
  /** Each pause step lasts its ms times this. */
  readonly pauseScale: number;
  /** A pause between every two steps (one check interval and more: the sidecar reads in between). */
  readonly gapMs: number;
}

export const PACES: Readonly<Record<Pace['name'], Pace>> = {
  'as written': { name: 'as written', pauseScale: 1, gapMs: 0 },
  /** Pauses a quarter as long, no gaps: the steps crowd the sidecar's reads, as on a loaded machine. */
  brisk: { name: 'brisk', pauseScale: 0.25, gapMs: 0 },
  /** Pauses twice as long, and a read's worth of time between every two steps. */
  leisurely: { name: 'leisurely', pauseScale: 2, gapMs: CHECK_INTERVAL_MS + 10 },
};

/** Every scenario kept is run at each pace; a generated one as written and at one other. */
export const ALL_PACES: readonly Pace[] = Object.values(PACES);

/** Runs one scenario against a fresh sidecar and fault admin server; the report is checked by `problemsOf`. */
export async function runScenario(scenario: Scenario, pace: Pace = PACES['as written']): Promise<RunReport> {
  const resourcesBefore = activeResources();
  const clock = new SteppingClock();
  const directory = scenario.transport === 'unix' ? mkdtempSync(join(tmpdir(), 'drain-model-')) : undefined;
  const admin = await FaultAdmin.start({
    listeners: listenersOf(scenario.extraListeners ?? 0),
    // One worker copy per listener for a heavy one: its /stats is still thousands of lines, rendered and parsed on the event loop the sidecar shares.
    workers: (scenario.extraListeners ?? 0) > 0 ? 1 : 2,
    clock,
    ...(directory === undefined ? {} : { socketPath: join(directory, 'admin.sock') }),
    ...(scenario.trim === undefined || TRIMS[scenario.trim] === null ? {} : { statsExcluded: TRIMS[scenario.trim] ?? undefined }),
  });
  // Stamped on the monotonic clock the fault server stamps its calls with.
  const log = new MemoryLog(() => systemClock.now());
  const config = parseSidecarConfig(
    [
      '--serve-address=127.0.0.1',
      '--serve-port=0',
      ...(directory === undefined ? [`--admin-port=${admin.port}`] : [`--admin-address=${admin.adminAddress}`]),
      `--check-interval=${CHECK_INTERVAL_MS}ms`,
      `--check-delay=${CHECK_DELAY_MS}ms`,
      `--drain-delay=${scenario.drainDelayMs}ms`,
      `--drain-timeout=${DRAIN_TIMEOUT_MS}ms`,
      `--admin-timeout=${ADMIN_TIMEOUT_MS}ms`,
      '--admin-refusals=2',
      `--wait-window=${WAIT_WINDOW_MS}ms`,
      `--min-open-connections=${scenario.minOpenConnections}`,
    ],
    {},
  );
  const sidecar = await startSidecar(config, log, clock);
  const processes: { at: number; id: number | null }[] = [{ at: clock.now(), id: admin.process.id }];
  const noteProcess = (): void => void processes.push({ at: clock.now(), id: admin.process.running ? admin.process.id : null });
  const calls: ClientCall[] = [];
  const pending: Promise<unknown>[] = [];
  const strangers: net.Socket[] = [];
  const hotRestarts: { child: number; parent: number }[] = [];
  // Envoy's admin API answers before the first step, as in a pod that became Ready (readiness needs it).
  const { supervisor } = await sidecar.engine();
  await waitFor(() => supervisor.readiness().ready, 2_000);
  try {
    for (const [index, step] of scenario.steps.entries()) {
      if (index > 0 && pace.gapMs > 0) await new Promise((resolve) => setTimeout(resolve, pace.gapMs));
      await perform(step, { admin, sidecar, clock, calls, pending, strangers, noteProcess, hotRestarts, pace });
    }
    await settleAll(pending, DRAIN_TIMEOUT_MS * 2 + SLACK_MS * 2);
  } finally {
    for (const socket of strangers) socket.destroy();
    await sidecar.stop();
    await admin.close();
    if (directory !== undefined) rmSync(directory, { recursive: true, force: true });
  }
  noteProcess();
  const leftovers = await leftoverResources(resourcesBefore);
  return { scenario, pace, calls, adminCalls: admin.calls, log: log.lines, processes, hotRestarts, leftovers };
}

/** `ingress`, and `extra` more named as Envoy names listeners by address (`0.0.0.0_10000`…), all without connections. */
function listenersOf(extra: number): Record<string, number> {
  const listeners: Record<string, number> = { ingress: 0 };
  for (let i = 0; i < extra; i += 1) listeners[`0.0.0.0_${10_000 + i}`] = 0;
  return listeners;
}

function statsExcludedBy(trim: Trim | undefined): { statsExcluded?: RegExp | null } {
  return trim === undefined ? {} : { statsExcluded: TRIMS[trim] };
}

interface World {
  readonly admin: FaultAdmin;
  readonly sidecar: RunningSidecar;
  readonly clock: SteppingClock;
  readonly calls: ClientCall[];
  readonly pending: Promise<unknown>[];
  readonly strangers: net.Socket[];
  readonly noteProcess: () => void;
  readonly hotRestarts: { child: number; parent: number }[];
  readonly pace: Pace;
}

async function perform(step: Step, world: World): Promise<void> {
  const { admin, sidecar, clock } = world;
  switch (step.kind) {
    case 'script':
      return admin.script(step.path, ...step.behaviours);
    case 'connections':
      return admin.setConnections('ingress', step.open);
    case 'replace':
      admin.replaceProcess(statsExcludedBy(step.trim));
      admin.setConnections('ingress', step.open);
      return world.noteProcess();
    case 'hot-restart':
      return hotRestart(world, step);
    case 'parent-connections':
      return admin.setParentConnections('ingress', step.open);
    case 'parent-exit':
      return admin.parentExit();
    case 'socket-path':
      return admin.changeSocketPath(step.change);
    case 'reset-counters':
      return admin.resetCounters();
    case 'stop':
      await admin.stop();
      return world.noteProcess();
    case 'restart':
      await admin.restart(statsExcludedBy(step.trim));
      admin.setConnections('ingress', step.open);
      return world.noteProcess();
    case 'step-wall':
      clock.step(step.ms);
      return admin.stepWallClock(step.ms);
    case 'shutdown':
    case 'wait':
      return void world.pending.push(clientCall(world, step.kind, () => httpRequest(`http://127.0.0.1:${sidecar.port}/${step.kind}`, { timeoutMs: DRAIN_TIMEOUT_MS * 4 })));
    case 'sigterm':
      // What main.ts's SIGTERM handler does: wait for a drain under way (busy), then stop.
      return void world.pending.push(
        clientCall(world, 'sigterm', async () => {
          await (await sidecar.engine()).supervisor.busy();
          return { status: 0, body: '' };
        }),
      );
    case 'strangers':
      return openStrangers(sidecar.port, step.count, step.style, world.strangers);
    case 'pause':
      return new Promise((resolve) => setTimeout(resolve, step.ms * world.pace.pauseScale));
  }
}

/** A hot restart needs a process running to be its parent; without one the step does nothing. */
async function hotRestart(world: World, step: Extract<Step, { kind: 'hot-restart' }>): Promise<void> {
  const parent = world.admin.process;
  if (!parent.running) return;
  await world.admin.hotRestart(statsExcludedBy(step.trim));
  world.admin.setConnections('ingress', step.open);
  world.hotRestarts.push({ child: world.admin.process.id, parent: parent.id });
  world.noteProcess();
}

function clientCall(world: World, kind: ClientCall['kind'], send: () => Promise<{ status: number; body: string }>): Promise<void> {
  const call: ClientCall = { kind, sentAt: world.clock.now(), processAtSend: world.admin.process.running ? world.admin.process.id : null };
  world.calls.push(call);
  return send().then(
    (answer) => {
      call.answeredAt = world.clock.now();
      call.status = answer.status;
      call.body = answer.body;
    },
    (error: unknown) => {
      call.answeredAt = world.clock.now();
      call.status = -1;
      call.body = String(error);
    },
  );
}

/** Clients that are not the kubelet: silent sockets, pipelined requests never read, or junk bytes. */
async function openStrangers(port: number, count: number, style: 'idle' | 'pipeline' | 'junk', sockets: net.Socket[]): Promise<void> {
  for (let i = 0; i < count; i += 1) {
    const socket = net.connect(port, '127.0.0.1');
    socket.on('error', () => undefined);
    sockets.push(socket);
    socket.once('connect', () => {
      if (style === 'pipeline') {
        socket.pause(); // never read the answers
        socket.write('GET /drain HTTP/1.1\r\nhost: x\r\n\r\n'.repeat(200));
      } else if (style === 'junk') {
        socket.write('\u0000\u00ff not http at all\r\n\r\n');
      }
    });
  }
}

// --- the invariants ------------------------------------------------------------------------------------

/** Everything wrong with a run, one line each; empty when every invariant held. */
export function problemsOf(report: RunReport): string[] {
  return [...answeredInTime(report), ...drainedHonestly(report), ...oldAnswersOnlyForTheDrainedProcess(report), ...reasonsAsSeen(report), ...report.leftovers];
}

/** I1. */
function answeredInTime(report: RunReport): string[] {
  const problems: string[] = [];
  for (const call of report.calls) {
    const bound = call.kind === 'wait' ? WAIT_WINDOW_MS + DRAIN_TIMEOUT_MS + CHECK_INTERVAL_MS : DRAIN_TIMEOUT_MS + CHECK_INTERVAL_MS;
    if (call.answeredAt === undefined) problems.push(`I1: ${call.kind} sent at ${rel(report, call.sentAt)} never answered`);
    else if (call.answeredAt - call.sentAt > bound + SLACK_MS) problems.push(`I1: ${call.kind} answered after ${Math.round(call.answeredAt - call.sentAt)} ms (bound ${bound} ms)`);
    else if (call.kind !== 'sigterm' && (call.status === -1 || (call.status !== 200 && call.status !== 503))) problems.push(`I1: ${call.kind} got ${call.status}: ${call.body}`);
  }
  return problems;
}

interface DrainRecord {
  readonly startedAt: number;
  readonly finishedAt: number | undefined;
  readonly reason: string | undefined;
  /** The polls of this drain: when logged, the mark, the count. */
  readonly polls: readonly { readonly at: number; readonly mark: number | null; readonly open: number; readonly process: string }[];
}

/** The drains of a run, from the sidecar's log. */
function drainsOf(report: RunReport): DrainRecord[] {
  const drains: { startedAt: number; finishedAt: number | undefined; reason: string | undefined; polls: DrainRecord['polls'][number][] }[] = [];
  for (const line of report.log) {
    const event = line.fields['event'];
    const current = drains.at(-1);
    if (event === 'drain_started') drains.push({ startedAt: line.at, finishedAt: undefined, reason: undefined, polls: [] });
    else if (event === 'poll' && current !== undefined && current.finishedAt === undefined) {
      current.polls.push({ at: line.at, mark: line.fields['admin_connections'] as number | null, open: Number(line.fields['open_connections']), process: String(line.fields['process']) });
    } else if (event === 'drain_finished' && current !== undefined && current.finishedAt === undefined) {
      current.finishedAt = line.at;
      current.reason = String(line.fields['reason']);
    }
  }
  return drains;
}

/**
 * The stats answer a poll read: the last /stats call answered, before the poll was logged, with that mark (or,
 * for a poll logged without one, the last one answered before it).
 */
function statsCallOf(report: RunReport, poll: DrainRecord['polls'][number]): FaultCall | undefined {
  const marked = typeof poll.mark === 'number';
  return report.adminCalls
    .filter((call) => call.path === '/stats' && call.rendered !== undefined && (!marked || call.rendered.adminConnectionsTotal === poll.mark) && (call.answeredAt ?? Infinity) <= poll.at)
    .at(-1);
}

/** I2. */
function drainedHonestly(report: RunReport): string[] {
  const problems: string[] = [];
  const min = report.scenario.minOpenConnections;
  for (const drain of drainsOf(report)) {
    if (drain.polls.length === 0) continue;
    const first = statsCallOf(report, drain.polls[0]!);
    const last = statsCallOf(report, drain.polls.at(-1)!);
    if (first === undefined || last === undefined) {
      problems.push(`I2: a poll of the drain started at ${rel(report, drain.startedAt)} matches no stats answer the server gave`);
      continue;
    }
    // The pinned process, and hot restart children: the drain follows a child of a higher epoch (drain.ts
    // followHotRestart). Also one whose parent had replaced the pinned process unseen between two reads: no read
    // tells that apart, and following it drains every process alive, which the held counts below check.
    const followed = new Set([first.processId, ...report.hotRestarts.map(({ child }) => child)]);
    // A poll the drain took for its pinned process's must be of one of those (a doubtful or unknown one, which it
    // did not attribute and which never ends it, may be of any: e.g. a successor whose stats lack the admin counter).
    const counted = drain.polls.filter((poll) => poll.process !== 'doubtful' && poll.process !== 'unknown' && !followed.has(statsCallOf(report, poll)?.processId ?? -1));
    if (drain.reason === 'connections-closed') {
      if (!followed.has(last.processId)) problems.push(`I2: drained by the count of process ${last.processId}, pinned to ${first.processId}`);
      // Every process alive when that answer was rendered, the child and a hot restart parent, at or below min.
      for (const [id, held] of Object.entries(last.rendered?.held ?? { unknown: Infinity })) {
        if (held > min) problems.push(`I2: drained while process ${id} held ${held} client connections (the answer showed ${JSON.stringify(last.rendered?.connections)})`);
      }
    }
    // A count of another process may be logged only as the one that ends the drain as envoy-replaced.
    if (counted.length > 1 || (counted.length === 1 && drain.reason !== 'envoy-replaced')) {
      problems.push(`I2: the drain started at ${rel(report, drain.startedAt)} logged ${counted.length} polls of another process than ${first.processId} (ended ${drain.reason})`);
    }
  }
  return problems;
}

/** I3: an answer of an earlier drain only when that drain's process, or none, runs. */
function oldAnswersOnlyForTheDrainedProcess(report: RunReport): string[] {
  const problems: string[] = [];
  const drains = drainsOf(report);
  for (const call of report.calls) {
    if (call.kind !== 'shutdown' || call.answeredAt === undefined) continue;
    const running = drains.find((drain) => drain.startedAt <= call.sentAt && (drain.finishedAt ?? Infinity) > call.sentAt);
    const startedSince = drains.some((drain) => drain.startedAt >= call.sentAt && drain.startedAt <= (call.answeredAt ?? 0));
    if (running !== undefined || startedSince) continue;
    const ended = drains.filter((drain) => (drain.finishedAt ?? Infinity) <= call.sentAt).at(-1);
    if (ended === undefined || ended.polls.length === 0) continue;
    const drained = statsCallOf(report, ended.polls.at(-1)!)?.processId;
    if (drained === undefined) continue; // reported by I2
    const processAtAnswer = processAt(report, call.answeredAt);
    // Only a process the sidecar could have seen: one that answered it before this answer. One whose admin address
    // was lost (a socket path unlinked or replaced) as it started is unknown to it, as to anyone reading the address.
    const seen = report.adminCalls.some((admin) => admin.processId === call.processAtSend && (admin.answeredAt ?? Infinity) <= (call.answeredAt ?? 0));
    if (call.processAtSend !== null && processAtAnswer === call.processAtSend && call.processAtSend !== drained && seen) {
      problems.push(`I3: /shutdown at ${rel(report, call.sentAt)} got the answer of a drain of process ${drained} while process ${call.processAtSend} ran throughout`);
    }
  }
  return problems;
}

/** I4: reasons against what the server saw. */
function reasonsAsSeen(report: RunReport): string[] {
  const problems: string[] = [];
  for (const drain of drainsOf(report)) {
    const end = drain.finishedAt;
    if (end === undefined) continue;
    // The process the drain followed at its end: the one it pinned, or a hot restart child it followed since (the
    // last poll it attributed to its process; a doubtful one may be of another).
    const attributed = drain.polls.filter((poll) => poll.process === 'pinned' || poll.process === 'same' || poll.process === 'reset').at(-1) ?? drain.polls[0];
    const pinned = attributed === undefined ? undefined : statsCallOf(report, attributed)?.processId;
    switch (drain.reason) {
      case 'envoy-exited':
        if (pinned !== undefined && processAt(report, end) === pinned) problems.push(`I4: envoy-exited, but process ${pinned} was running when the drain ended`);
        break;
      case 'envoy-replaced':
        if (pinned !== undefined && processAt(report, end) === pinned) problems.push(`I4: envoy-replaced, but process ${pinned} still ran`);
        break;
      case 'admin-unreachable':
        if (report.adminCalls.some((call) => call.behaviour.kind === 'answer' && call.answeredAt !== undefined && call.answeredAt < end - 1 && call.path !== '/quitquitquit')) {
          problems.push('I4: admin-unreachable, but the server had answered a call validly before');
        }
        break;
      case 'connections-closed': {
        // On the process whose count ended the drain (a hot restart child's own health checks, not its parent's).
        const failed = report.adminCalls.find((call) => call.path === '/healthcheck/fail' && call.effect === 'applied' && call.processId === pinned && call.receivedAt <= end);
        if (failed === undefined) problems.push(`I4: connections-closed, but no /healthcheck/fail took effect on process ${pinned}, whose count ended the drain`);
        break;
      }
      default:
        break;
    }
  }
  return problems;
}

// --- helpers ------------------------------------------------------------------------------------------


function processAt(report: RunReport, at: number): number | null {
  let id: number | null = null;
  for (const entry of report.processes) if (entry.at <= at) id = entry.id;
  return id;
}

function rel(report: RunReport, at: number): string {
  return `+${Math.round(at - (report.processes[0]?.at ?? at))} ms`;
}

async function settleAll(pending: readonly Promise<unknown>[], limitMs: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([Promise.allSettled(pending), new Promise((resolve) => (timer = setTimeout(resolve, limitMs)))]);
  clearTimeout(timer);
}

async function waitFor(condition: () => boolean, limitMs: number): Promise<void> {
  for (let waited = 0; !condition() && waited < limitMs; waited += 10) await new Promise((resolve) => setTimeout(resolve, 10));
  assert.ok(condition(), `not within ${limitMs} ms`);
}

/** Resources Node keeps the loop alive for, by type (timers, sockets, servers). */
function activeResources(): Map<string, number> {
  const counts = new Map<string, number>();
  for (const type of process.getActiveResourcesInfo()) counts.set(type, (counts.get(type) ?? 0) + 1);
  return counts;
}

/** I5: after a run, nothing it started may be left behind (checked again over 300 ms while sockets close). */
async function leftoverResources(before: Map<string, number>): Promise<string[]> {
  let left: string[] = [];
  for (let attempt = 0; attempt < 30; attempt += 1) {
    const now = activeResources();
    left = [...now].filter(([type, count]) => count > (before.get(type) ?? 0)).map(([type, count]) => `I5: ${count - (before.get(type) ?? 0)} ${type} left after the run`);
    if (left.length === 0) return [];
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  return left;
}

