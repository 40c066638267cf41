/**
 * Contour's `envoy-admin` listener (projectcontour/contour internal/envoy/v3/stats.go AdminListener), when the
 * `readonlyAdminPort` option asks for it: an HTTP connection manager (stat prefix `envoy-admin`) bound to
 * 127.0.0.1 (`host` here), named `listener.127.0.0.1_<port>` after its real address; exact-path GET routes to
 * the admin API, 404 with no body otherwise, so no mutation passes it. It drain-closes (drain_type DEFAULT)
 * like any HTTP/1.1 listener (http1.ts), its connections are reached by Envoy main's connection-level drain,
 * and stopListeners stops it.
 */
import http from 'node:http';
import type net from 'node:net';
import type { AddressInfo } from 'node:net';
import { closeServer, listenOn, type EmulatorCore } from './core.js';
import { listenerConfig, type ConnectionManager, type ListenerConfig } from './drain-manager.js';
import { countInFlight, drainCloseResponse } from './http1.js';
import { forward, type UpstreamAddress } from './router.js';
import { chargeStats, counter, gauge, listenerStatName, ListenerStats, ResponseCounters, type StatValue } from './stats.js';

/** The stat prefix of Contour's `envoy-admin` listener's HTTP connection manager (internal/envoy/v3/stats.go). */
const READONLY_ADMIN_STAT_PREFIX = 'envoy-admin';
/**
 * Contour's AdminListener routes (internal/envoy/v3/stats.go routeForAdminInterface): exact paths, each
 * requiring `:method` GET (ignore_case), to the `envoy-admin` cluster (the admin API).
 */
const READONLY_ADMIN_PATHS = new Set([
  '/certs', '/clusters', '/listeners', '/config_dump', '/memory', '/ready', '/runtime', '/server_info',
  '/stats', '/stats/prometheus', '/stats/recentlookups',
]);

/**
 * Contour's `envoy-admin` listener (internal/envoy/v3/stats.go AdminListener, filterChain,
 * routeForAdminInterface): an HTTP connection manager with stat prefix `envoy-admin` and the router,
 * whose routes match READONLY_ADMIN_PATHS exactly (the query string is not part of the path; it is
 * forwarded) with header `:method` GET ignoring case, to the cluster `envoy-admin`: the admin API, on its
 * Unix socket or port. Anything else gets the router's local reply for no route, 404 with an empty body
 * (source/common/router/router.cc Filter::decodeHeaders, NoRoute). As an ordinary listener of drain_type
 * DEFAULT it drain-closes like the ingress one, and stopListeners stops it.
 */
export class ReadonlyAdminListener implements ConnectionManager {
  /** An HTTP connection manager listener like the ingress one: drain_type DEFAULT, direction UNSPECIFIED. */
  readonly config: ListenerConfig = listenerConfig(undefined);
  private readonly server: http.Server;
  /** The `envoy-admin` cluster's connection pool: the route to the admin API. */
  private readonly adminAgent = new http.Agent({ keepAlive: true });
  private readonly responses = new ResponseCounters();
  private requests = 0;
  private drainCloses = 0;
  private listener: ListenerStats | undefined;

  constructor(
    private readonly core: EmulatorCore,
    /** Where the admin API listens, as the `envoy-admin` cluster's one endpoint. */
    private readonly adminAddress: () => UpstreamAddress,
  ) {
    const server = http.createServer({ keepAliveTimeout: 0, requestTimeout: 0 }, async (request, response) => {
      this.requests += 1;
      request.resume();
      const connection = this.core.hcmConnections.get(request.socket);
      countInFlight(connection, response);
      // HttpConnectionManager normalize_path (set by Contour): RFC 3986 dot segments resolved, as URL does.
      const url = new URL(request.url ?? '/', 'http://envoy-admin');
      const routed = READONLY_ADMIN_PATHS.has(url.pathname) && (request.method ?? '').toUpperCase() === 'GET';
      const answer = routed ? await forward(`${url.pathname}${url.search}`, this.adminAddress(), this.adminAgent, this.core.closing.signal) : undefined;
      if (this.core.closed || response.destroyed) return;
      const body = answer?.body ?? '';
      const headers: Record<string, string> = { server: 'envoy', 'content-length': String(Buffer.byteLength(body)) };
      if (answer !== undefined) headers['content-type'] = answer.contentType;
      if (drainCloseResponse(this.core, this, connection)) headers['connection'] = 'close';
      chargeStats(this.responses, answer?.status ?? 404, false);
      response.writeHead(answer?.status ?? 404, headers);
      response.end(body);
    });
    server.keepAliveTimeout = 0;
    server.on('connection', (socket: net.Socket) => {
      if (this.listener !== undefined) this.core.track(socket, this.listener);
      this.core.trackHcm(socket, this, 'http1');
    });
    this.server = server;
  }

  /**
   * Binds it. Contour binds it to 127.0.0.1 (stats.go AdminListener), so it is named with the address it is
   * really bound to, not `statAddress`.
   */
  async listen(): Promise<void> {
    await listenOn(this.server, this.core.options.readonlyAdminPort ?? 0, this.core.options.host);
    const bound = this.server.address() as AddressInfo;
    this.listener = new ListenerStats(listenerStatName(bound.address, bound.port), this.core.options.workers);
  }

  get port(): number | undefined {
    return (this.server.address() as AddressInfo | null)?.port;
  }

  /** Its listener's bookkeeping, once it listens. */
  get stats(): ListenerStats | undefined {
    return this.listener;
  }

  /** The listener's socket, for ListenerManagerImpl::stopListeners. */
  get socket(): net.Server {
    return this.server;
  }

  countDrainClose(): void {
    this.drainCloses += 1;
  }

  /** Its listener stats and its HTTP connection manager's `http.envoy-admin.*`, per listener too. */
  statValues(): StatValue[] {
    const listener = this.listener;
    if (listener === undefined) return [];
    const prefix = `http.${READONLY_ADMIN_STAT_PREFIX}`;
    return [
      gauge(`${prefix}.downstream_cx_active`, listener.active, listener.total > 0),
      counter(`${prefix}.downstream_cx_drain_close`, this.drainCloses),
      counter(`${prefix}.downstream_cx_total`, listener.total),
      counter(`${prefix}.downstream_rq_total`, this.requests),
      ...this.responses.stats(prefix),
      ...this.responses.stats(`listener.${listener.statName}.${prefix}`),
      ...listener.stats(),
    ];
  }

  /** At exit: the sockets were cut by the caller; the pool and the listener close. */
  close(): Promise<void> {
    this.adminAgent.destroy();
    this.server.closeAllConnections();
    return closeServer(this.server);
  }
}
