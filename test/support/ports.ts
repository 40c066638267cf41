/**
 * Free loopback ports for processes that must be told their port up front (a pod spec names its ports).
 *
 * They are drawn below the kernel's ephemeral range (net.ipv4.ip_local_port_range), where the system
 * never puts the local end of an outgoing connection nor a `listen(0)`: a port chosen here, released, and
 * bound again later (a container restarted on the same port) cannot have been taken meanwhile by one of
 * the many client connections a test makes. Another test process may still draw the same port by chance:
 * callers that start a pod retry on EADDRINUSE.
 */
import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';

const FIRST_PORT = 10_000;
const FALLBACK_EPHEMERAL_START = 32_768;

/** Where the kernel's ephemeral ports begin (Linux); 32768, its default, where that cannot be read. */
function ephemeralRangeStart(): number {
  try {
    const start = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    return Number.isInteger(start) && start > FIRST_PORT + 1_000 ? start : FALLBACK_EPHEMERAL_START;
  } catch {
    return FALLBACK_EPHEMERAL_START;
  }
}

function listen(port: number): Promise<Server | undefined> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', () => resolve(undefined));
    server.listen(port, '127.0.0.1', () => resolve(server));
  });
}

/** Several distinct free ports outside the ephemeral range: all held open at once while they are chosen. */
export async function freePorts(count: number): Promise<number[]> {
  const end = ephemeralRangeStart();
  const held: Server[] = [];
  try {
    for (let attempt = 0; held.length < count; attempt += 1) {
      if (attempt > 1_000) throw new Error(`no ${count} free ports found between ${FIRST_PORT} and ${end}`);
      const port = FIRST_PORT + Math.floor(Math.random() * (end - FIRST_PORT));
      const server = await listen(port);
      if (server !== undefined) held.push(server);
    }
    return held.map((server) => (server.address() as { port: number }).port);
  } finally {
    await Promise.all(held.map((server) => new Promise((resolve) => server.close(resolve))));
  }
}

export async function freePort(): Promise<number> {
  const [port] = await freePorts(1);
  return port as number;
}
