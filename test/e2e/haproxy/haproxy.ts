/**
 * A real HAProxy (Debian's `haproxy`, 2.6) in front of emulated Envoy pods, as a child process: the harness writes
 * an haproxy.cfg into a temporary directory and runs `haproxy -f <cfg> -db` (foreground, no daemon).
 *
 * - The frontend's listening socket is bound by this process on 127.0.0.1 port 0 (the OS picks a free port) and
 *   handed to HAProxy as file descriptor 3 (`bind fd@3`): no fixed port, and no window in which another process
 *   could take the port between choosing and binding it.
 * - Logs go to HAProxy's standard output (`log stdout format raw local0`): the server state changes ("Server
 *   be/srv0 is DOWN, reason: ...") and one line per request (HTTP) or per connection (TCP) in a log-format of
 *   ours, each stamped with Date.now() when this process reads it (HAProxy's raw format carries no time).
 * - Its stats socket is a Unix socket in the same directory (`show stat`), read to wait until every server has
 *   passed a check before the scenario starts.
 * - `mode http`: `option httpchk GET <path>` (HTTP/1.1 with a Host header) against each pod's traffic listener,
 *   `check inter <ms> fall <n> rise <n>`, `http-reuse` as asked, a request on a client connection routed on its
 *   own (HAProxy's default keep-alive mode, no `prefer-last-server`); HTTP/2 from clients (h2c, prior knowledge)
 *   is taken on the same frontend, HAProxy upgrading a connection that starts with the HTTP/2 preface.
 *   `mode tcp`: plain TCP connect checks against each pod's TCP-proxy listener.
 * - Retries: HAProxy's default `retries 3` to the same server, and no `option redispatch` (HAProxy's default): a
 *   connection refused by a server HAProxy still takes for UP is retried there and then answered 503 (HTTP) or
 *   closed (TCP): the loss is the client's. With `option redispatch` the last retry would go to another server,
 *   which would hide such losses; `redispatch: true` turns it on.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

/** Why HAProxy cannot be run here, or undefined when it can (`haproxy -v` answers). */
export function haproxyUnavailable(): string | undefined {
  const probe = spawnSync('haproxy', ['-v'], { encoding: 'utf8', timeout: 10_000 });
  if (probe.error !== undefined || probe.status !== 0) {
    const ci = process.env['HAPROXY_UNAVAILABLE'];
    return `haproxy is not installed (${ci ?? 'apt-get install haproxy'})`;
  }
  return undefined;
}

/** `haproxy -v`'s first line, e.g. "HAProxy version 2.6.12-1+deb12u4 2026/10/17 - https://haproxy.org/". */
export function haproxyVersion(): string {
  const probe = spawnSync('haproxy', ['-v'], { encoding: 'utf8', timeout: 10_000 });
  return (probe.stdout ?? '').split('\n')[0]?.replace(/ - https?:\/\/\S+/, '').trim() ?? '';
}

export interface BackendServer {
  /** HAProxy's server name, e.g. srv0. */
  readonly name: string;
  readonly port: number;
}

export interface HaproxyConfig {
  readonly mode: 'http' | 'tcp';
  readonly servers: readonly BackendServer[];
  /** HTTP checks: the request line's path (`option httpchk GET <path>`); ignored in tcp mode (connect checks). */
  readonly checkPath?: string;
  /** `inter`: ms between two checks of a server. */
  readonly checkInterMs: number;
  /** `fall`: failed checks in a row before a server is DOWN. */
  readonly fall: number;
  /** `rise`: passed checks in a row before a DOWN server is UP again. */
  readonly rise: number;
  /** `http-reuse` (http mode); HAProxy's default is safe. */
  readonly httpReuse?: 'never' | 'safe' | 'aggressive' | 'always';
  /** `option redispatch` (off, HAProxy's default: see the header). */
  readonly redispatch?: boolean;
  /** `timeout connect`, ms: also HAProxy's pause before a retry (min(timeout connect, 1 s)). */
  readonly connectTimeoutMs?: number;
}

/** One request (HTTP) or connection (TCP) HAProxy logged at its end. */
export interface LoggedRequest {
  /** Date.now() when the line was read, minus the request's (connection's) total time: about when it reached HAProxy. */
  readonly at: number;
  readonly server: string;
  /** HTTP status HAProxy sent the client (-1: none); 0 in tcp mode. */
  readonly status: number;
  /** HAProxy's termination state (%ts), e.g. "--" for a normal end, "SC" for a server connection refused. */
  readonly termination: string;
  /** Retries HAProxy made (%rc). */
  readonly retries: number;
}

