/**
 * Errors whose message is written for the person running the program: it says what is wrong and what to
 * do about it, so an entry point prints the message alone, where a stack trace would only bury it. Any
 * other error that ends a program is a bug, and is printed with its stack.
 */

/** Exit codes of every entry point and command: done, failed, or the command line or a setting is wrong. */
export const EXIT_OK = 0;
export const EXIT_FAILURE = 1;
export const EXIT_USAGE = 2;

export abstract class UserFacingError extends Error {
  /** The exit code when this error ends the program. */
  readonly exitCode: number = EXIT_FAILURE;
}

/** A wrong command line; the message starts with the flag or word at fault. */
export class UsageError extends UserFacingError {
  override readonly name = 'UsageError';
  override readonly exitCode = EXIT_USAGE;
}

/** What an entry point prints (after its own name) for the error that ends it, and the exit code. */
export function describeFailure(error: unknown): { readonly text: string; readonly exitCode: number } {
  if (error instanceof UserFacingError) return { text: error.message, exitCode: error.exitCode };
  const text = error instanceof Error ? (error.stack ?? error.message) : String(error);
  return { text, exitCode: EXIT_FAILURE };
}

/** How every entry point ends on an error: `<program>: <message or stack>` on stderr, and the exit code set. */
export function reportFailure(error: unknown, program = 'envoy-shutdown-manager'): void {
  const { text, exitCode } = describeFailure(error);
  process.stderr.write(`${program}: ${text}\n`);
  process.exitCode = exitCode;
}

/** An error's message, or what was thrown, as text. */
export function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** The innermost reason a connection failed (ECONNREFUSED, a certificate error...), for the API server, Prometheus and a manifest's URL alike. */
export function causeOf(error: unknown): string {
  let current: unknown = error;
  const reasons: string[] = [];
  while (current instanceof Error) {
    const code = (current as NodeJS.ErrnoException).code;
    reasons.push(code !== undefined && !current.message.includes(code) ? `${current.message} (${code})` : current.message);
    current = current.cause;
  }
  return reasons.at(-1) ?? String(error);
}
