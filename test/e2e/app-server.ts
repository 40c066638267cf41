/**
 * The application container of a sidecar-proxy pod, for the kubelet simulator: an HTTP server that a sidecar
 * Envoy routes its requests to.
 *
 *   node --import tsx test/e2e/app-server.ts --port=N
 *
 * `GET /delay/<ms>` answers after that long (a request that takes time, so that some are always in flight);
 * anything else at once. Prints one JSON line on stdout once listening: {"pid":…,"port":…}.
 *
 * On SIGTERM it exits at once, cutting the requests it is serving, as many applications do (and as any does
 * at SIGKILL): what keeps those requests alive must be the pod's shutdown order, not the application's own
 * graceful shutdown. The exit line on stderr says how many requests were cut.
 */
import { createServer } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';

const portArg = process.argv.slice(2).find((arg) => arg.startsWith('--port='));
const port = Number(portArg?.slice('--port='.length));
if (!Number.isInteger(port) || port <= 0 || port > 65535) {
  process.stderr.write(`app-server: --port=N (1 to 65535) is required, got ${JSON.stringify(portArg)}\n`);
  process.exit(2);
}

let inFlight = 0;
const server = createServer((request, response) => {
  inFlight += 1;
  response.on('close', () => (inFlight -= 1));
  request.resume();
  const delayMs = Number(/^\/delay\/(\d{1,6})$/.exec(request.url ?? '')?.[1] ?? 0);
  void sleep(delayMs).then(() => {
    if (response.destroyed) return;
    response.writeHead(200, { 'content-type': 'text/plain' });
    response.end('hello from the app\n');
  });
});
server.keepAliveTimeout = 60_000;

process.once('SIGTERM', () => {
  process.stderr.write(`app-server: SIGTERM with ${inFlight} requests in flight: exiting now\n`);
  process.exit(0);
});

server.listen(port, '127.0.0.1', () => {
  process.stdout.write(`${JSON.stringify({ pid: process.pid, port })}\n`);
});
server.on('error', (error) => {
  process.stderr.write(`app-server: ${error.message}\n`);
  process.exit(1);
});