export interface ServerStateChange {
  /** Date.now() when the line was read. */
  readonly at: number;
  readonly server: string;
  readonly state: 'UP' | 'DOWN';
  readonly line: string;
}

const HTTP_LOG = 'REQ %s %ST %Ta %ts %rc';
const TCP_LOG = 'TCP %s 0 %Tt %ts %rc';
const LOG_LINE = /^(REQ|TCP) (\S+) (-?\d+) (-?\d+) (\S+) (-?\+?\d+)$/;
const STATE_LINE = /Server be\/(\S+) is (UP|DOWN)\b/;

/** The haproxy.cfg for `config`, with the frontend on fd 3 and the stats socket at `statsSocket`. */
export function haproxyConfig(config: HaproxyConfig, statsSocket: string): string {
  const { mode } = config;
  const checks = `check inter ${config.checkInterMs} fall ${config.fall} rise ${config.rise}`;
  const lines = [
    'global',
    '  log stdout format raw local0',
    // One thread: the machine has 2 cores, shared with Envoy emulators, the sidecar and the clients.
    '  nbthread 1',
    `  stats socket ${statsSocket} mode 600 level admin`,
    'defaults',
    `  mode ${mode}`,
    '  log global',
    `  log-format "${mode === 'http' ? HTTP_LOG : TCP_LOG}"`,
    `  timeout connect ${config.connectTimeoutMs ?? 200}ms`,
    '  timeout client 30s',
    '  timeout server 30s',
    '  retries 3',
    ...(config.redispatch === true ? ['  option redispatch'] : []),
    'frontend fe',
    '  bind fd@3',
    '  default_backend be',
    'backend be',
    '  balance roundrobin',
    ...(mode === 'http'
      ? [
          `  http-reuse ${config.httpReuse ?? 'safe'}`,
          `  option httpchk`,
          `  http-check send meth GET uri ${config.checkPath ?? '/healthz'} ver HTTP/1.1 hdr Host haproxy-check`,
          '  http-check expect status 200',
        ]
      : []),
    ...config.servers.map((server) => `  server ${server.name} 127.0.0.1:${server.port} ${checks}`),
  ];
  return `${lines.join('\n')}\n`;
}

/** A `show stat` row, by column name. */
export type StatRow = Readonly<Record<string, string>>;

export class Haproxy {
  readonly requests: LoggedRequest[] = [];
  readonly stateChanges: ServerStateChange[] = [];
  /** Lines HAProxy logged that are neither (kept for diagnostics, bounded). */
  readonly otherLines: string[] = [];
  private stderrText = '';
  private readonly exited: Promise<unknown>;

