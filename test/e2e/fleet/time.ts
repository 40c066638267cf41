/**
 * Time compression for the fleet simulation. Every duration of the model (check-delay, deregistration lag,
 * load-balancer poll interval, grace period, probe periods…) is written in real-cluster milliseconds and run
 * `scale` times faster, so a 30 s lag takes 0.6 s at scale 50. Reports convert measured times back.
 */
export class TimeScale {
  constructor(readonly factor: number) {
    if (!(factor >= 1)) throw new Error(`scale must be at least 1, got ${factor}`);
  }

  /** Real milliseconds to wait for `clusterMs` of cluster time (whole ms: the sidecar's flags take no fractions). */
  real(clusterMs: number): number {
    return Math.round(clusterMs / this.factor);
  }

  /** Cluster milliseconds that `realMs` of measured time stands for. */
  cluster(realMs: number): number {
    return realMs * this.factor;
  }
}

/** A sleep that an abort ends early (resolving, never rejecting): loops check their signal after it. */
export function pause(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted === true) return resolve();
    const done = (): void => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, Math.max(0, ms));
    signal?.addEventListener('abort', done, { once: true });
  });
}
