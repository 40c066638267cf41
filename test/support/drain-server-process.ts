/**
 * The built drain server (dist/sidecar/server.js) alone in a child process, with a stub drain and connection
 * limits of the test's choosing: the negative control of the per-connection bounds, whose effect on resident
 * memory can only be seen in a process of its own. The sidecar itself (sidecar-process.ts) cannot be given
 * other limits. Run `npm run build` first.
 */
import { existsSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import type { ConnectionLimits } from '../../src/sidecar/server/connection-limits.js';
import { REPO_ROOT, startNode, type LoggingProcess } from './process.js';

const BUILT_SERVER = `${REPO_ROOT}/dist/sidecar/server.js`;

/** Runs in the child: JSON log lines on stdout, as the sidecar writes them; a drain that never starts. */
const CHILD = `
const { startDrainServer } = await import(process.argv[1]);
const limits = JSON.parse(process.argv[2], (_key, value) => (value === 'Infinity' ? Infinity : value));
const line = (level) => (fields, msg) => process.stdout.write(JSON.stringify({ level, ...fields, msg }) + '\\n');
const log = { info: line('info'), warn: line('warn'), error: line('error') };
const drain = {
  shutdown: () => new Promise(() => undefined),
  wait: async () => undefined,
  snapshot: () => ({ state: 'idle', openConnections: null, listeners: ['0.0.0.0_10000', '0.0.0.0_10001'] }),
  readiness: () => ({ ready: true, detail: 'stub drain' }),
};
const server = await startDrainServer({ drain, waitWindowMs: 100, host: '127.0.0.1', port: 0, log, connectionLimits: limits });
log.info({ event: 'listening', port: server.port }, 'listening');
process.on('SIGTERM', () => server.close().then(() => process.exit(0)));
`;

export interface DrainServerProcess extends LoggingProcess {
  readonly port: number;
}

/** Starts the drain server with `limits` over the defaults (Infinity lifts a bound); resolves once it listens. */
export async function spawnDrainServer(limits: Partial<ConnectionLimits>): Promise<DrainServerProcess> {
  if (!existsSync(BUILT_SERVER)) throw new Error(`${BUILT_SERVER} is missing: run \`npm run build\` before these tests`);
  const encoded = JSON.stringify(limits, (_key, value: unknown) => (value === Infinity ? 'Infinity' : value));
  const child = await startNode(['--input-type=module', '--eval', CHILD, pathToFileURL(BUILT_SERVER).href, encoded], {
    ready: (line) => line['event'] === 'listening',
  });
  return { ...child, port: Number(child.ready['port']) };
}
