/**
 * Slow clients cannot hold the webhook's sockets (issue 11: trickled headers kept 130 of 150 sockets open for
 * 40 s and more). Real sockets trickle bytes at a webhook with short test bounds: each is closed by the server
 * within its bound while a well-behaved client is still served. The production bounds are checked as set.
 */
import assert from 'node:assert/strict';
import net from 'node:net';
import tls from 'node:tls';
import { after, before, test } from 'node:test';
import { CONNECTION_LIMITS, type ConnectionLimits } from '../../src/webhook/server.js';
import { loadReview, postReview, startTestWebhook, type RunningWebhook } from '../support/webhook.js';
import { runsAlone } from '../support/exclusive.js';

// It loads or times the machine: never beside another such file (see test/support/exclusive.ts).
runsAlone();

const LIMITS = {
  handshakeMs: 1_500,
  headersMs: 2_000,
  requestMs: 3_000,
  // Longer than any wait below: the sockets must be cut by the bound under test, not for being idle.
  idleMs: 60_000,
  checkIntervalMs: 100,
} satisfies Partial<ConnectionLimits>;
/** Time beyond a bound that a loaded machine may take to notice it (timers run late, never early). */
const SLACK_MS = 5_000;
const TRICKLE_EVERY_MS = 100;

let webhook: RunningWebhook;
let port: number;
before(async () => {
  webhook = await startTestWebhook([], 10_000, { connectionLimits: LIMITS });
  port = Number(new URL(webhook.server.url).port);
});
after(() => webhook.close());

/** A client socket that the test never ends: only the server may close it. */
class SlowClient {
  /** When its bound started: the first byte of its request, or its TCP connection. */
  startedAt = Date.now();
  bytesSent = 0;
  received = '';
  readonly closed: Promise<number>;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    readonly name: string,
    readonly socket: net.Socket,
  ) {
    this.closed = new Promise((resolve) => socket.once('close', () => resolve(Date.now())));
    socket.on('data', (chunk: Buffer) => (this.received += chunk.toString('latin1')));
    socket.on('error', () => undefined); // the server cutting the socket is what is expected
    socket.once('close', () => clearInterval(this.timer));
  }

  /** Sends `first`, then one more byte every TRICKLE_EVERY_MS: never idle, never done. */
  trickle(first: string, each: string): void {
    this.startedAt = Date.now();
    this.send(first);
    this.timer = setInterval(() => this.send(each), TRICKLE_EVERY_MS);
  }

  stop(): void {
    clearInterval(this.timer);
    this.socket.destroy();
  }

  private send(text: string): void {
    if (this.socket.destroyed) return;
    this.socket.write(text);
    this.bytesSent += text.length;
  }
}

function connectTls(): Promise<tls.TLSSocket> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ port, host: '127.0.0.1', ca: webhook.ca, servername: 'localhost' }, () => {
      socket.off('error', reject);
      resolve(socket);
    });
    socket.once('error', reject);
  });
}

test('trickled headers, a trickled body, a silent connection and a stalled handshake are all cut within their bounds, while a real client is served', async (t) => {
  const headerTricklers = await Promise.all(Array.from({ length: 30 }, async (_, index) => new SlowClient(`headers ${index}`, await connectTls())));
  const bodyTrickler = new SlowClient('body', await connectTls());
  const silent = new SlowClient('silent after TLS', await connectTls());
  const noHandshake = new SlowClient('no TLS handshake', net.connect({ port, host: '127.0.0.1' }));
  const all = [...headerTricklers, bodyTrickler, silent, noHandshake];
  t.after(() => all.forEach((client) => client.stop()));

  for (const client of headerTricklers) client.trickle('POST /mutate HTTP/1.1\r\nHost: localhost\r\nX-Slow: ', 'a');
  bodyTrickler.trickle('POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"a":"', 'b');

  // Served meanwhile, on a connection of its own, while every slow socket is still open.
  const body = await loadReview('deployment-envoy-pod.json');
  const answer = await postReview(webhook, body);
  assert.equal(answer.status, 200, answer.text);
  assert.equal(answer.json().response.patchType, 'JSONPatch');
  assert.deepEqual(all.filter((client) => client.socket.destroyed).map((client) => client.name), [], 'slow sockets still open when the real client was served');

  const bounds = new Map<SlowClient, number>([
    ...headerTricklers.map((client) => [client, LIMITS.headersMs] as const),
    [bodyTrickler, LIMITS.requestMs],
    [silent, LIMITS.headersMs],
    [noHandshake, LIMITS.handshakeMs],
  ]);
  const closedAt = await Promise.all(all.map((client) => client.closed));
  all.forEach((client, index) => {
    const held = (closedAt[index] as number) - client.startedAt;
    const bound = bounds.get(client) as number;
    // 250 ms: the silent socket's clock starts on the server a moment before its client sees the handshake done.
    assert.ok(held >= bound - 250, `${client.name} cut after ${held} ms, before its bound of ${bound} ms`);
    assert.ok(held < bound + SLACK_MS, `${client.name} held ${held} ms; bound ${bound} ms`);
  });
  for (const client of [...headerTricklers, bodyTrickler]) {
    assert.ok(client.bytesSent > 10, `${client.name} was trickling (sent ${client.bytesSent} bytes)`);
    assert.match(client.received, /^HTTP\/1\.1 408 /, `${client.name} is told why`);
  }
  assert.equal(noHandshake.received, '', 'no HTTP without TLS');
});

