/**
 * SIGTERM under load, through the built entry point: until --shutdown-delay ends, requests in flight and
 * requests arriving on open keep-alive connections are answered normally, with Connection: close; only then
 * are the connections still open cut, and the process exits at once.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, request } from 'node:https';
import tls from 'node:tls';
import { test } from 'node:test';
import { startWebhook } from '../support/process.js';
import { FIXTURES } from '../support/webhook.js';

const DELAY_MS = 4_000;

interface RawResponse {
  readonly status: number;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: string;
}

/** Reads one HTTP/1.1 response with a Content-Length body from `socket`. */
function readResponse(socket: tls.TLSSocket): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    let buffer = Buffer.alloc(0);
    const onData = (chunk: Buffer): void => {
      buffer = Buffer.concat([buffer, chunk]);
      const end = buffer.indexOf('\r\n\r\n');
      if (end === -1) return;
      const [statusLine = '', ...lines] = buffer.subarray(0, end).toString('latin1').split('\r\n');
      const headers = Object.fromEntries(lines.map((line) => [line.slice(0, line.indexOf(':')).toLowerCase(), line.slice(line.indexOf(':') + 1).trim()]));
      const body = buffer.subarray(end + 4);
      if (body.length < Number(headers['content-length'] ?? 0)) return;
      cleanup();
      resolve({ status: Number(statusLine.split(' ')[1]), headers, body: body.toString('utf8') });
    };
    const onClose = (): void => {
      cleanup();
      reject(new Error('connection closed before a whole response'));
    };
    const cleanup = (): void => {
      socket.off('data', onData);
      socket.off('close', onClose);
    };
    socket.on('data', onData);
    socket.once('close', onClose);
  });
}

function postHead(length: number): string {
  return `POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: ${length}\r\n\r\n`;
}

