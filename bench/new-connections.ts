/**
 * Load with a new TLS connection for every review, as after an API server restart: `connections` clients in
 * parallel, each connecting, sending one review, reading the whole answer and closing. No session is resumed
 * (a restarted API server has no session cache), so each one is a full handshake. Kept lean so that the
 * client, which shares the machine's two cores, takes as little as it can from the servers it measures.
 * autocannon's reconnectRate does not count the answers it reconnects after, hence this.
 */
import { connect } from 'node:tls';

export interface NewConnectionResult {
  readonly perSecond: number;
  readonly completed: number;
}

export async function newConnectionLoad(port: number, body: string, connections: number, seconds: number): Promise<NewConnectionResult> {
  const request = Buffer.concat([
    Buffer.from(
      `POST /mutate HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n`,
    ),
    Buffer.from(body),
  ]);
  const started = performance.now();
  const deadline = started + seconds * 1000;
  let completed = 0;
  const worker = async (): Promise<void> => {
    while (performance.now() < deadline) {
      await oneReview(port, request);
      completed += 1;
    }
  };
  await Promise.all(Array.from({ length: connections }, worker));
  return { perSecond: completed / ((performance.now() - started) / 1000), completed };
}

/** Resolves once the whole answer (a 200, its Content-Length read) has arrived; rejects on anything else. */
function oneReview(port: number, request: Buffer): Promise<void> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port, rejectUnauthorized: false });
    const chunks: Buffer[] = [];
    let received = 0;
    let expected = -1;
    const fail = (error: Error): void => {
      socket.destroy();
      reject(error);
    };
    socket.once('secureConnect', () => socket.write(request));
    socket.on('data', (chunk: Buffer) => {
      chunks.push(chunk);
      received += chunk.length;
      if (expected < 0) {
        const head = Buffer.concat(chunks);
        const end = head.indexOf('\r\n\r\n');
        if (end < 0) return;
        const text = head.subarray(0, end).toString('latin1');
        if (!text.startsWith('HTTP/1.1 200')) return fail(new Error(`answered ${text.split('\r\n')[0]}`));
        const length = /^content-length:\s*(\d+)/im.exec(text)?.[1];
        if (length === undefined) return fail(new Error('answer without Content-Length'));
        expected = end + 4 + Number(length);
      }
      if (received >= expected) {
        socket.destroy();
        resolve();
      }
    });
    socket.once('error', fail);
    socket.once('close', () => {
      if (expected < 0 || received < expected) reject(new Error('connection closed before the answer'));
    });
  });
}
