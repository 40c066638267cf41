import { EXIT_USAGE, UserFacingError } from '../errors.js';

/** A setting that could not be used, named the way the user wrote it (flag, env variable or annotation). */
export class ConfigError extends Error {
  override readonly name = 'ConfigError';

  constructor(
    /** Where the value came from: "flag --check-interval", "annotation shutdown-manager.io/serve-port". */
    readonly source: string,
    readonly value: string,
    /** What is accepted, or why this value cannot work. */
    readonly expected: string,
    /** The setting at fault ("check-delay"), for metrics and programs; the message is for people. */
    readonly setting: string = 'unknown',
  ) {
    super(`${source}: ${JSON.stringify(value)} is not valid; expected ${expected}`);
  }
}

/** Several settings were wrong at once: the user should see all of them, not fix them one run at a time. */
export class ConfigErrors extends UserFacingError {
  override readonly name = 'ConfigErrors';
  override readonly exitCode = EXIT_USAGE;

  constructor(readonly errors: readonly ConfigError[]) {
    super(errors.map((error) => error.message).join('; '));
  }
}