test('a kept-alive connection idle for longer than the header bound still serves its next request', async (t) => {
  const socket = await connectTls();
  t.after(() => socket.destroy());
  const ask = (): Promise<string> =>
    new Promise((resolve) => {
      let received = '';
      const onData = (chunk: Buffer): void => {
        received += chunk.toString('latin1');
        if (received.includes('\r\n\r\nok\n')) {
          socket.off('data', onData);
          resolve(received);
        }
      };
      socket.on('data', onData);
      socket.write('GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n');
    });
  assert.match(await ask(), /^HTTP\/1\.1 200 /);
  await new Promise((resolve) => setTimeout(resolve, LIMITS.headersMs + 500));
  assert.equal(socket.destroyed, false);
  assert.match(await ask(), /^HTTP\/1\.1 200 /);
});

test('a request that goes silent halfway through its body is cut after the idle bound', async (t) => {
  const idleBound = await startTestWebhook([], 10_000, { connectionLimits: { idleMs: 1_000, requestMs: 60_000, headersMs: 60_000 } });
  t.after(() => idleBound.close());
  const socket = await new Promise<tls.TLSSocket>((resolve, reject) => {
    const connected = tls.connect({ port: Number(new URL(idleBound.server.url).port), host: '127.0.0.1', ca: idleBound.ca, servername: 'localhost' }, () => resolve(connected));
    connected.once('error', reject);
  });
  const stalled = new SlowClient('stalled upload', socket);
  t.after(() => stalled.stop());
  stalled.socket.write('POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"a":');
  const held = (await stalled.closed) - stalled.startedAt;
  assert.ok(held >= 1_000 - 250 && held < 1_000 + SLACK_MS, `held ${held} ms; idle bound 1000 ms`);
});

test('the production bounds are the ones on the server, and generous for an API server', async (t) => {
  const production = await startTestWebhook();
  t.after(() => production.close());
  const server = production.server.app.server;
  assert.equal(server.headersTimeout, CONNECTION_LIMITS.headersMs);
  assert.equal(server.requestTimeout, CONNECTION_LIMITS.requestMs);
  assert.equal(server.timeout, CONNECTION_LIMITS.idleMs);
  assert.equal(server.keepAliveTimeout, CONNECTION_LIMITS.keepAliveMs);
  assert.equal((server as unknown as { connectionsCheckingInterval: number }).connectionsCheckingInterval, CONNECTION_LIMITS.checkIntervalMs);
  // Seconds, not milliseconds: a real API server must never be cut; a slow client at most this long.
  assert.ok(CONNECTION_LIMITS.handshakeMs >= 5_000 && CONNECTION_LIMITS.headersMs >= 5_000 && CONNECTION_LIMITS.requestMs >= 30_000, 'the bounds leave an API server time');
  assert.ok(CONNECTION_LIMITS.headersMs + CONNECTION_LIMITS.checkIntervalMs <= 15_000, 'headers bounded well below the 40 s seen');
});
