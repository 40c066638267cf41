/**
 * A second reference point, for information: Fastify over the same TLS, parsing the body as the webhook does
 * and answering the fixed response. The gap between the bare floor and this one is the framework's; the gap
 * between this one and the webhook is the review's. Started like floor-server.mjs: argv = port cert key response.
 */
import { readFileSync } from 'node:fs';
import Fastify from 'fastify';

const [port, certFile, keyFile, responseFile] = process.argv.slice(2);
const response = JSON.parse(readFileSync(responseFile, 'utf8'));
const app = Fastify({ https: { cert: readFileSync(certFile), key: readFileSync(keyFile), minVersion: 'TLSv1.2' } });
app.post('/mutate', async () => response);
app.get('/healthz', async () => 'ok\n');
await app.listen({ port: Number(port), host: '127.0.0.1' });
process.on('SIGTERM', () => void app.close().then(() => process.exit(0)));
