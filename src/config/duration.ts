/**
 * Go-style durations ("500ms", "5s", "1m30s"), the format Contour's shutdown-manager and
 * Kubernetes users already write. Parsing is strict on purpose: a typo in an annotation must be
 * reported, not silently read as something else.
 */

const UNIT_MS: Readonly<Record<string, number>> = {
  ns: 1e-6,
  us: 1e-3,
  µs: 1e-3,
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
};

const WHOLE = /^(?:\d+(?:\.\d+)?(?:ns|us|µs|ms|s|m|h))+$/;
const PART = /(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)/g;

export const DURATION_FORM = 'a Go duration such as 500ms, 5s, 2m or 1m30s';

/** Milliseconds, or undefined when `text` is not a Go duration. "0" alone is accepted, as in Go. */
export function parseDuration(text: string): number | undefined {
  const trimmed = text.trim();
  if (trimmed === '0') return 0;
  if (!WHOLE.test(trimmed)) return undefined;
  let total = 0;
  for (const [, amount, unit] of trimmed.matchAll(PART)) {
    total += Number(amount) * (UNIT_MS[unit as string] as number);
  }
  return Math.round(total);
}

/** The shortest Go-style spelling of a whole number of milliseconds: 90000 → "1m30s". */
export function formatDuration(ms: number): string {
  if (ms === 0) return '0s';
  const parts: string[] = [];
  let rest = Math.round(ms);
  for (const [unit, size] of [['h', 3_600_000], ['m', 60_000], ['s', 1000]] as const) {
    if (rest >= size) {
      parts.push(`${Math.floor(rest / size)}${unit}`);
      rest %= size;
    }
  }
  if (rest > 0) parts.push(`${rest}ms`);
  return parts.join('');
}
