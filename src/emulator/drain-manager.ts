/**
 * Envoy's drain manager (source/server/drain_manager_impl.cc DrainManagerImpl) as the listeners' connections
 * see it: the per-response drain-close decision (`drainClose`, with the gradual formula in
 * `gradualDrainClose`), drain sequences by direction (`startDrainSequence`, PR #37873 for directions), and,
 * on Envoy main only, the connection-level proactive drain (`scheduleConnectionDrain`, `drainConnection`;
 * runtime guard `envoy.reloadable_features.use_connection_event_drain`, modelled from this project's notes
 * alone, see envoy-emulator.ts). A listener's `drain_type` and `traffic_direction` (listener.proto) decide
 * which decisions reach it.
 */
import { randomInt } from 'node:crypto';
import type { EmulatorCore, HcmConnection } from './core.js';
import type { DrainScope, DrainType, ListenerSpec, RandomSource, TrafficDirection } from './types.js';
import { atLeast } from './versions.js';

/** A listener's direction and drain type, as the drain manager reads them. */
export interface ListenerConfig {
  readonly direction: TrafficDirection;
  readonly drainType: DrainType;
}

/** A listener's config from its spec: UNSPECIFIED and DEFAULT unless given, as an ingress Envoy's. */
export function listenerConfig(spec: ListenerSpec | undefined): ListenerConfig {
  return { direction: spec?.direction ?? 'unspecified', drainType: spec?.drainType ?? 'default' };
}

/**
 * The first version with the connection-level proactive drain (runtime guard
 * `envoy.reloadable_features.use_connection_event_drain`, taken as on): Envoy main after 1.40. See
 * `scheduleConnectionDrain`.
 */
export const CONNECTION_EVENT_DRAIN_SINCE = { major: 1, minor: 41 } as const;
/**
 * The share of the drain time, at its end, in which that drain reaches the connections ("the last part of
 * the drain time": the emulator's reading, the quarter mirroring DrainManagerImpl's drain-close callbacks,
 * which are spread over the first quarter). Unverified, see the file comment of envoy-emulator.ts.
 */
const CONNECTION_DRAIN_SHARE = 0.25;
/**
 * DrainManagerImpl::drainClose for `--drain-strategy gradual` once a drain covers the connection
 * (source/server/drain_manager_impl.cc, deadline-based since Envoy 1.15, PR #11138):
 *
 *   past the deadline (start + drain time): true, without drawing a random number;
 *   remaining = duration_cast<seconds>(deadline - now)   (truncated to whole seconds)
 *   drain time of 0 s: true;
 *   elapsed = drain_time_s - remaining;  return elapsed > random() % drain_time_s.
 *
 * So `elapsed` is the elapsed time rounded *up* to whole seconds: 0 only at the very instant the drain
 * starts, 1 for its whole first second (a 1/drain_time_s chance), and drain_time_s during the last second
 * (always). The tick-based manager before 1.15 counted 1 from the start too (drainSequenceTick runs at once).
 */
export function gradualDrainClose(elapsedMs: number, drainTimeMs: number, random: RandomSource): boolean {
  const untilDeadlineMs = drainTimeMs - elapsedMs;
  if (untilDeadlineMs <= 0) return true;
  const drainTimeS = Math.floor(drainTimeMs / 1000);
  if (drainTimeS === 0) return true;
  const remainingS = Math.floor(untilDeadlineMs / 1000);
  const elapsedS = drainTimeS - remainingS;
  return elapsedS > random() % drainTimeS;
}

/** A deterministic RandomSource (mulberry32: uniform 32-bit integers) for reproducible gradual drains. */
export function seededRandom(seed: number): RandomSource {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  };
}

/** Envoy's default generator draws uint64s; 48 random bits keep `% drain_time_s` just as uniform. */
export function cryptoRandom(): number {
  return randomInt(0, 2 ** 48 - 1);
}

/** DrainManagerImpl for the whole server: the drains running, by direction, and their timers. */
export class DrainManager {
  /** DrainManagerImpl's drain_deadlines_, kept as start instants (clock ms), per DrainDirection. */
  private readonly starts: { inbound?: number; all?: number } = {};
  private readonly timers = new Set<NodeJS.Timeout>();
  /** Whether this version drains connections proactively near the end of a drain (see `scheduleConnectionDrain`). */
  private readonly connectionEventDrain: boolean;

  constructor(private readonly core: EmulatorCore) {
    this.connectionEventDrain = atLeast(core.version, CONNECTION_EVENT_DRAIN_SINCE.major, CONNECTION_EVENT_DRAIN_SINCE.minor);
  }

  /** The listeners `drain_listeners` asked to drain so far. */
  get scope(): DrainScope {
    if (this.starts.all !== undefined) return 'all';
    return this.starts.inbound !== undefined ? 'inbound-only' : 'none';
  }

  /** Clears the pending drain timers (at exit). */
  clearTimers(): void {
    for (const timer of this.timers) clearTimeout(timer);
    this.timers.clear();
  }

  /**
   * DrainManagerImpl::drainClose(direction) of the listener's drain manager (drain_manager_impl.cc): health
   * checks failed and drain_type DEFAULT, always; else no drain covering the listener, never; else
   * `immediate`, always; else Envoy's gradual formula, counted from that drain's start.
   */
  drainClose(config: ListenerConfig): boolean {
    if (config.drainType === 'default' && this.core.healthCheckFailed) return true;
    const start = this.startFor(config);
    if (start === undefined) return false;
    if (this.core.options.drainStrategy === 'immediate') return true;
    return gradualDrainClose(this.core.clock() - start, this.core.options.drainTimeMs, this.core.random);
  }

