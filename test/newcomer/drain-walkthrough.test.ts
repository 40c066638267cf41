/**
 * docs/development.md "Watch a drain on your machine", run as written: `npm run envoy-emulator`, `npm start -- mode=sidecar
 * …`, the client that holds a connection, `curl localhost:8090/shutdown` (made with node's http client). Only the ports are moved, by flags
 * appended to the documented ones (the programs take the last), so that a machine running Envoy on 9001 does
 * not matter. Then SIGTERM to each npm, as a process supervisor sends it, must stop the servers themselves.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import { spawn } from 'node:child_process';
import { test } from 'node:test';
import { POD_DRAIN_SETTINGS } from '../../src/config/drain.js';
import { cleanEnvironment } from '../support/process.js';
import { sampleOf } from '../support/prometheus.js';
import { freePorts } from '../support/ports.js';
import { waitUntil, within } from '../support/wait.js';
import { docCommands, docSection, flagValue, packageScripts, portIsFree, spawnNpm, words } from './support.js';

const DOC = 'docs/development.md';
const HEADING = 'Watch a drain on your machine';

/** The documented terminal 3, for a port: a connection held open until the process is stopped. */
const clientCommand = (port: number): string => `node -e "require('net').connect(${port}, '127.0.0.1')"`;

interface Answer {
  readonly status: number;
  readonly body: string;
}

function get(url: string): Promise<Answer> {
  return new Promise((resolvePromise, reject) => {
    http
      .get(url, (response) => {
        let body = '';
        response.setEncoding('utf8').on('data', (chunk: string) => (body += chunk));
        response.on('end', () => resolvePromise({ status: response.statusCode ?? 0, body }));
      })
      .on('error', reject);
  });
}

test('the documented block is four commands whose ports agree with each other and with the scripts', () => {
  const [emulator, sidecar, client, shutdown, ...rest] = docCommands(DOC, HEADING);
  assert.deepEqual(rest, []);
  assert.equal(emulator, 'npm run envoy-emulator');
  assert.match(sidecar ?? '', /^npm start -- mode=sidecar /);
  const script = words(packageScripts()['envoy-emulator'] ?? '');
  assert.equal(flagValue(words(sidecar ?? ''), 'admin-port'), flagValue(script, 'admin-port'), "the sidecar's --admin-port is the emulator's");
  assert.equal(client, clientCommand(Number(flagValue(script, 'tcp-port'))), "the client connects to the emulator's TCP proxy listener");
  assert.equal(shutdown, `curl localhost:${POD_DRAIN_SETTINGS['serve-port'].default}/shutdown`, "curl calls the sidecar's default serve port");
  // The prose names the ports too.
  for (const name of ['admin-port', 'http-port', 'tcp-port']) {
    assert.ok(docSection(DOC, HEADING).includes(` ${flagValue(script, name)}`), `the docs name the emulator's ${name}`);
  }
});

test('emulator + sidecar + a held connection: /shutdown blocks until it closes, then says drained; SIGTERM to npm stops both', { timeout: 90_000 }, async (t) => {
  const [emulatorLine, sidecarLine] = docCommands(DOC, HEADING);
  const [adminPort, httpPort, tcpPort, servePort] = (await freePorts(4)) as [number, number, number, number];

  const emulator = spawnNpm([...words(emulatorLine ?? '').slice(1), '--', `--admin-port=${adminPort}`, `--http-port=${httpPort}`, `--tcp-port=${tcpPort}`]);
  t.after(() => emulator.kill());
  const ports = await emulator.json((line) => 'admin' in line);
  assert.deepEqual([ports.admin, ports.http, ports.tcp], [adminPort, httpPort, tcpPort], 'it prints its ports');

  const sidecar = spawnNpm([...words(sidecarLine ?? '').slice(1), `--admin-port=${adminPort}`, `--serve-port=${servePort}`]);
  t.after(() => sidecar.kill());
  const listening = await sidecar.json((line) => line.event === 'listening');
  assert.equal(listening.address, '127.0.0.1', "dev.env keeps the sidecar's unprotected /shutdown on loopback");
  await sidecar.json((line) => line.event === 'envoy_admin_reachable');

  // Terminal 3: the documented client line itself, on the test's port, in a process group as in a terminal.
  const client = spawn('sh', ['-c', clientCommand(tcpPort)], { stdio: 'ignore', env: cleanEnvironment(), detached: true });
  const signalClient = (signal: NodeJS.Signals): void => {
    try {
      process.kill(-(client.pid as number), signal);
    } catch {
      // Already gone.
    }
  };
  t.after(() => signalClient('SIGKILL'));
  // Connected once Envoy's (the emulator's) own count says so, as the sidecar will read it.
  const stat = `listener.${String((ports.listeners as { tcp: string }).tcp)}.downstream_cx_active`;
  await waitUntil(async () => (await get(`http://127.0.0.1:${adminPort}/stats?filter=${encodeURIComponent(`^${stat}$`)}`)).body.includes(`${stat}: 1`), 10_000, 'the client connecting');

  let answeredAt: number | undefined;
  const answer = get(`http://localhost:${servePort}/shutdown`).finally(() => (answeredAt = Date.now()));
  const polled = (line: Record<string, unknown>): boolean => line.event === 'poll' && line.open_connections === 1;
  await sidecar.json(polled);
  const drain = await get(`http://localhost:${servePort}/drain`);
  assert.equal((JSON.parse(drain.body) as { state: string }).state, 'draining');
  // Polls a second apart (--check-interval=1s) keep seeing the connection, and the call is still held.
  await sidecar.json((line) => polled(line) && Number(line.elapsed_ms) >= 2_000);
  assert.equal(answeredAt, undefined, '/shutdown returned while a connection was open');

  const closedAt = Date.now();
  signalClient('SIGINT'); // Ctrl-C: to the terminal's foreground group
  const { status, body } = await within(answer, 10_000, '/shutdown answering once the client stopped');
  assert.equal(status, 200, body);
  assert.match(body, /^drained: 0 open connections \(at most 0 allowed\) after /, 'what the docs say curl prints');
  assert.ok((answeredAt ?? Infinity) - closedAt < 3_000, `answered ${(answeredAt ?? Infinity) - closedAt} ms after the close`);

  const metrics = (await get(`http://localhost:${servePort}/metrics`)).body;
  assert.equal(sampleOf(metrics, 'shutdown_manager_drain_state{state="drained"}'), 1);
  const remaining = sampleOf(metrics, 'shutdown_manager_drain_remaining_seconds') ?? NaN;
  assert.ok(remaining > 200 && remaining < 290, `time left when it drained: ${remaining} s of the default 4m50s`);

  // SIGTERM to npm alone (not its group), as a supervisor or `kill <npm pid>` sends it.
  for (const npm of [sidecar, emulator]) npm.child.kill('SIGTERM');
  // npm waits for its script's output to close: a server left running by its shell would keep npm up too.
  const exits = await within(Promise.all([sidecar.exited, emulator.exited]), 5_000, 'npm exiting after SIGTERM');
  await waitUntil(async () => (await portIsFree(servePort)) && (await portIsFree(adminPort)), 3_000, 'the servers stopping');
  assert.deepEqual(exits.map((exit) => exit.code), [0, 0], `npm exits 0 with its server\n${sidecar.stderr()}\n${emulator.stderr()}`);
});
