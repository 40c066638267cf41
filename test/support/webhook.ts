/** A real webhook on loopback with fresh certificates, and an HTTPS client for it. */
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { request } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import jsonPatch from 'fast-json-patch';
import pino, { type Logger } from 'pino';
import { generateCertificates, type CertificateBundle } from '../../src/certs/generate.js';
import { openTlsSource } from '../../src/certs/source.js';
import { parseWebhookConfig, type WebhookConfig } from '../../src/config/webhook.js';
import { startWebhookServer, type ConnectionLimits, type WebhookServer } from '../../src/webhook/server.js';

export const FIXTURES = fileURLToPath(new URL('../fixtures/admission/', import.meta.url));

export async function loadReview(name: string): Promise<Record<string, any>> {
  return JSON.parse(await readFile(join(FIXTURES, name), 'utf8')) as Record<string, any>;
}

export interface RunningWebhook {
  readonly server: WebhookServer;
  readonly config: WebhookConfig;
  readonly ca: string;
  readonly certFile: string;
  readonly keyFile: string;
  readonly directory: string;
  close(): Promise<void>;
}

export async function localCertificates(): Promise<CertificateBundle> {
  return generateCertificates({ dnsNames: ['localhost'], ipAddresses: ['127.0.0.1'], validityDays: 2 });
}

export interface TestWebhookOptions {
  /** Silent unless given. */
  readonly logger?: Logger;
  readonly connectionLimits?: Partial<ConnectionLimits>;
}

/**
 * Starts the real server on 127.0.0.1, an ephemeral port and certificates in a temporary directory, served
 * as the webhook serves mounted files: reloaded when they change, polled every `pollIntervalMs`.
 */
export async function startTestWebhook(
  args: readonly string[] = [],
  pollIntervalMs = 10_000,
  options: TestWebhookOptions = {},
): Promise<RunningWebhook> {
  const directory = await mkdtemp(join(tmpdir(), 'esm-webhook-'));
  const certFile = join(directory, 'tls.crt');
  const keyFile = join(directory, 'tls.key');
  const bundle = await localCertificates();
  await writeFile(certFile, bundle.certPem);
  await writeFile(keyFile, bundle.keyPem);
  const config = parseWebhookConfig(
    ['--port=0', '--address=127.0.0.1', `--tls-cert-file=${certFile}`, `--tls-key-file=${keyFile}`, ...args],
    {},
  );
  const logger = options.logger ?? pino({ level: 'silent' });
  const tls = await openTlsSource(config, logger, { pollIntervalMs });
  if (tls === undefined) throw new Error('mounted files are never self-managed TLS');
  const server = await startWebhookServer(config, logger, {
    certificate: tls.certificate,
    ...(options.connectionLimits === undefined ? {} : { connectionLimits: options.connectionLimits }),
  });
  tls.start((material) => server.useCertificate(material));
  return {
    server,
    config,
    ca: bundle.caCertPem,
    certFile,
    keyFile,
    directory,
    close: async () => {
      await Promise.all([tls.stop(), server.close()]);
      await rm(directory, { recursive: true, force: true });
    },
  };
}

export interface HttpsResult {
  readonly status: number;
  readonly headers: Record<string, string | string[] | undefined>;
  readonly text: string;
  json(): any;
}

/** One request on a fresh TLS connection that must verify against `ca`. */
export function httpsRequest(
  url: string,
  options: { ca: string; method?: string; body?: string | Buffer; contentType?: string },
): Promise<HttpsResult> {
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      {
        method: options.method ?? 'POST',
        ca: options.ca,
        agent: false,
        timeout: 5_000,
        headers: options.contentType === undefined ? {} : { 'content-type': options.contentType },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          resolve({ status: res.statusCode ?? 0, headers: res.headers, text, json: () => JSON.parse(text) });
        });
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new Error(`request to ${url} timed out`)));
    req.on('error', reject);
    req.end(options.body);
  });
}

export async function postReview(webhook: RunningWebhook, review: unknown): Promise<HttpsResult> {
  return httpsRequest(`${webhook.server.url}/mutate`, {
    ca: webhook.ca,
    body: JSON.stringify(review),
    contentType: 'application/json',
  });
}

/** The AdmissionReview the API server sends when `pod` is created. */
export function podCreateReview(pod: unknown, uid = 'f0e1d2c3-b4a5-4697-8877-665544332211'): Record<string, any> {
  return {
    apiVersion: 'admission.k8s.io/v1',
    kind: 'AdmissionReview',
    request: { uid, kind: { group: '', version: 'v1', kind: 'Pod' }, operation: 'CREATE', object: pod },
  };
}

/** An AdmissionReview answer, and the pod as its patch leaves it (the pod as sent when there is none). */
export interface Admission {
  /** Free-form JSON, as the tests navigate it (like HttpsResult.json). */
  readonly response: any;
  readonly pod: any;
}

/** Sends `review` to the running webhook over HTTPS and applies the JSON patch it answers. */
export async function admitReview(webhook: RunningWebhook, review: Record<string, any>): Promise<Admission> {
  const result = await postReview(webhook, review);
  assert.equal(result.status, 200, result.text);
  const { response } = result.json();
  if (response.patch === undefined) return { response, pod: review.request.object };
  const operations = JSON.parse(Buffer.from(response.patch, 'base64').toString('utf8'));
  return { response, pod: jsonPatch.applyPatch(structuredClone(review.request.object), operations, true, false).newDocument };
}