  /**
   * When the drain covering this listener's connections started, if one does. A connection of an INBOUND
   * listener asks for DrainDirection::InboundOnly, which both drains cover; any other asks for All, which an
   * inbound-only drain does not cover (`direction > current_drain.second`). Envoy then reads
   * drain_deadlines_[direction], which only a drain of that very direction sets (an All-only drain leaves the
   * InboundOnly entry unset: an unchecked lookup in Envoy); the emulator takes the earlier covering drain.
   */
  startFor(config: ListenerConfig): number | undefined {
    const { inbound, all } = this.starts;
    if (config.direction !== 'inbound') return all;
    if (inbound === undefined) return all;
    return all === undefined ? inbound : Math.min(inbound, all);
  }

  /** DrainManagerImpl::draining(direction): a drain of this direction, or a wider one, is running. */
  covers(scope: Exclude<DrainScope, 'none'>): boolean {
    return this.starts.all !== undefined || (scope === 'inbound-only' && this.starts.inbound !== undefined);
  }

  /**
   * DrainManagerImpl::startDrainSequence(direction, cb): the drain of that direction starts now; at the end
   * of the drain time its completion callback runs, if given (handlerDrainListeners's stops the listeners; it
   * does nothing with `skip_exit`, and a non-graceful drain gives an empty one).
   * Widening an inbound-only drain to all keeps the first one's timer too. Drain-close callbacks are not
   * run: no HTTP connection manager of a release registers any (see envoy-emulator.ts); from
   * CONNECTION_EVENT_DRAIN_SINCE (Envoy main) the connection-level drain is scheduled instead
   * (`scheduleConnectionDrain`).
   */
  startDrainSequence(scope: Exclude<DrainScope, 'none'>, onComplete: (() => void) | undefined): void {
    const start = this.core.clock();
    this.starts[scope === 'all' ? 'all' : 'inbound'] = start;
    if (this.connectionEventDrain) this.scheduleConnectionDrain(scope, start);
    if (onComplete === undefined) return;
    this.startDrainTimer(onComplete, this.core.options.drainTimeMs);
  }

  /** A timer of the drain manager, cleared at exit. */
  private startDrainTimer(action: () => void, delayMs: number): void {
    const timer = setTimeout(() => {
      this.timers.delete(timer);
      action();
    }, delayMs);
    timer.unref();
    this.timers.add(timer);
  }

  /**
   * Envoy main's connection-level proactive drain (runtime guard
   * `envoy.reloadable_features.use_connection_event_drain`; versions from CONNECTION_EVENT_DRAIN_SINCE). A
   * drain that starts now reaches every open connection of the HTTP connection managers it governs (the
   * HTTP listener, the `envoy-admin` listener) in the last CONNECTION_DRAIN_SHARE of the drain time, spread
   * over it as DrainManagerImpl spreads its drain-close callbacks (the i-th of n at i/n of the window), or
   * all at the drain's start with `--drain-strategy immediate` (a window of 0, as those callbacks get). The
   * connections open at the window's start are the ones reached; one accepted later gets only the
   * per-response decision. See `drainConnection` for what each gets; TCP proxy connections get nothing.
   */
  private scheduleConnectionDrain(scope: Exclude<DrainScope, 'none'>, start: number): void {
    const immediate = this.core.options.drainStrategy === 'immediate';
    const windowMs = immediate ? 0 : this.core.options.drainTimeMs * CONNECTION_DRAIN_SHARE;
    this.startDrainTimer(() => {
      const governed = (config: ListenerConfig): boolean => (scope === 'all' || config.direction === 'inbound') && this.startFor(config) === start;
      const reached = [...this.core.hcmConnections.values()].filter((connection) => governed(connection.manager.config));
      reached.forEach((connection, index) => {
        const delayMs = (index / reached.length) * windowMs;
        if (delayMs === 0) drainConnection(this.core, connection);
        else this.startDrainTimer(() => drainConnection(this.core, connection), delayMs);
      });
    }, immediate ? 0 : this.core.options.drainTimeMs - windowMs);
  }
}

/**
 * One connection reached by the connection-level drain: its drain sequence starts if it has not
 * (ConnectionManagerImpl::startDrainSequence, counted in `downstream_cx_drain_close` once per connection),
 * and then: HTTP/2, the shutdown-notice GOAWAY and the drain timeout as for a per-response drain (so a
 * final GOAWAY and a close once its streams end, an idle one closing at the timeout); HTTP/1.1 with no
 * request in flight (or nothing received yet), closed now; HTTP/1.1 busy, draining: the next response
 * headers it encodes say `Connection: close` (those of the request in flight, unless already sent, as a
 * long stream's are), and after the HCM `drain_timeout` (onDrainTimeout, then checkForDeferredClose) it
 * closes as soon as no request is in flight; upgraded (WebSocket), closed now, no close frame (the socket
 * is closed under the upgraded stream). A connection closed since the window began is skipped.
 */
export function drainConnection(core: EmulatorCore, connection: HcmConnection): void {
  if (core.closed || core.hcmConnections.get(connection.socket) !== connection) return;
  if (connection.codec === 'http2') {
    connection.startHttp2Drain?.();
    return;
  }
  if (!connection.draining) {
    connection.draining = true;
    connection.manager.countDrainClose();
  }
  if (connection.codec === 'upgraded' || connection.inFlight === 0) {
    connection.socket.destroySoon();
    return;
  }
  core.startTimer(() => {
    connection.closeWhenIdle = true;
    if (connection.inFlight === 0) connection.socket.destroySoon();
  }, core.options.httpDrainTimeoutMs);
}