test('after SIGTERM, open connections are served (Connection: close) until --shutdown-delay ends; then stragglers are cut and it exits', async (t) => {
  const directory = await mkdtemp(join(tmpdir(), 'esm-shutdown-'));
  t.after(() => rm(directory, { recursive: true, force: true }));
  const webhook = await startWebhook(['--dev-certs', '--address=127.0.0.1', '--port=0', `--shutdown-delay=${DELAY_MS}ms`, `--tls-cert-file=${directory}/tls.crt`, `--tls-key-file=${directory}/tls.key`]);
  t.after(() => webhook.kill());
  const { url, exited } = webhook;
  const ca = await readFile(join(directory, 'ca.crt'), 'utf8');
  const { port } = new URL(url);

  const sockets: tls.TLSSocket[] = [];
  t.after(() => sockets.forEach((socket) => socket.destroy()));
  const connect = async (): Promise<tls.TLSSocket> => {
    const socket = tls.connect({ host: '127.0.0.1', port: Number(port), ca, servername: 'localhost' });
    socket.on('error', () => undefined); // cut stragglers are expected; each check below reads what happened
    sockets.push(socket);
    await once(socket, 'secureConnect');
    return socket;
  };
  const review = await readFile(join(FIXTURES, 'deployment-envoy-pod.json'));
  const uid = (JSON.parse(review.toString()) as { request: { uid: string } }).request.uid;
  const post = async (socket: tls.TLSSocket): Promise<RawResponse> => {
    const response = readResponse(socket);
    socket.write(postHead(review.length));
    socket.write(review);
    return response;
  };

  // Before SIGTERM: a kept-alive connection that will be used again, one that will stay idle, and two uploads
  // under way: one that finishes during the delay, one that never does.
  const keptAlive = await connect();
  assert.equal((await post(keptAlive)).headers['connection'], 'keep-alive');
  const idle = await connect();
  assert.equal((await post(idle)).status, 200);
  const slowUpload = await connect();
  slowUpload.write(postHead(review.length));
  slowUpload.write(review.subarray(0, 1_000));
  const straggler = await connect();
  straggler.write(postHead(review.length));
  straggler.write(review.subarray(0, 1_000));
  const stragglerClosed = once(straggler, 'close');
  const idleClosed = once(idle, 'close');

  // Load across the whole shutdown: four clients posting back to back on kept-alive connections.
  const agent = new Agent({ keepAlive: true, maxSockets: 4, ca });
  t.after(() => agent.destroy());
  const outcomes: LoadOutcome[] = [];
  const load = Promise.all(Array.from({ length: 4 }, () => postUntilGone(`${url}/mutate`, agent, review, outcomes, exited)));

  webhook.child.kill('SIGTERM');
  const signalledAt = Date.now();
  await webhook.waitForLog((line) => line['msg'] === 'shutting down: still serving while endpoints are removed');

  const onKeptAlive = await post(keptAlive);
  assert.equal(onKeptAlive.status, 200, 'a request on an open keep-alive connection is answered normally');
  assert.equal(onKeptAlive.headers['connection'], 'close');
  assert.equal((JSON.parse(onKeptAlive.body) as { response: { uid: string; allowed: boolean } }).response.uid, uid);
  await once(keptAlive, 'close');

  const fresh = await post(await connect());
  assert.equal(fresh.status, 200, 'a new connection is still served');
  assert.equal(fresh.headers['connection'], 'close');

  // Past the second after which the old shutdown cut uploads, well inside the delay.
  await new Promise((resolve) => setTimeout(resolve, Math.max(0, signalledAt + 1_500 - Date.now())));
  const finished = readResponse(slowUpload);
  slowUpload.end(review.subarray(1_000));
  const uploaded = await finished;
  assert.equal(uploaded.status, 200, 'an upload in flight at SIGTERM is answered');
  assert.equal(uploaded.headers['connection'], 'close');
  assert.match(uploaded.body, /"patchType":"JSONPatch"/);

  await Promise.all([stragglerClosed, idleClosed]);
  const cutAfter = Date.now() - signalledAt;
  assert.ok(cutAfter >= DELAY_MS, `stragglers cut ${cutAfter} ms after SIGTERM, before the ${DELAY_MS} ms delay ended`);
  const { code } = await exited;
  assert.equal(code, 0);
  const exitedAfter = Date.now() - signalledAt;
  assert.ok(exitedAfter < DELAY_MS + 2_500, `exited ${exitedAfter} ms after SIGTERM: held up by open connections`);

  await load;
  const answered = outcomes.filter((outcome) => outcome.status !== undefined);
  assert.ok(answered.filter((outcome) => outcome.startedAt > signalledAt).length > 20, 'the load went on after SIGTERM');
  assert.deepEqual(answered.filter((outcome) => outcome.status !== 200), [], 'never a 503, not even while closing');
  assert.deepEqual(
    answered.filter((outcome) => outcome.startedAt > signalledAt + 100 && outcome.connection !== 'close'),
    [],
    'after SIGTERM every answer ends its connection',
  );
  // A request may be cut only once the delay is over; well inside it, every one is answered.
  const cutEarly = outcomes.filter((outcome) => outcome.error !== undefined && outcome.startedAt < signalledAt + DELAY_MS / 2);
  assert.deepEqual(cutEarly, [], 'requests failed inside the delay');
});

interface LoadOutcome {
  readonly startedAt: number;
  readonly status?: number;
  readonly connection?: string;
  readonly error?: string;
}

/** Posts `body` again and again until the process has exited, recording each outcome. */
async function postUntilGone(url: string, agent: Agent, body: Buffer, outcomes: LoadOutcome[], exited: Promise<unknown>): Promise<void> {
  let gone = false;
  void exited.then(() => (gone = true));
  while (!gone) {
    const startedAt = Date.now();
    outcomes.push(
      await new Promise<LoadOutcome>((resolve) => {
        const req = request(url, { method: 'POST', agent, headers: { 'content-type': 'application/json', 'content-length': body.length } }, (res) => {
          res.resume();
          res.on('end', () => resolve({ startedAt, status: res.statusCode ?? 0, connection: String(res.headers.connection) }));
          res.on('error', (error) => resolve({ startedAt, error: error.message }));
        });
        req.on('error', (error) => resolve({ startedAt, error: error.message }));
        req.end(body);
      }),
    );
  }
}
