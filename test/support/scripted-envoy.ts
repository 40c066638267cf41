/**
 * Envoy's admin API as the sidecar's admin client sees it, in this process and scripted call by call: the one test
 * double of the drain's, the supervisor's and process identity's unit tests. It implements SupervisedEnvoy, so
 * EnvoyDrainTarget and OwnConnections too.
 *
 * What it models of Envoy (the admin API: https://www.envoyproxy.io/docs/envoy/latest/operations/admin; the listener
 * counters: https://www.envoyproxy.io/docs/envoy/latest/configuration/listeners/stats; what the sidecar makes of
 * them: docs/design.md#how-the-sidecar-follows-envoys-process and docs/glossary.md#mark):
 * - The mark, `listener.admin.downstream_cx_total`, grows by one for each admin connection Envoy accepts: every
 *   call of ours but a refused one (the client keeps no connection alive). A stats read reports it as it is when
 *   the answer is written. It starts at 0 in a new process (`replace()`), and in the same one after
 *   `POST /reset_counters` (`resetCounters()`).
 * - The sidecar's own connections (OwnConnections): each call creates one, counted as answered once Envoy answered
 *   it, in the ledger the real admin client keeps (src/envoy/process/own-connections.ts).
 * - `POST /healthcheck/fail` and `/healthcheck/ok` set the state `/server_info` reports (DRAINING, LIVE);
 *   `POST /quitquitquit` exits Envoy once answered: nothing listens then (`down`), every call is refused.
 *
 * Each call takes the next answer of its queue in `answers` (the last one repeats): what Envoy answers, an Error
 * to fail with (a typed one of src/envoy/admin-errors.ts), 'hang' (no answer; rejects once the call is aborted) or
 * 'stuck' (never settles, even when aborted), or a function called once Envoy took the call, whose result is the
 * answer (a promise of one: the answer waits for it). `calls` logs each call with its time on the clock given
 * (test/support/virtual-clock.ts VirtualClock for exact timings, the system clock by default).
 *
 * Which Envoy to test against: this double for the drain's and the supervisor's logic, call by call; FaultAdmin
 * (test/support/fault-admin.ts) for the admin client on real sockets (HTTP faults, the witness); the emulator
 * (src/emulator/, docs/emulator.md) for an Envoy-like process (listeners, clients, drain close, hot restart).
 * test/support/drain-target.ts is no double: it is the real admin client with some of what it reports taken away.
 */
import { systemClock, type Clock } from '../../src/clock.js';
import type { EnvoyProcessInfo, EnvoyServerState } from '../../src/envoy/admin-client.js';
import { AdminRefusedError } from '../../src/envoy/admin-errors.js';
import { EMPTY_TALLY, type ArrivalTally } from '../../src/envoy/arrivals.js';
import type { ReadEvidence } from '../../src/envoy/process/identity.js';
import { OwnConnectionLedger } from '../../src/envoy/process/own-connections.js';
import type { ConnectionCount, HotRestartState } from '../../src/envoy/stats.js';
import type { SupervisedEnvoy } from '../../src/sidecar/supervisor.js';

/** A stats read as the admin client gives it: the count and, from a client that keeps a witness, its evidence. */
export type CountRead = ConnectionCount & { readonly evidence?: ReadEvidence };

/** An answer, or a failure: an Error to reject with, 'hang' (rejects once aborted), 'stuck' (never settles). */
type Outcome<T> = T | Error | 'hang' | 'stuck';
/** An outcome, or a function called once Envoy took the call (its connection accepted), answering what it returns. */
export type Scripted<T> = Outcome<T> | (() => Outcome<T> | Promise<Outcome<T>>);

export interface Answers {
  /** GET /stats: open connections (all drainable), or what to report (filled in by countOf). */
  count: Scripted<number | Partial<CountRead>>[];
  /** GET /server_info: the process as it is ('ok'), or with these fields. */
  serverInfo: Scripted<'ok' | Partial<EnvoyProcessInfo>>[];
  /** POST /healthcheck/fail. */
  fail: Scripted<'ok'>[];
  /** POST /drain_listeners. */
  drain: Scripted<'ok'>[];
  /** POST /healthcheck/ok. */
  pass: Scripted<'ok'>[];
  /** POST /quitquitquit. */
  quit: Scripted<'ok'>[];
}

