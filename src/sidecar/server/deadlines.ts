import type { Socket } from 'node:net';
import type { Clock } from '../../clock.js';

/**
 * Sockets, each with the instant its clock started, oldest first (a Map keeps insertion order), and one timer,
 * for the oldest: the first to pass `limitMs`. Those that do are removed and handed to `expired`.
 */
export class Deadlines {
  private readonly since = new Map<Socket, number>();
  private timer: NodeJS.Timeout | undefined;

  /** Deadlines on the sidecar's monotonic clock; the timer is Node's (libuv's monotonic clock too), unref'd. */
  constructor(
    private readonly limitMs: number,
    private readonly expired: (socket: Socket) => void,
    private readonly clock: Pick<Clock, 'now'>,
  ) {}

  get size(): number {
    return this.since.size;
  }

  has(socket: Socket): boolean {
    return this.since.has(socket);
  }

  oldest(): Socket | undefined {
    return this.since.keys().next().value;
  }

  sockets(): Socket[] {
    return [...this.since.keys()];
  }

  /** (Re)starts the socket's clock: it becomes the newest. */
  start(socket: Socket): void {
    this.since.delete(socket);
    this.since.set(socket, this.clock.now());
    this.arm();
  }

  delete(socket: Socket): void {
    this.since.delete(socket);
  }

  stop(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  private arm(): void {
    // Infinity: the bound is lifted (tests); setTimeout would take it as 1 ms.
    if (this.timer !== undefined || !Number.isFinite(this.limitMs)) return;
    const oldestSince = this.since.values().next();
    if (oldestSince.done === true) return;
    this.timer = setTimeout(() => this.fire(), Math.max(1, oldestSince.value + this.limitMs - this.clock.now()));
    this.timer.unref();
  }

  private fire(): void {
    this.timer = undefined;
    const cutoff = this.clock.now() - this.limitMs;
    for (const [socket, since] of this.since) {
      if (since > cutoff) break;
      this.since.delete(socket);
      this.expired(socket);
    }
    this.arm();
  }
}
