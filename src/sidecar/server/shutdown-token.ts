/**
 * The token that guards /shutdown and /wait: checked without leaking it through timing, and the calls refused
 * for want of it counted and logged without flooding the log.
 */
import { SIDECAR_PATHS } from '../../config/endpoints.js';
import { LogThrottle } from '../log-throttle.js';
import type { SidecarLog } from '../log.js';

/**
 * /shutdown and /wait calls refused for want of the token: counted, and logged as a LogThrottle does. The
 * first line comes at once (an operator must see a hook sent without the pod's token); a flood of strangers
 * then adds one line per period, with the count and the last caller.
 */
export class RefusalLog {
  /** Cumulative, never reset. */
  total = 0;
  private sinceLine = 0;
  private last = { path: '', remote: '' };
  private readonly throttle: LogThrottle;

  constructor(
    private readonly log: SidecarLog,
    periodMs: number,
  ) {
    this.throttle = new LogThrottle(periodMs, () => this.flush());
  }

  refused(path: string, remote: string | undefined): void {
    this.total += 1;
    this.sinceLine += 1;
    this.last = { path, remote: remote ?? 'unknown' };
    this.throttle.noted();
  }

  stop(): void {
    this.throttle.stop();
  }

  private flush(): boolean {
    const count = this.sinceLine;
    if (count === 0) return false;
    this.sinceLine = 0;
    const { path, remote } = this.last;
    const fields = { event: 'shutdown_refused', path, remote, refused: count, total: this.total };
    const message =
      count === 1
        ? `${path} without the right token refused (from ${remote})`
        : `${count} calls of ${SIDECAR_PATHS.shutdown} or ${SIDECAR_PATHS.wait} without the right token refused since the last such line (${this.total} in all); the last: ${path} from ${remote}`;
    this.log.info(fields, message);
    return true;
  }
}

/**
 * Compares digests, so that neither the token's content nor its length leaks through timing. node:crypto is
 * loaded at the first check, not at start: loading it (OpenSSL's tables included) costs the sidecar 3-4 MiB of
 * memory for a check that runs once per pod, when it is deleted.
 */
export function bearerCheck(token: string | undefined): (header: string | undefined) => boolean {
  if (token === undefined) return () => true;
  let expected: Buffer | undefined;
  return (header) => {
    if (header === undefined) return false;
    const { createHash, timingSafeEqual } = process.getBuiltinModule('node:crypto');
    const digest = (text: string): Buffer => createHash('sha256').update(text).digest();
    expected ??= digest(`Bearer ${token}`);
    return timingSafeEqual(digest(header), expected);
  };
}