export type CallName = keyof Answers;

const ENDPOINTS: Readonly<Record<CallName, string>> = {
  count: 'GET /stats',
  serverInfo: 'GET /server_info',
  fail: 'POST /healthcheck/fail',
  drain: 'POST /drain_listeners',
  pass: 'POST /healthcheck/ok',
  quit: 'POST /quitquitquit',
};

export interface Call {
  readonly name: CallName;
  /** clock.now() when it was made. */
  readonly at: number;
  /** The process that was answering then: 1, one more after each replace(). */
  readonly process: number;
}

export interface ScriptedEnvoyOptions {
  readonly answers?: Partial<Answers>;
  readonly clock?: Clock;
  /** The mark of the first process (default 100). */
  readonly mark?: number;
  /** How long the first process has been up (default 60 s). */
  readonly uptimeMs?: number;
  /** How long Envoy takes to answer each call (an overloaded admin API); a call aborted meanwhile rejects. */
  readonly delayMs?: Partial<Record<CallName, number>>;
}

/** A count of listener `ingress`: `total` open, `longLived` of them long-lived, the rest as given. */
export function countOf(read: Partial<CountRead> = {}): CountRead {
  const total = read.total ?? 0;
  const longLived = read.longLived ?? 0;
  return { total, byListener: { ingress: total }, missingListeners: [], availableListeners: ['ingress'], adminConnectionsTotal: null, drainable: total - longLived, longLived, arrivals: EMPTY_TALLY, ...read };
}

/** What a call that settles as scripted answers (no failure, no function). */
type Answered<N extends CallName> = Exclude<Answers[N][number], Error | 'hang' | 'stuck' | (() => unknown)>;

/** Rejects once `signal` aborts (at once if it has), as an admin call does; never settles without a signal. */
function aborted(signal: AbortSignal | undefined): Promise<never> {
  return new Promise((_, reject) => {
    if (signal?.aborted) return reject(new Error('aborted'));
    signal?.addEventListener('abort', () => reject(new Error('aborted')), { once: true });
  });
}

export class ScriptedEnvoy implements SupervisedEnvoy {
  readonly address = '127.0.0.1:9001';
  /** Whether a call has been answered; tests set false for an admin port that never answered. */
  hasAnswered = true;
  readonly answers: Answers;
  readonly calls: Call[] = [];
  readonly delayMs: Partial<Record<CallName, number>>;
  /** listener.admin.downstream_cx_total of the process answering now. */
  mark: number;
  /** Which process answers: 1, one more for each replace(). */
  process = 1;
  /** Nothing listens on the admin port: every call is refused (after /quitquitquit, until replace()). */
  down = false;
  /** Whether the process answering took /healthcheck/fail (and no /healthcheck/ok since): its state DRAINING. */
  healthChecksFailed = false;
  /** Reported by every stats read unless its answer says otherwise. */
  hotRestart: HotRestartState | undefined;
  evidence: ReadEvidence | undefined;
  /** The arrival counters Envoy reports at an instant (clock.now()): none by default. */
  tallyAt: (nowMs: number) => ArrivalTally = () => EMPTY_TALLY;
  /** Calls made and not settled yet, and the most there ever were at once. */
  inFlight = 0;
  maxInFlight = 0;
  private readonly clock: Clock;
  private startedAtMs: number;
  private readonly ledger = new OwnConnectionLedger();

  constructor(options: ScriptedEnvoyOptions = {}) {
    this.answers = { count: [0], serverInfo: ['ok'], fail: ['ok'], drain: ['ok'], pass: ['ok'], quit: ['ok'], ...options.answers };
    this.clock = options.clock ?? systemClock;
    this.mark = options.mark ?? 100;
    this.startedAtMs = this.clock.now() - (options.uptimeMs ?? 60_000);
    this.delayMs = { ...options.delayMs };
  }

