/**
 * The floor the webhook is measured against: a bare node:https server with the same key and TLS settings
 * that reads the body, parses it as the webhook does, and answers a fixed AdmissionReview response of the
 * same size as the webhook's. Plain JavaScript, run by node alone: tsx's loader would add to its memory.
 * Started as its own process by bench/webhook.ts: argv = port cert-file key-file response-file.
 */
import { readFileSync } from 'node:fs';
import { createServer } from 'node:https';

const [port, certFile, keyFile, responseFile] = process.argv.slice(2);
const response = readFileSync(responseFile);
const server = createServer(
  { cert: readFileSync(certFile), key: readFileSync(keyFile), minVersion: 'TLSv1.2', keepAliveTimeout: 65_000 },
  (request, reply) => {
    const chunks = [];
    request.on('data', (chunk) => chunks.push(chunk));
    request.on('end', () => {
      if (chunks.length > 0) JSON.parse(Buffer.concat(chunks).toString('utf8')); // the webhook parses the body too
      reply.writeHead(200, { 'content-type': 'application/json; charset=utf-8', 'content-length': response.length });
      reply.end(response);
    });
  },
);
server.listen(Number(port), '127.0.0.1');
process.on('SIGTERM', () => server.close(() => process.exit(0)));