  private constructor(
    readonly config: HaproxyConfig,
    readonly port: number,
    private readonly child: ChildProcess,
    private readonly directory: string,
    private readonly statsSocket: string,
  ) {
    this.exited = once(child, 'close');
    // Should this process exit without stopping it (a crash), HAProxy must not outlive it.
    process.once('exit', this.killOnExit);
    child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
      if (this.stderrText.length < 20_000) this.stderrText += chunk;
    });
    createInterface({ input: child.stdout! }).on('line', (line) => this.onLine(line));
  }

  /** Writes the configuration, starts HAProxy and waits (bounded) until every server has passed a check. */
  static async start(config: HaproxyConfig, readyTimeoutMs = 10_000): Promise<Haproxy> {
    const directory = await mkdtemp(join(tmpdir(), 'esm-haproxy-'));
    const statsSocket = join(directory, 'stats.sock');
    const cfg = join(directory, 'haproxy.cfg');
    await writeFile(cfg, haproxyConfig(config, statsSocket));
    const frontend = net.createServer();
    try {
      await new Promise<void>((resolve, reject) => {
        frontend.once('error', reject);
        frontend.listen({ port: 0, host: '127.0.0.1' }, () => resolve());
      });
    } catch (error) {
      await rm(directory, { recursive: true, force: true });
      throw error;
    }
    const port = (frontend.address() as net.AddressInfo).port;
    // The listening socket's descriptor (libuv's TCP handle has it on Unix), duplicated into the child as fd 3.
    const fd = (frontend as unknown as { _handle: { fd: number } })._handle.fd;
    let child: ChildProcess;
    try {
      child = spawn('haproxy', ['-f', cfg, '-db'], { stdio: ['ignore', 'pipe', 'pipe', fd] });
    } finally {
      // This process must not accept on it: HAProxy has its own copy now.
      frontend.close();
    }
    const haproxy = new Haproxy(config, port, child, directory, statsSocket);
    child.once('error', () => undefined);
    try {
      await haproxy.waitUntilChecked(readyTimeoutMs);
    } catch (error) {
      await haproxy.stop();
      throw error;
    }
    return haproxy;
  }

  get stderr(): string {
    return this.stderrText;
  }

  /** The first time `server` was logged DOWN at or after `since` (Date.now() ms). */
  downAt(server: string, since: number): number | undefined {
    return this.stateChanges.find((change) => change.server === server && change.state === 'DOWN' && change.at >= since)?.at;
  }

  /** Resolves (true) once `server` is logged DOWN at or after `since`, or (false) after `timeoutMs`. */
  async waitForDown(server: string, since: number, timeoutMs: number): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    while (this.downAt(server, since) === undefined) {
      if (Date.now() >= deadline || this.child.exitCode !== null) return false;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    return true;
  }

  /** `show stat` on the stats socket: one row per frontend, backend and server. */
  async stats(timeoutMs = 2_000): Promise<StatRow[]> {
    const text = await new Promise<string>((resolve, reject) => {
      const socket = net.connect(this.statsSocket);
      let body = '';
      const timer = setTimeout(() => socket.destroy(new Error(`show stat: no answer within ${timeoutMs} ms`)), timeoutMs);
      socket.setEncoding('utf8');
      socket.on('data', (chunk: string) => (body += chunk));
      socket.on('end', () => (clearTimeout(timer), resolve(body)));
      socket.on('error', (error) => (clearTimeout(timer), reject(error)));
      socket.end('show stat\n');
    });
    const [header = '', ...rows] = text.split('\n').filter((line) => line.trim() !== '');
    const columns = header.replace(/^# /, '').split(',');
    return rows.map((row) => Object.fromEntries(row.split(',').map((value, index) => [columns[index] ?? String(index), value])));
  }

  private readonly killOnExit = (): void => {
    this.child.kill('SIGKILL');
  };

  /** SIGTERM (HAProxy's hard stop), then SIGKILL if it has not exited within 2 s; removes the directory. */
  async stop(): Promise<void> {
    process.off('exit', this.killOnExit);
    if (this.child.exitCode === null && this.child.signalCode === null) {
      this.child.kill('SIGTERM');
      const timer = setTimeout(() => this.child.kill('SIGKILL'), 2_000);
      await this.exited;
      clearTimeout(timer);
    }
    await rm(this.directory, { recursive: true, force: true });
  }

  private async waitUntilChecked(timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    let last = '';
    // Bounded by the deadline: HAProxy checks every inter, so a few rounds suffice.
    while (Date.now() < deadline) {
      if (this.child.exitCode !== null) throw new Error(`haproxy exited with ${this.child.exitCode}: ${this.stderrText}`);
      try {
        const servers = (await this.stats()).filter((row) => row['pxname'] === 'be' && row['svname'] !== 'BACKEND');
        last = servers.map((row) => `${row['svname']} ${row['status']} ${row['check_status']}`).join(', ');
        const passed = /^(L7OK|L4OK)$/;
        if (servers.length === this.config.servers.length && servers.every((row) => row['status'] === 'UP' && passed.test(row['check_status'] ?? ''))) return;
      } catch {
        // The socket is not there yet.
      }
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    throw new Error(`haproxy's servers did not all pass a check within ${timeoutMs} ms (${last}); stderr: ${this.stderrText}`);
  }

  private onLine(line: string): void {
    const now = Date.now();
    const request = LOG_LINE.exec(line);
    if (request !== null) {
      const [, , server = '', status = '0', time = '0', termination = '', retries = '0'] = request;
      this.requests.push({ at: now - Math.max(0, Number(time)), server, status: Number(status), termination, retries: Number(retries.replace('+', '')) });
      return;
    }
    const state = STATE_LINE.exec(line);
    if (state !== null) {
      this.stateChanges.push({ at: now, server: state[1] ?? '', state: state[2] as 'UP' | 'DOWN', line });
      return;
    }
    if (this.otherLines.length < 200) this.otherLines.push(line);
  }
}
