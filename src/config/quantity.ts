/**
 * Kubernetes resource quantities (k8s.io/apimachinery/pkg/api/resource, ParseQuantity):
 *
 *   <sign>?<digits>[.<digits>]<suffix>      suffix: Ki Mi Gi Ti Pi Ei | n u m "" k M G T P E | e<exponent> E<exponent>
 *
 * such as 100m, 0.5, 64Mi, 1Gi, 1e3, 1k. A quantity is kept as the text the user wrote (the API server
 * canonicalises it) and as an exact fraction, so that a request can be compared with its limit without the
 * rounding of floating point (1E and 1000000000000000001 differ by one).
 */

export interface Quantity {
  /** As written (trimmed): what goes into the pod spec. */
  readonly text: string;
  /** The value is numerator / denominator, exactly; the denominator is a power of ten, at least 1. */
  readonly numerator: bigint;
  readonly denominator: bigint;
}

export class QuantityError extends Error {
  override readonly name = 'QuantityError';
}

const SYNTAX = /^([+-]?)(\d*)(?:\.(\d*))?(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?\d+)?$/;

const BINARY: Readonly<Record<string, bigint>> = { Ki: 1n << 10n, Mi: 1n << 20n, Gi: 1n << 30n, Ti: 1n << 40n, Pi: 1n << 50n, Ei: 1n << 60n };
const DECIMAL: Readonly<Record<string, number>> = { n: -9, u: -6, m: -3, '': 0, k: 3, M: 6, G: 9, T: 12, P: 15, E: 18 };

/**
 * Kubernetes keeps quantities within an int64 of their smallest unit; far beyond any container's resources.
 * The exponent is bounded first, so that "1e999999999" is refused before it becomes a huge number.
 */
const MAX_VALUE = (1n << 63n) - 1n;
const MAX_EXPONENT = 40;
/** Annotation values may be long; a quantity never is, and a bound keeps the arithmetic small. */
const MAX_LENGTH = 64;

/** Parses a quantity; throws QuantityError saying what is wrong. Negative quantities are refused: resources are never negative. */
export function parseQuantity(raw: string): Quantity {
  const text = raw.trim();
  if (text === '') throw new QuantityError('it is empty');
  if (text.length > MAX_LENGTH) throw new QuantityError(`it is longer than ${MAX_LENGTH} characters`);
  const match = SYNTAX.exec(text);
  if (match === null) throw new QuantityError('it is not a number with an optional suffix (Ki, Mi, Gi, Ti, Pi, Ei, n, u, m, k, M, G, T, P, E or an exponent e3)');
  const [, sign = '', whole = '', fraction = '', suffix = ''] = match;
  if (whole === '' && fraction === '') throw new QuantityError('it has no digits');
  if (sign === '-' && /[1-9]/.test(whole + fraction)) throw new QuantityError('it is negative');

  let exponent10 = -fraction.length;
  let factor = 1n;
  if (Object.hasOwn(BINARY, suffix)) factor = BINARY[suffix] as bigint;
  else if (Object.hasOwn(DECIMAL, suffix)) exponent10 += DECIMAL[suffix] as number;
  else exponent10 += Number(suffix.slice(1));
  if (Math.abs(exponent10) > MAX_EXPONENT) throw new QuantityError('its exponent is out of range');

  const digits = BigInt(whole + fraction || '0') * factor;
  const numerator = exponent10 >= 0 ? digits * 10n ** BigInt(exponent10) : digits;
  const denominator = exponent10 >= 0 ? 1n : 10n ** BigInt(-exponent10);
  if (numerator / denominator > MAX_VALUE) throw new QuantityError('it is too large');
  return { text, numerator, denominator };
}

/** Negative when a < b, 0 when equal, positive when a > b: exact. */
export function compareQuantities(a: Quantity, b: Quantity): number {
  const left = a.numerator * b.denominator;
  const right = b.numerator * a.denominator;
  return left < right ? -1 : left > right ? 1 : 0;
}

/** Whether the quantity is a whole multiple of 1 / `per` (per 1000: whole millicores; per 1: whole bytes). */
export function isMultipleOf(quantity: Quantity, per: bigint): boolean {
  return (quantity.numerator * per) % quantity.denominator === 0n;
}

export function isZero(quantity: Quantity): boolean {
  return quantity.numerator === 0n;
}
