/**
 * Envoy's drain manager (source/server/drain_manager_impl.cc DrainManagerImpl) as the listeners' connections see it:
 * the per-response drain-close decision (`drainClose`, with the gradual formula in `gradualDrainClose`), drain
 * sequences by direction (`startDrainSequence`, PR #37873 for directions), and, on Envoy main only, the
 * connection-level proactive drain (`pushConnectionDrain`, `drainConnection`). A listener's `drain_type` and
 * `traffic_direction` (listener.proto) decide which decisions reach it.
 *
 * Main's proactive drain follows Envoy's changelog alone, not its code: its wording, and how the emulator reads it,
 * in docs/emulator.md#envoy-mains-proactive-drain; `pushConnectionDrain` makes the choices where it says nothing.
 */
import { randomInt } from 'node:crypto';
import type net from 'node:net';
import type { DrainScope, DrainStrategy, DrainType, ListenerSpec, RandomSource, TrafficDirection } from './types.js';
import { atLeast, type EnvoyVersion } from './versions.js';

/** A listener's direction and drain type, as the drain manager reads them. */
export interface ListenerConfig {
  readonly direction: TrafficDirection;
  readonly drainType: DrainType;
}

/** An HTTP connection manager, as its connections' drain needs it. */
export interface ConnectionManager {
  /** Its listener's drain type and direction, for the drain decision. */
  readonly config: ListenerConfig;
  /** Counts one connection in its `downstream_cx_drain_close`. */
  countDrainClose(): void;
}

/**
 * One connection of an HTTP connection manager (the HTTP listener's or the `envoy-admin` listener's), as the
 * connection-level drain of Envoy main needs to see it (`pushConnectionDrain`, `drainConnection`). The core
 * keeps them (EmulatorCore.trackHcm).
 */
export interface HcmConnection {
  readonly socket: net.Socket;
  readonly manager: ConnectionManager;
  /** What its first bytes chose (`none` before any); `upgraded` once a WebSocket took it over. */
  codec: 'none' | 'http1' | 'http2' | 'upgraded';
  /**
   * Its active streams: HTTP/1.1 requests whose response has not ended yet, or open HTTP/2 streams (counted
   * by the HTTP/2 codec). 0 is idle for main's proactive drain (`pushConnectionDrain`).
   */
  inFlight: number;
  /** Close it once no request is in flight: its drain timeout has passed (HTTP/1.1 connection-level drain). */
  closeWhenIdle: boolean;
  /** ConnectionManagerImpl's drain_state_ is no longer NotDraining: its drain sequence has started. */
  draining: boolean;
  /** Once the codec is HTTP/2: starts its drain sequence unless it has started (set by the HTTP/2 codec). */
  startHttp2Drain?: () => void;
}

/**
 * What the drain manager reads of the server it drains: the EmulatorCore (core.ts) that creates it. Named here, not
 * imported, so that the two modules do not import each other (test/architecture.test.ts).
 */
export interface DrainedServer {
  readonly version: EnvoyVersion;
  readonly options: { readonly drainStrategy: DrainStrategy; readonly drainTimeMs: number; readonly httpDrainTimeoutMs: number };
  readonly random: RandomSource;
  readonly clock: () => number;
  /** `/healthcheck/fail` taken and not undone by `/healthcheck/ok`. */
  readonly healthCheckFailed: boolean;
  /** The emulator has exited or is exiting. */
  readonly closed: boolean;
  /** The HTTP connection managers' open connections, by socket. */
  readonly hcmConnections: ReadonlyMap<net.Socket, HcmConnection>;
  /** A timer cleared at exit if still pending. */
  startTimer(action: () => void, delayMs: number): unknown;
}

/** A listener's config from its spec: UNSPECIFIED and DEFAULT unless given, as an ingress Envoy's. */
export function listenerConfig(spec: ListenerSpec | undefined): ListenerConfig {
  return { direction: spec?.direction ?? 'unspecified', drainType: spec?.drainType ?? 'default' };
}

/**
 * The first version with the connection-level proactive drain (runtime guard
 * `envoy.reloadable_features.use_connection_event_drain`, taken as on): Envoy main after 1.40. See
 * `pushConnectionDrain`.
 */
export const CONNECTION_EVENT_DRAIN_SINCE = { major: 1, minor: 41 } as const;
/**
 * The share of the drain time, at its end, over which connections with active streams are drained ("in the
 * last third of the listener drain time", main's changelog).
 */
