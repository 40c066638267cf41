/**
 * A TCP proxy listener (envoy.filters.network.tcp_proxy, stat prefix `ingress_tcp` by default;
 * source/common/tcp_proxy/tcp_proxy.cc) in front of an echo upstream: it holds raw connections and echoes
 * their bytes. Each accepted connection counts in `listener.<address>.*` (docs/root/configuration/listeners/
 * stats.rst) and in `tcp.<prefix>.downstream_cx_total`; tcp_proxy has no `downstream_cx_active`. A drain gives
 * its connections no signal (no HTTP connection manager): they stay open until their peers close them or
 * Envoy exits (tcp_proxy's recent opt-in drain check after reads/writes is not modelled).
 */
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { closeServer, listenOrInherit, type EmulatorCore } from './core.js';
import { listenerConfig, type ListenerConfig } from './drain-manager.js';
import { counter, listenerStatName, ListenerStats, type StatValue } from './stats.js';
import type { ListenerSpec } from './types.js';

export class TcpProxyListener {
  readonly config: ListenerConfig;
  private server: net.Server;
  private listener: ListenerStats | undefined;

  constructor(
    private readonly core: EmulatorCore,
    spec: ListenerSpec | undefined,
  ) {
    this.config = listenerConfig(spec);
    this.server = net.createServer((socket) => {
      this.core.track(socket, this.stats);
      // An echo upstream behind the proxy: bytes go back, the connection lives until the client ends it.
      socket.pipe(socket);
      socket.on('error', () => socket.destroy());
    });
  }

  /** Binds the listener (or takes a hot restart parent's, `inherited`); its stats are named after the port it got. */
  async listen(inherited?: net.Server): Promise<void> {
    const { host, tcpPort, statAddress, workers } = this.core.options;
    this.server = await listenOrInherit(this.server, inherited, tcpPort, host);
    this.listener = new ListenerStats(listenerStatName(statAddress, (this.server.address() as AddressInfo).port), workers);
  }

  /** The listener's per-worker connection bookkeeping (`listener.<address>.*`). */
  get stats(): ListenerStats {
    if (this.listener === undefined) throw new Error('the TCP proxy listener is not listening yet');
    return this.listener;
  }

  get port(): number | undefined {
    return (this.server.address() as AddressInfo | null)?.port;
  }

  /** The listener's socket, for ListenerManagerImpl::stopListeners. */
  get socket(): net.Server {
    return this.server;
  }

  /** The listener's stats and tcp_proxy's `tcp.<prefix>.downstream_cx_total`. */
  statValues(): StatValue[] {
    return [...this.stats.stats(), counter(`tcp.${this.core.options.tcpStatPrefix}.downstream_cx_total`, this.stats.total)];
  }

  close(): Promise<void> {
    return closeServer(this.server);
  }
}
