/**
 * Where `check` reads the load balancer's lag from: Prometheus's HTTP API (`GET /api/v1/query`), reached either at
 * a URL (--prometheus-url: a port-forward, an in-cluster address) or through the API server's service proxy
 * (--prometheus=<namespace>/<service>:<port>, as `kubectl get --raw` would, with the kubeconfig's credentials).
 * One query, one answer: a vector, or a PrometheusError whose message names what failed. Nothing here throws
 * anything else, and nothing above it sees an HTTP detail.
 */
import { jsonDepthExceeds } from '../json.js';
import { request as httpRequest, type IncomingMessage, type RequestOptions } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { causeOf } from './errors.js';

/** How to reach Prometheus: its base URL, or a Service behind the API server's proxy. */
export type PrometheusSource =
  | { readonly kind: 'url'; readonly url: URL }
  | { readonly kind: 'service'; readonly namespace: string; readonly service: string; readonly port: string };

/** One sample of an instant vector: its labels and its value. */
export interface VectorSample {
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
}

/** Why the query got no vector: unreachable, a timeout, an error answer, an answer that is not Prometheus's. */
export class PrometheusError extends Error {
  override readonly name = 'PrometheusError';
}

/** An answer larger than this is not one Prometheus gives to these queries (a few hundred bytes per workload: 10,000 and more). */
const MAX_ANSWER_BYTES = 4 * 1024 * 1024;
/** A vector answer nests 5 deep ({data: {result: [{metric: {}}]}}); anything much deeper is not one, and not parsed. */
const MAX_ANSWER_DEPTH = 8;

/** A DNS-1123 label: namespaces and Service names. */
const DNS_LABEL = '[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?';
const SERVICE_REF = new RegExp(`^(${DNS_LABEL})/((?:https?:)?${DNS_LABEL}):([a-z0-9]([-a-z0-9]{0,13}[a-z0-9])?|\\d{1,5})$`);

export const SERVICE_FORM = '<namespace>/<service>:<port>, such as monitoring/prometheus-operated:9090 (the port by number or name)';
export const URL_FORM = 'an http:// or https:// URL, such as http://localhost:9090';

/** --prometheus: `monitoring/prometheus-operated:9090`, `monitoring/https:prometheus:web`; undefined when malformed. */
export function parseServiceRef(raw: string): PrometheusSource | undefined {
  const match = SERVICE_REF.exec(raw.trim());
  if (match === null) return undefined;
  return { kind: 'service', namespace: match[1] as string, service: match[3] as string, port: match[5] as string };
}

/** --prometheus-url: an http(s) URL without a query or fragment; undefined when not one. */
export function parsePrometheusUrl(raw: string): PrometheusSource | undefined {
  let url: URL;
  try {
    url = new URL(raw.trim());
  } catch {
    return undefined;
  }
  if ((url.protocol !== 'http:' && url.protocol !== 'https:') || url.search !== '' || url.hash !== '') return undefined;
  return { kind: 'url', url };
}

/** How the source is named in messages: the URL without credentials, or the Service and the API server. */
export function describeSource(source: PrometheusSource, apiServer?: string): string {
  if (source.kind === 'url') {
    const shown = new URL(source.url);
    shown.username = '';
    shown.password = '';
    return shown.toString().replace(/\/$/, '');
  }
  return `Service ${source.namespace}/${source.service}:${source.port}${apiServer === undefined ? '' : ` (through the API server ${apiServer})`}`;
}

/** The path of the query API below the base URL: Prometheus's own, or the Service's proxy on the API server. */
export function queryPath(source: PrometheusSource): string {
  if (source.kind === 'url') return '/api/v1/query';
  return `/api/v1/namespaces/${source.namespace}/services/${source.service}:${source.port}/proxy/api/v1/query`;
}

export interface QueryTransport {
  /** The base URL requests go to (Prometheus's, or the API server's). */
  readonly base: URL;
  /** Options added to every request: the kubeconfig's agent (CA, client certificate) and headers (Authorization). */
  readonly options?: RequestOptions;
  /** Who is asked, for messages. */
  readonly describe: string;
  /** Whether the answer passes through the API server (whose errors are Status objects). */
  readonly throughApiServer: boolean;
}

/** A transport straight to a Prometheus URL; credentials in the URL become a Basic Authorization header. */
export function directTransport(url: URL): QueryTransport {
  const headers: Record<string, string> = {};
  if (url.username !== '' || url.password !== '') {
    const credentials = `${decodeURIComponent(url.username)}:${decodeURIComponent(url.password)}`;
    headers.Authorization = `Basic ${Buffer.from(credentials).toString('base64')}`;
  }
  return { base: url, options: { headers }, describe: `Prometheus at ${describeSource({ kind: 'url', url })}`, throughApiServer: false };
}

/**
 * Runs an instant query and returns its vector. `timeoutMs` bounds the whole exchange, answer included.
 * Every failure is a PrometheusError naming the source and what went wrong.
 */
export async function queryVector(source: PrometheusSource, transport: QueryTransport, query: string, timeoutMs: number): Promise<VectorSample[]> {
  const url = new URL(transport.base);
  // Below the base's own path: a Prometheus served under a prefix, an API server behind a path (Rancher's).
  url.pathname = `${url.pathname.replace(/\/+$/, '')}${queryPath(source)}`;
  url.search = new URLSearchParams({ query }).toString();
  url.username = '';
  url.password = '';
  const { status, body, contentType } = await get(url, transport, timeoutMs);
  return readAnswer(status, body, contentType, transport);
}

