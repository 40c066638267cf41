/**
 * The HTTPS edge of webhook mode. It only decodes the review, calls the pure core and encodes the answer;
 * Fastify supplies body limits, content-type checks (415) and JSON parsing errors (400).
 */
import Fastify, {
  LogController,
  type FastifyBaseLogger,
  type FastifyError,
  type FastifyInstance,
} from 'fastify';
import type { Socket } from 'node:net';
import type { Server as HttpsServer } from 'node:https';
import type { Logger } from 'pino';
import { WEBHOOK_PATHS } from '../config/endpoints.js';
import { UserFacingError } from '../errors.js';
import type { WebhookConfig } from '../config/webhook.js';
import { admissionReviewJson, answerAdmission, encodeAdmissionReview, type AdmissionDecision } from './admission.js';
import { isJsonObject } from '../json.js';
import { WebhookMetrics } from './metrics.js';
import { compileReviewChecks, type ReviewSchemaChecks } from './review-schema.js';
import { TLS_OPTIONS, type TlsMaterial } from '../certs/material.js';

const JSON_CONTENT_TYPE = 'application/json; charset=utf-8';

/** A body that is not an AdmissionReview this webhook can answer in kind; the message says which field is wrong. */
export class InvalidAdmissionReviewError extends Error {
  override readonly name = 'InvalidAdmissionReviewError';
}

/**
 * How long a client may take at each stage before its connection is closed. The API server sends each request
 * whole over a connection it keeps alive, and waits at most 30 s for a webhook: a client slower than these
 * bounds is not the API server, and must not hold sockets (slowloris).
 */
export interface ConnectionLimits {
  /** The TLS handshake, from the TCP connection on. */
  readonly handshakeMs: number;
  /** The request line and headers, from the request's first byte. */
  readonly headersMs: number;
  /** The whole request, body included. */
  readonly requestMs: number;
  /** Silence on a connection during a request (before its answer). */
  readonly idleMs: number;
  /** Silence between requests on a kept-alive connection. */
  readonly keepAliveMs: number;
  /** How often Node looks for requests past headersMs or requestMs: those bounds are overrun by at most this. */
  readonly checkIntervalMs: number;
}

export const CONNECTION_LIMITS: ConnectionLimits = {
  handshakeMs: 10_000,
  headersMs: 10_000,
  requestMs: 30_000,
  idleMs: 30_000,
  // As before: an idle connection of the API server is kept a little over a minute.
  keepAliveMs: 65_000,
  // Node's defaults (60 s for headers, checked every 30 s) let trickled headers hold a socket for 40 s and more.
  checkIntervalMs: 1_000,
};

export interface WebhookServer {
  readonly app: FastifyInstance;
  /** Serves `material` to new TLS connections from now on. */
  useCertificate(material: TlsMaterial): void;
  /** /readyz fails from now on, so that the replica leaves the Service before it closes. */
  markNotReady(): void;
  /** https://host:port once listening. */
  readonly url: string;
  /** Stops listening and cuts every connection still open: call it once the shutdown delay has passed. */
  close(): Promise<void>;
}

export interface WebhookServerOptions {
  /** The certificate to listen with, from the TLS source (certs/source.ts); later ones come through useCertificate. */
  readonly certificate: TlsMaterial;
  /** Tests only: shorter bounds, so that slow clients are seen being cut within a test's time. */
  readonly connectionLimits?: Partial<ConnectionLimits>;
}

