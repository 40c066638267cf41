/**
 * A fake Prometheus for `check --prometheus-url`: a real node:http server on 127.0.0.1 (port 0) that answers
 * GET /api/v1/query as Prometheus's HTTP API does, and records every query. It answers only the query it is
 * told to expect (anything else is a 400 bad_data, as Prometheus answers a query it cannot parse), so a test
 * fails when check sends another; the answer can be replaced by a fault (a status with any body, or a stall).
 *
 * And, for `check --prometheus=<ns>/<svc>:<port>`, the API server's service proxy in front of the fake API server
 * (serviceProxyFront): a TLS server that checks the bearer token, forwards
 * /api/v1/namespaces/<ns>/services/<svc>:<port>/proxy/<path> to this Prometheus, and every other request to the
 * fake API server, as the real API server would proxy to the Service. Any HTTP server on 127.0.0.1 can stand behind
 * it in the fake Prometheus's place: test/cli/check-prometheus.test.ts puts a real Prometheus there.
 */
import { once } from 'node:events';
import { createServer, request as httpRequest, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createTlsServer, request as httpsRequest, type Server as TlsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { generateCertificates } from '../../src/certs/generate.js';
import type { FakeKubeApi } from './fake-kube-api.js';

export interface PrometheusSample {
  readonly metric: Readonly<Record<string, string>>;
  readonly value: number;
}

export interface RecordedQuery {
  readonly path: string;
  readonly query: string | null;
  readonly authorization: string | undefined;
}

/** What to answer instead of the vector: a status and a raw body, or nothing at all. */
export type PrometheusFault = { readonly status: number; readonly body: string; readonly contentType?: string } | 'stall';

export class FakePrometheus {
  readonly queries: RecordedQuery[] = [];
  /** The one query answered; null answers any (for tests of what is sent). */
  expectedQuery: string | null = null;
  samples: PrometheusSample[] = [];
  /** Other queries it answers, with their samples (before `expectedQuery` is looked at). */
  readonly answers = new Map<string, PrometheusSample[]>();
  fault: PrometheusFault | undefined;

  private constructor(
    private readonly server: Server,
    readonly url: string,
    readonly port: number,
  ) {}

  static async start(): Promise<FakePrometheus> {
    const server = createServer();
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const { port } = server.address() as AddressInfo;
    const fake = new FakePrometheus(server, `http://127.0.0.1:${port}`, port);
    server.on('request', (request: IncomingMessage, response: ServerResponse) => fake.handle(request, response));
    return fake;
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private handle(request: IncomingMessage, response: ServerResponse): void {
    const url = new URL(request.url ?? '/', this.url);
    const query = url.searchParams.get('query');
    this.queries.push({ path: url.pathname, query, authorization: request.headers.authorization });
    if (this.fault === 'stall') return; // never answered: the client's timeout must fire
    if (this.fault !== undefined) {
      response.writeHead(this.fault.status, { 'content-type': this.fault.contentType ?? 'text/plain' });
      return void response.end(this.fault.body);
    }
    if (request.method !== 'GET' || !url.pathname.endsWith('/api/v1/query')) {
      response.writeHead(404, { 'content-type': 'text/plain' });
      return void response.end('404 page not found\n');
    }
    const other = query === null ? undefined : this.answers.get(query);
    if (other !== undefined) return this.vector(response, other);
    if (query === null || (this.expectedQuery !== null && query !== this.expectedQuery)) {
      const error = query === null ? 'invalid parameter "query": query is empty' : `unexpected query ${JSON.stringify(query)} (the fake expects ${JSON.stringify(this.expectedQuery)})`;
      return this.json(response, 400, { status: 'error', errorType: 'bad_data', error });
    }
    this.vector(response, this.samples);
  }

  private vector(response: ServerResponse, samples: readonly PrometheusSample[]): void {
    const now = Date.now() / 1000;
    const result = samples.map(({ metric, value }) => ({ metric, value: [now, String(value)] }));
    this.json(response, 200, { status: 'success', data: { resultType: 'vector', result } });
  }

  private json(response: ServerResponse, code: number, body: unknown): void {
    response.writeHead(code, { 'content-type': 'application/json' });
    response.end(JSON.stringify(body));
  }
}

/** A TLS front for the fake API server that proxies one Service to a FakePrometheus; see the header. */
export interface ServiceProxyFront {
  readonly url: string;
  readonly caPem: string;
  /** The paths of the service-proxy requests it forwarded (or refused). */
  readonly proxied: string[];
  /** When set, service-proxy requests are answered with this Status code and message (403, 503...). */
  refuse: { code: number; message: string } | undefined;
  close(): Promise<void>;
}

export async function serviceProxyFront(kube: FakeKubeApi, prometheus: Pick<FakePrometheus, 'port'>, service: { namespace: string; name: string; port: string }): Promise<ServiceProxyFront> {
  const bundle = await generateCertificates({ dnsNames: ['localhost'], ipAddresses: ['127.0.0.1'], validityDays: 1 });
  const server: TlsServer = createTlsServer({ cert: bundle.certPem, key: bundle.keyPem });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  const prefix = `/api/v1/namespaces/${service.namespace}/services/${service.name}:${service.port}/proxy`;
  const front: ServiceProxyFront = {
    url: `https://127.0.0.1:${port}`,
    caPem: bundle.caCertPem,
    proxied: [],
    refuse: undefined,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  const status = (response: ServerResponse, code: number, message: string): void => {
    response.writeHead(code, { 'content-type': 'application/json' });
    response.end(JSON.stringify({ kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message, code }));
  };
  server.on('request', (request: IncomingMessage, response: ServerResponse) => {
    const path = request.url ?? '/';
    if (/^\/api\/v1\/namespaces\/[^/]+\/services\/[^/]+\/proxy\//.test(path)) {
      front.proxied.push(path);
      if (request.headers.authorization !== `Bearer ${kube.token}`) return status(response, 401, 'Unauthorized');
      if (front.refuse !== undefined) return status(response, front.refuse.code, front.refuse.message);
      if (!path.startsWith(`${prefix}/`)) return status(response, 503, `no endpoints available for service "${(path.split('/')[6] ?? '').split(':')[0] ?? ''}"`);
      const upstream = httpRequest({ host: '127.0.0.1', port: prometheus.port, path: path.slice(prefix.length), method: request.method, headers: { accept: 'application/json' } }, (answer) => {
        response.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(response);
      });
      upstream.on('error', (error) => status(response, 503, `error trying to reach service: ${error.message}`));
      return void upstream.end();
    }
    const target = new URL(kube.url);
    const upstream = httpsRequest(
      { host: target.hostname, port: target.port, path, method: request.method, headers: request.headers, ca: kube.caPem },
      (answer) => {
        response.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(response);
      },
    );
    upstream.on('error', () => response.destroy());
    request.pipe(upstream);
  });
  return front;
}
