#!/usr/bin/env node
/** Entry point of `npm run certs`; see command.ts. */
import { EXIT_FAILURE, runCertsCommand } from './command.js';

runCertsCommand(process.argv.slice(2), {
  stdout: (text) => process.stdout.write(text),
  stderr: (text) => process.stderr.write(text),
}).then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    process.stderr.write(`certs: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exitCode = EXIT_FAILURE;
  },
);