interface Answer {
  readonly status: number;
  readonly body: string;
  readonly contentType: string;
}

function get(url: URL, transport: QueryTransport, timeoutMs: number): Promise<Answer> {
  const send = url.protocol === 'https:' ? httpsRequest : httpRequest;
  return new Promise<Answer>((resolve, reject) => {
    let settled = false;
    let outgoing: ReturnType<typeof send> | undefined;
    const fail = (message: string): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      outgoing?.destroy();
      reject(new PrometheusError(message));
    };
    const timer = setTimeout(() => fail(`no answer from ${transport.describe} within ${timeoutMs} ms (--request-timeout)`), timeoutMs);
    const onAnswer = (response: IncomingMessage): void => {
      const chunks: Buffer[] = [];
      let size = 0;
      response.on('data', (chunk: Buffer) => {
        size += chunk.length;
        if (size > MAX_ANSWER_BYTES) return fail(`${transport.describe} sent an answer larger than ${MAX_ANSWER_BYTES / 1024 / 1024} MiB: not Prometheus's answer to this query`);
        chunks.push(chunk);
      });
      response.on('error', (error) => fail(`${transport.describe} broke off its answer: ${error.message}`));
      response.on('end', () => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        resolve({ status: response.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8'), contentType: String(response.headers['content-type'] ?? '') });
      });
    };
    const headers = { ...(transport.options?.headers as Record<string, string> | undefined), Accept: 'application/json' };
    try {
      outgoing = send(url, { ...transport.options, method: 'GET', headers }, onAnswer);
    } catch (error) {
      // A request Node refuses to send (a header the kubeconfig's credentials make invalid, say).
      return fail(`cannot send the query to ${transport.describe}: ${causeOf(error)}`);
    }
    outgoing.on('error', (error) => fail(`cannot reach ${transport.describe}: ${causeOf(error)}`));
    outgoing.end();
  });
}

/** The vector of a success answer; a PrometheusError for anything else. */
export function readAnswer(status: number, body: string, contentType: string, transport: Pick<QueryTransport, 'describe' | 'throughApiServer'>): VectorSample[] {
  if (jsonDepthExceeds(body, MAX_ANSWER_DEPTH)) {
    throw new PrometheusError(`${transport.describe} answered ${status} with JSON nested deeper than ${MAX_ANSWER_DEPTH} levels: not a query result (is it Prometheus's address?)`);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    const excerpt = body.trim().replace(/\s+/g, ' ').slice(0, 120);
    const what = excerpt === '' ? 'an empty answer' : `"${excerpt}${body.trim().length > 120 ? '…' : ''}"`;
    throw new PrometheusError(`${transport.describe} answered ${status} with ${contentType === '' ? 'a body' : contentType} that is not JSON: ${what} (is it Prometheus's address?)`);
  }
  const answer = isObject(parsed) ? parsed : {};
  if (answer.kind === 'Status' && transport.throughApiServer) {
    const message = typeof answer.message === 'string' ? answer.message : 'no message';
    const rbac = status === 403 ? ' (the proxy needs RBAC verb "get" on resource "services/proxy" in its namespace: manifests/check)' : '';
    throw new PrometheusError(`the API server answered ${status} to the service proxy for ${transport.describe}: ${message}${rbac}`);
  }
  if (answer.status === 'error') {
    const kind = typeof answer.errorType === 'string' ? `${answer.errorType}: ` : '';
    const message = typeof answer.error === 'string' ? answer.error : 'no message';
    throw new PrometheusError(`${transport.describe} answered ${status}, the query failed (${kind}${message})`);
  }
  if (status < 200 || status >= 300 || answer.status !== 'success') {
    throw new PrometheusError(`${transport.describe} answered ${status} with JSON that is not a query result (is it Prometheus's address?)`);
  }
  const data = isObject(answer.data) ? answer.data : {};
  if (data.resultType !== 'vector' || !Array.isArray(data.result)) {
    throw new PrometheusError(`${transport.describe} answered a ${String(data.resultType)} where the query makes a vector`);
  }
  return data.result.map((entry, index) => sampleOf(entry, index, transport.describe));
}

function sampleOf(entry: unknown, index: number, describe: string): VectorSample {
  const sample = isObject(entry) ? entry : {};
  const metric = isObject(sample.metric) ? sample.metric : undefined;
  const pair = sample.value;
  const raw = Array.isArray(pair) && pair.length === 2 ? pair[1] : undefined;
  // Prometheus writes floats as Go does: "4.5", "1e+06", "NaN", "+Inf", "-Inf".
  const value = typeof raw === 'string' ? (raw === '+Inf' ? Infinity : raw === '-Inf' ? -Infinity : Number(raw)) : Number.NaN;
  if (metric === undefined || Object.values(metric).some((label) => typeof label !== 'string') || typeof raw !== 'string' || (Number.isNaN(value) && raw !== 'NaN')) {
    throw new PrometheusError(`${describe} answered a vector whose sample ${index} is not {"metric": {...}, "value": [<time>, "<number>"]}`);
  }
  return { labels: metric as Record<string, string>, value };
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

