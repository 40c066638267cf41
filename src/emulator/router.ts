/**
 * Envoy's router filter (source/common/router/router.cc) for the routes the emulator forwards: a request sent
 * to a cluster of one endpoint (an IP and port, or a `pipe`: a Unix socket) over a pooled connection, and the
 * local reply when the upstream refuses or drops it (Filter::onUpstreamReset).
 */
import http from 'node:http';

/** An upstream endpoint: an IP address and port, or a Unix socket (an Envoy `pipe` address). */
export type UpstreamAddress = { readonly host: string; readonly port: number } | { readonly socketPath: string };

export interface UpstreamAnswer {
  readonly status: number;
  readonly contentType: string;
  readonly body: string;
}

/**
 * The router's answer for a request sent upstream: the upstream's status and body, or 503 with Envoy's
 * local reply when the upstream refused the connection or closed it before answering (router.cc
 * onUpstreamReset: "upstream connect error or disconnect/reset before headers. reset reason: …").
 */
export function forward(path: string, target: UpstreamAddress, agent: http.Agent, signal: AbortSignal): Promise<UpstreamAnswer> {
  return new Promise((resolve) => {
    const reset = (reason: string): void =>
      resolve({ status: 503, contentType: 'text/plain', body: `upstream connect error or disconnect/reset before headers. reset reason: ${reason}` });
    const upstream = http.request({ ...target, path, agent, signal }, (answer) => {
      let body = '';
      answer.setEncoding('utf8');
      answer.on('data', (chunk: string) => (body += chunk));
      answer.on('end', () => resolve({ status: answer.statusCode ?? 502, contentType: answer.headers['content-type'] ?? 'text/plain', body }));
      answer.on('error', () => reset('connection termination'));
    });
    // A refused TCP connection, or a Unix socket path with nothing bound (ENOENT) or nobody accepting.
    const refused = (code: string | undefined): boolean => code === 'ECONNREFUSED' || code === 'ENOENT';
    upstream.on('error', (error: NodeJS.ErrnoException) => reset(refused(error.code) ? 'remote connection failure' : 'connection termination'));
    upstream.end();
  });
}