export async function startWebhookServer(
  config: WebhookConfig,
  logger: Logger,
  options: WebhookServerOptions,
): Promise<WebhookServer> {
  const limits = { ...CONNECTION_LIMITS, ...options.connectionLimits };
  const app = Fastify({
    https: {
      ...TLS_OPTIONS,
      ...options.certificate,
      handshakeTimeout: limits.handshakeMs,
      headersTimeout: limits.headersMs,
      connectionsCheckingInterval: limits.checkIntervalMs,
    },
    requestTimeout: limits.requestMs,
    connectionTimeout: limits.idleMs,
    keepAliveTimeout: limits.keepAliveMs,
    loggerInstance: logger as FastifyBaseLogger,
    // One line per review is logged by the handler; Fastify's own per-request lines would double it.
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: config.bodyLimitBytes,
    // No route declares a schema: the review is checked by compileReviewChecks, with one ajv of our own. Fastify's
    // compilers would load a second ajv with ajv-formats, and fast-json-stringify, for nothing.
    schemaController: { compilersFactory: { buildValidator: noRouteSchemas, buildSerializer: noRouteSchemas } },
    // Shutdown is timed by main (--shutdown-delay); requests that reach a closing server are answered, not 503.
    return503OnClosing: false,
  });
  const metrics = new WebhookMetrics();
  metrics.servingCertificate(options.certificate.cert);
  // Fastify types its server as http.Server whatever the options; with `https` it is an https.Server.
  const useCertificate = (next: TlsMaterial): void => {
    (app.server as unknown as HttpsServer).setSecureContext({ ...TLS_OPTIONS, ...next });
    metrics.servingCertificate(next.cert);
  };

  const readiness = { ready: true };
  registerRoutes(app, config, metrics, readiness, await compileReviewChecks());
  const sockets = trackSockets(app.server);
  // close() comes once the shutdown delay has given every request its time: whatever is still open then (a
  // keep-alive connection, a slow upload, a TLS handshake) is cut rather than waited for.
  app.addHook('preClose', (done) => {
    for (const socket of sockets) socket.destroy();
    done();
  });
  // No host: Node listens on :: with IPv4 mapped in, or on 0.0.0.0 where IPv6 is off.
  await listenOrExplain(app, config);

  const address = app.server.address();
  const port = typeof address === 'object' && address !== null ? address.port : config.port;
  const shown = config.address === '' ? 'localhost' : config.address;
  const host = shown.includes(':') ? `[${shown}]` : shown;
  return {
    app,
    useCertificate,
    markNotReady: () => {
      readiness.ready = false;
    },
    url: `https://${host}:${port}`,
    close: async () => {
      await app.close();
    },
  };
}

/** Every TCP connection of the server, TLS handshakes included, which the HTTP layer does not know of yet. */
function trackSockets(server: FastifyInstance['server']): ReadonlySet<Socket> {
  const sockets = new Set<Socket>();
  server.on('connection', (socket: Socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  });
  return sockets;
}

function registerRoutes(
  app: FastifyInstance,
  config: WebhookConfig,
  metrics: WebhookMetrics,
  readiness: { readonly ready: boolean },
  schemas: ReviewSchemaChecks,
): void {
  // The API server only sends JSON; anything else is answered 415 by Fastify rather than parsed as text.
  app.removeContentTypeParser('text/plain');
  app.get(WEBHOOK_PATHS.healthz, async () => 'ok\n');
  app.get(WEBHOOK_PATHS.readyz, async (_request, reply) =>
    readiness.ready ? 'ok\n' : reply.code(503).send('shutting down\n'),
  );
  // While shutting down, every answer ends its keep-alive connection: the client reconnects to another replica.
  app.addHook('onSend', (_request, reply, payload, done) => {
    if (!readiness.ready) reply.header('connection', 'close');
    done(null, payload);
  });

  app.get(WEBHOOK_PATHS.metrics, async (_request, reply) =>
    reply.type(metrics.registry.contentType).send(await metrics.registry.metrics()),
  );

  app.post(WEBHOOK_PATHS.mutate, async (request, reply) => {
    const done = metrics.startReview();
    const answer = answerAdmission(request.body, config.injection, schemas);
    switch (answer.kind) {
      case 'unanswerable':
        throw new InvalidAdmissionReviewError(answer.reason);
      case 'rejected':
        metrics.countFailure('invalid');
        request.log.warn({ uid: answer.response.uid, reason: answer.reason }, 'malformed AdmissionReview denied');
        return reply.send(encodeAdmissionReview(answer.apiVersion, answer.response));
      case 'reviewed': {
        const { review, response, decision } = answer;
        done(decision);
        request.log.info(
          {
            uid: review.request.uid,
            namespace: review.request.namespace,
            pod: podName(review.request.object),
            ...describeDecision(decision),
            warnings: response.warnings,
          },
          'admission reviewed',
        );
        // The type Fastify gives an object it serializes itself: the answer is the same, bytes and headers.
        return reply.type(JSON_CONTENT_TYPE).send(admissionReviewJson(review.apiVersion, response));
      }
    }
  });

  // Every failed /mutate lands here, Fastify's own (415, 413, bad JSON) included, so all are counted.
  app.setErrorHandler((error: FastifyError, request, reply) => {
    const invalid = error instanceof InvalidAdmissionReviewError;
    const statusCode = invalid ? 400 : (error.statusCode ?? 500);
    const onMutate = request.routeOptions.url === WEBHOOK_PATHS.mutate;
    if (onMutate) metrics.countFailure(statusCode < 500 ? 'invalid' : 'error');
    if (statusCode >= 500) request.log.error({ err: error }, onMutate ? 'admission failed' : 'request failed');
    else request.log.warn({ reason: error.message, statusCode }, onMutate ? 'malformed AdmissionReview rejected' : 'request rejected');
    const name = invalid ? 'Bad Request' : error.name;
    return reply.code(statusCode).send({ statusCode, error: name, message: error.message });
  });
}