  /** Another Envoy process takes the admin port: its mark starts at 0, it passes health checks, it just started. */
  replace(): void {
    this.process += 1;
    this.mark = 0;
    this.down = false;
    this.healthChecksFailed = false;
    this.startedAtMs = this.clock.now();
  }

  /** POST /reset_counters (sent by someone else): the same process, its mark back to 0. */
  resetCounters(): void {
    this.mark = 0;
  }

  get state(): EnvoyServerState {
    return this.healthChecksFailed ? 'DRAINING' : 'LIVE';
  }

  /** `times` connections of ours that Envoy accepted and answered, without a call: for tests that script the reads themselves. */
  connect(times = 1): void {
    for (let i = 0; i < times; i += 1) {
      this.mark += 1;
      this.ledger.created()();
    }
  }

  connectionMarker(): number {
    return this.ledger.connectionMarker();
  }

  connectedSince(marker: number): number {
    return this.ledger.connectedSince(marker);
  }

  names(): CallName[] {
    return this.calls.map((call) => call.name);
  }

  /** The calls that change Envoy: all but the reads. */
  mutations(): CallName[] {
    return this.names().filter((name) => name !== 'count' && name !== 'serverInfo');
  }

  async countOpenConnections(signal?: AbortSignal): Promise<CountRead> {
    const answer = await this.call('count', signal);
    const read = typeof answer === 'number' ? { total: answer } : answer;
    const witnessed = { ...(this.hotRestart === undefined ? {} : { hotRestart: this.hotRestart }), ...(this.evidence === undefined ? {} : { evidence: this.evidence }) };
    return countOf({ adminConnectionsTotal: this.mark, arrivals: this.tallyAt(this.clock.now()), ...witnessed, ...read });
  }

  async serverInfo(signal?: AbortSignal): Promise<EnvoyProcessInfo> {
    const answer = await this.call('serverInfo', signal);
    const readAtMs = this.clock.now();
    const uptimeSeconds = Math.floor((readAtMs - this.startedAtMs) / 1000);
    const info = { state: this.state, uptimeSeconds, version: null, restartEpoch: this.hotRestart?.epoch ?? 0, startedAtMs: readAtMs - uptimeSeconds * 1000, readAtMs };
    return answer === 'ok' ? info : { ...info, ...answer };
  }

  async failHealthChecks(signal?: AbortSignal): Promise<void> {
    await this.call('fail', signal);
    this.healthChecksFailed = true;
  }

  async passHealthChecks(signal?: AbortSignal): Promise<void> {
    await this.call('pass', signal);
    this.healthChecksFailed = false;
  }

  async drainListeners(signal?: AbortSignal): Promise<void> {
    await this.call('drain', signal);
  }

  async quit(signal?: AbortSignal): Promise<void> {
    await this.call('quit', signal);
    this.down = true;
  }

  /** Logs the call, takes its answer, and settles as it says; the mark grows once Envoy accepts the connection. */
  private async call<N extends CallName>(name: N, signal: AbortSignal | undefined): Promise<Answered<N>> {
    this.calls.push({ name, at: this.clock.now(), process: this.process });
    const queue: Answers[N][number][] = this.answers[name];
    const scripted = queue.length > 1 ? queue.shift() : queue[0];
    if (scripted === undefined) throw new Error(`no answer scripted for ${name}`);
    const answered = this.ledger.created();
    if (this.down) throw new AdminRefusedError(ENDPOINTS[name], 'connection refused');
    if (scripted instanceof AdminRefusedError) throw scripted;
    this.mark += 1;
    this.inFlight += 1;
    this.maxInFlight = Math.max(this.maxInFlight, this.inFlight);
    try {
      const delayMs = this.delayMs[name] ?? 0;
      if (delayMs > 0) await this.clock.sleep(delayMs, signal ?? new AbortController().signal).catch(() => aborted(signal));
      const answer = typeof scripted === 'function' ? await scripted() : scripted;
      if (answer === 'stuck') await new Promise(() => undefined);
      if (answer === 'hang') await aborted(signal);
      if (answer instanceof Error) throw answer;
      answered();
      this.hasAnswered = true;
      return answer as Answered<N>;
    } finally {
      this.inFlight -= 1;
    }
  }
}
