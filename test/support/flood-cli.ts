/**
 * A flood (see flood.ts) as a child process, so that it does not share the test process's event loop:
 *
 *   node --import tsx test/support/flood-cli.ts '<FloodSpec as JSON>'
 *
 * Prints {"event":"started"} as it starts, then {"event":"done","result":<FloodResult>} and exits 0.
 */
import { flood, type FloodSpec } from './flood.js';

const spec = JSON.parse(process.argv[2] ?? '') as FloodSpec;
process.stdout.write(`${JSON.stringify({ event: 'started' })}\n`);
const result = await flood(spec);
process.stdout.write(`${JSON.stringify({ event: 'done', result })}\n`);
