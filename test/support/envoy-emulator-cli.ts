/**
 * The Envoy emulator as a process, standing in for the Envoy container in end-to-end tests:
 *
 *   node --import tsx test/support/envoy-emulator-cli.ts [--admin-port=0] [--http-port=0] [--tcp-port=0]
 *     [--host=127.0.0.1] [--stat-address=0.0.0.0] [--workers=2] [--drain-time=600000]
 *     [--fault=none|slow:<ms>|status:<code>|garbage|empty|down] [--fault-paths=/stats,/healthcheck]
 *
 * Prints one JSON line on stdout once listening: {"pid":…,"host":"127.0.0.1","admin":…,"http":…,"tcp":…,
 * "listeners":{"http":"0.0.0.0_…","tcp":"0.0.0.0_…"}}. On SIGTERM or SIGINT it closes every listener and
 * connection at once, as Envoy does, and exits 0. While running, its admin port also answers
 * POST /emulator/fault?fault=…[&paths=/stats,…][&for_ms=…] (change the fault, optionally for a while: the only
 * way back from `down`) and GET /emulator/requests (the admin requests received, as JSON).
 */
import { parseArgs } from 'node:util';
import { EnvoyEmulator, parseFault } from './envoy-emulator.js';

function integer(name: string, text: string | undefined, fallback: number): number {
  if (text === undefined) return fallback;
  const value = Number(text);
  if (!Number.isInteger(value) || value < 0) throw new Error(`--${name}: ${JSON.stringify(text)} is not a whole number`);
  return value;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      'admin-port': { type: 'string' },
      'http-port': { type: 'string' },
      'tcp-port': { type: 'string' },
      host: { type: 'string' },
      'stat-address': { type: 'string' },
      workers: { type: 'string' },
      'drain-time': { type: 'string' },
      fault: { type: 'string' },
      'fault-paths': { type: 'string' },
    },
    strict: true,
  });
  const fault = parseFault(values.fault ?? 'none');
  if (fault === undefined) throw new Error(`--fault: ${JSON.stringify(values.fault)} is not none, slow:<ms>, status:<code>, garbage, empty or down`);
  const emulator = await EnvoyEmulator.start({
    adminPort: integer('admin-port', values['admin-port'], 0),
    httpPort: integer('http-port', values['http-port'], 0),
    tcpPort: integer('tcp-port', values['tcp-port'], 0),
    workers: integer('workers', values.workers, 2),
    drainTimeMs: integer('drain-time', values['drain-time'], 600_000),
    fault,
    faultPaths: (values['fault-paths'] ?? '').split(',').filter((path) => path !== ''),
    ...(values.host === undefined ? {} : { host: values.host }),
    ...(values['stat-address'] === undefined ? {} : { statAddress: values['stat-address'] }),
  });
  const stop = (): void => {
    void emulator.close().then(() => process.exit(0));
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
  process.stdout.write(
    `${JSON.stringify({ pid: process.pid, host: emulator.host, ...emulator.ports, listeners: emulator.listenerNames })}\n`,
  );
}

main().catch((error: unknown) => {
  process.stderr.write(`envoy-emulator: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(2);
});
