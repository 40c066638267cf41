#!/usr/bin/env node
/** Entry point of `npm run certs`; the command is src/cli/certs.ts. */
import { processIo } from './cli/io.js';
import { runCertsCommand } from './cli/certs.js';
import { reportFailure } from './errors.js';

runCertsCommand(process.argv.slice(2), processIo()).then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => reportFailure(error, 'certs'),
);