function describeDecision(decision: AdmissionDecision): Record<string, unknown> {
  switch (decision.action) {
    case 'inject':
      return { action: 'inject', drain: decision.plan };
    case 'deny':
      return { action: 'deny', reason: decision.message };
    default:
      return { action: decision.action, reason: decision.reason };
  }
}

/** Fastify's compilers, for route schemas: there are none, and one added later must not go unchecked. */
function noRouteSchemas(): never {
  throw new Error('the webhook declares no route schemas: the review is checked by compileReviewChecks (review-schema.ts)');
}

/** For the log line only; the object of a request that is not a Pod CREATE was never checked, so nothing is assumed. */
function podName(object: unknown): string | undefined {
  const metadata = isJsonObject(object) && isJsonObject(object.metadata) ? object.metadata : {};
  const { name, generateName } = metadata;
  if (typeof name === 'string') return name;
  return typeof generateName === 'string' && generateName !== '' ? `${generateName}*` : undefined;
}

/** The server could not listen: says where, and what to check, in one line (as the sidecar's ServeError does). */
export class WebhookServeError extends UserFacingError {
  override readonly name = 'WebhookServeError';

  constructor(address: string, port: number, cause: NodeJS.ErrnoException) {
    const where = address === '' ? `port ${port} of every interface` : `${address.includes(':') ? `[${address}]` : address}:${port}`;
    const hint =
      cause.code === 'EADDRINUSE'
        ? 'the port is taken (another process, or another webhook replica on the host network, listens on it): choose another --port'
        : cause.code === 'EADDRNOTAVAIL'
          ? 'no interface has this address: check --address'
          : cause.code === 'EACCES'
            ? 'a port below 1024 needs privileges the webhook does not have: choose --port 1024 or above'
            : cause.message;
    super(`cannot serve on ${where}: ${hint}`, { cause });
  }
}

async function listenOrExplain(app: FastifyInstance, config: WebhookConfig): Promise<void> {
  try {
    // No host: Node listens on :: with IPv4 mapped in, or on 0.0.0.0 where IPv6 is off.
    await app.listen({ port: config.port, ...(config.address === '' ? {} : { host: config.address }) });
  } catch (error) {
    if (!isErrnoException(error)) throw error;
    throw new WebhookServeError(config.address, config.port, error);
  }
}

function isErrnoException(error: unknown): error is NodeJS.ErrnoException {
  return error instanceof Error && typeof (error as NodeJS.ErrnoException).code === 'string' && (error as NodeJS.ErrnoException).syscall !== undefined;
}