const ACTIVE_STREAM_DRAIN_SHARE = 1 / 3;
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
  /** Whether this version drains connections proactively (Envoy main; see `pushConnectionDrain`). */
  private readonly connectionEventDrain: boolean;

  constructor(private readonly core: DrainedServer) {
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
   * CONNECTION_EVENT_DRAIN_SINCE (Envoy main) the drain event is pushed to the covered connections instead
   * (`pushConnectionDrain`).
   */
  startDrainSequence(scope: Exclude<DrainScope, 'none'>, onComplete: (() => void) | undefined): void {
    const start = this.core.clock();
    this.starts[scope === 'all' ? 'all' : 'inbound'] = start;
    if (this.connectionEventDrain) this.pushConnectionDrain(scope, start);
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
   * Whether main's proactive drain runs at all: "skipped when --drain-time-s is too short to leave room for
   * the connection manager's drain timeout". The emulator reads "room" as a drain time longer than the HCM
   * `drain_timeout` (`httpDrainTimeoutMs`): equal or shorter, no proactive drain (only the per-response one).
   */
  get proactiveDrain(): boolean {
    const { drainTimeMs, httpDrainTimeoutMs } = this.core.options;
    return this.connectionEventDrain && drainTimeMs > httpDrainTimeoutMs;
  }

  /**
   * Envoy main's connection-level proactive drain (runtime guard
   * `envoy.reloadable_features.use_connection_event_drain`, taken as on; versions from
   * CONNECTION_EVENT_DRAIN_SINCE), after main's changelog (see the file comment). When a drain sequence
   * starts, its event goes to each open connection of the HTTP connection managers it covers (the HTTP
   * listener, the `envoy-admin` listener; not those an earlier drain already covers; an inbound-only drain
   * reaches only INBOUND listeners). Each then, by its streams at that instant:
   *
   * - idle (HTTP/1.1 or HTTP/2 with no request or stream in flight, or nothing received yet): drained now
   *   ("Idle connections begin draining immediately");
   * - with active streams (a slow or long HTTP/1.1 response, an HTTP/2 stream, an upgraded WebSocket): drained
   *   at a point of the last third of the drain time, drawn uniformly with the emulator's random source
   *   ("proactively drains connections with active streams in the last third ... spreads the closure").
   *
   * What each gets is `drainConnection`. None of it when the drain time leaves no room for the HCM
   * `drain_timeout` (`proactiveDrain`). TCP proxy connections get nothing (no connection manager). The
   * emulator's choices, where the changelog says nothing: `--drain-strategy` changes none of this (the per-
   * response decision still says yes at once with `immediate`); a connection accepted after the drain
   * started gets only the per-response decision; a connection's class is fixed when the event arrives (a
   * busy one that goes idle waits for its point in the last third, unless a response drains it first); the
   * per-response decision (`drainClose`) is kept as in the releases ("rather than only checking the drain
   * state when a response is sent").
   */
  private pushConnectionDrain(scope: Exclude<DrainScope, 'none'>, start: number): void {
    if (!this.proactiveDrain) return;
    const { drainTimeMs } = this.core.options;
    const windowMs = drainTimeMs * ACTIVE_STREAM_DRAIN_SHARE;
    const covered = (config: ListenerConfig): boolean => (scope === 'all' || config.direction === 'inbound') && this.startFor(config) === start;
    for (const connection of [...this.core.hcmConnections.values()]) {
      if (!covered(connection.manager.config)) continue;
      if (connection.codec !== 'upgraded' && connection.inFlight === 0) {
        drainConnection(this.core, connection);
        continue;
      }
      const delayMs = drainTimeMs - windowMs + windowMs * ((this.core.random() % 1_000_000) / 1_000_000);
      this.startDrainTimer(() => drainConnection(this.core, connection), delayMs);
    }
  }
}

/**
 * One connection reached by main's proactive drain (`pushConnectionDrain`): its drain sequence starts if it
 * has not (ConnectionManagerImpl::startDrainSequence, counted in `downstream_cx_drain_close` once per
 * connection), and then: HTTP/2, the shutdown-notice GOAWAY and the drain timeout as for a per-response
 * drain (a final GOAWAY at its end and a close once the streams end; an idle one whose client answers the
 * notice with its own GOAWAY closes at once, see http2.ts); HTTP/1.1 with no request in flight (or nothing
 * received yet), closed now; HTTP/1.1 busy, draining: its next response headers say `Connection: close`
 * (those of the request in flight, unless already sent, as a long stream's are), and after the HCM
 * `drain_timeout` (onDrainTimeout, then checkForDeferredClose) it closes as soon as no request is in flight;
 * upgraded (WebSocket), closed now, no close frame (the socket is closed under the upgraded stream). A
 * connection closed in the meantime is skipped.
 */
export function drainConnection(core: DrainedServer, connection: HcmConnection): void {
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
