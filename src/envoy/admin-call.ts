/**
 * One admin call over node:http: its request, its own timer and the caller's abort listener, settled exactly once,
 * every failure one of the typed errors of admin-errors.ts. EnvoyAdminClient (admin-client.ts) makes them.
 */
import { OwnedTimer } from '../clock.js';
import { socketPathState, type ConnectTarget } from './admin-address.js';
import { AdminRefusedError, AdminResponseError, AdminTimeoutError, AdminTransportError, type EnvoyAdminError } from './admin-errors.js';

/** As CommonJS loads it: see admin-client.ts for why not an ESM import. */
const http = process.getBuiltinModule('node:http');

const ANSWER_EXCERPT_LENGTH = 120;
/** An excerpt is made from this much of the body at most: enough for any indentation, never megabytes. */
const EXCERPT_SOURCE_BYTES = 8 * 1024;

/** One line, for log lines and messages: whitespace runs (Envoy's JSON is indented) become one space. */
export function answerExcerpt(body: string): string {
  const line = body.slice(0, EXCERPT_SOURCE_BYTES).trim().replace(/\s+/g, ' ');
  return line.length > ANSWER_EXCERPT_LENGTH ? `${line.slice(0, ANSWER_EXCERPT_LENGTH)}…` : line;
}

export interface CallSpec {
  readonly connectTo: ConnectTarget;
  readonly method: 'GET' | 'POST';
  readonly path: string;
  readonly agent: import('node:http').Agent;
  /** For messages: `http://host:port` or `unix:/path`. */
  readonly target: string;
  readonly timeoutMs: number;
  readonly maxBodyBytes: number;
  readonly signal: AbortSignal | undefined;
  /** Called once per call that got a status line, with the body or the part of it that arrived. */
  readonly onAnswer: (status: number, body: string) => void;
  /**
   * Numbers the call's socket when it is created; the returned function is called once the admin port has
   * answered on it (a status line), which proves that Envoy accepted it: connected is not enough, since Envoy
   * closes a connection over its global connection limit, or under overload, at accept, without counting it.
   */
  readonly onSocket: () => () => void;
}

/**
 * One admin call: its request, its own timer and the caller's abort listener, settled exactly once. Every way
 * it can end (answer, timeout, abort, error, a close without a complete answer) goes through `succeed` or
 * `fail`, which clear the timer and remove the listener; `fail` also destroys the socket.
 *
 * Why an owned setTimeout and not AbortSignal.timeout/any: on Node 20 a timeout signal's timer may be
 * collected before it fires when nothing else holds the signal (the call then never settles), and
 * AbortSignal.any([timeout, callerSignal]) keeps ~115 bytes per call on a long-lived caller signal.
 */
export class AdminCall {
  readonly settled: Promise<{ readonly status: number; readonly body: string }>;
  private resolve!: (answer: { status: number; body: string }) => void;
  private reject!: (error: EnvoyAdminError) => void;
  private done = false;
  private connected = false;
  private status: number | undefined;
  private readonly chunks: Buffer[] = [];
  private size = 0;
  private readonly timer: OwnedTimer;
  private readonly request: import('node:http').ClientRequest;
  private readonly onAbort = (): void => this.fail(new AdminTransportError(this.endpoint, 'cancelled by the caller'));

  constructor(
    private readonly endpoint: string,
    private readonly spec: CallSpec,
  ) {
    this.settled = new Promise((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
    this.timer = new OwnedTimer(spec.timeoutMs, () => this.fail(this.timeoutError()));
    spec.signal?.addEventListener('abort', this.onAbort, { once: true });
    this.request = http.request({
      ...('socketPath' in spec.connectTo ? { socketPath: spec.connectTo.socketPath } : { ...spec.connectTo, autoSelectFamily: true }),
      method: spec.method,
      path: spec.path,
      agent: spec.agent,
      headers: { accept: 'application/json, text/plain' },
    });
    this.listen();
    this.request.end();
  }

  /** Ends the call at once as a transport failure (the client is closing). */
  cancel(why: string): void {
    this.fail(new AdminTransportError(this.endpoint, why));
  }

  private listen(): void {
    const request = this.request;
    let answered = (): void => undefined;
    request.on('socket', (socket) => {
      answered = this.spec.onSocket();
      socket.once('connect', () => (this.connected = true));
    });
    request.on('response', (response) => {
      answered();
      this.read(response);
    });
    // Node emits 'upgrade' for a 101 and 'information' for other 1xx: Envoy's admin API sends neither.
    request.on('upgrade', (response, socket) => {
      answered();
      socket.destroy();
      this.status = response.statusCode;
      this.fail(new AdminResponseError(this.endpoint, `answered HTTP ${response.statusCode} (a protocol upgrade), which Envoy's admin API never does: is this Envoy's admin port?`));
    });
    request.on('information', ({ statusCode }) => {
      answered();
      if (statusCode === 100) return;
      this.status = statusCode;
      this.fail(new AdminResponseError(this.endpoint, `answered an interim HTTP ${statusCode}, which Envoy's admin API never sends: is this Envoy's admin port?`));
    });
    request.on('error', (error) => this.fail(this.classify(error)));
    // Whatever Node reports or not, a connection that closes before the answer is complete is a failure.
    request.on('close', () => this.fail(this.closedError()));
  }

  private read(response: import('node:http').IncomingMessage): void {
    this.status = response.statusCode ?? 0;
    const declared = Number(response.headers['content-length'] ?? NaN);
    if (declared > this.spec.maxBodyBytes) return this.fail(this.tooLargeError(`declares ${declared} bytes, over`));
    response.on('data', (chunk: Buffer) => {
      if (this.done) return;
      this.size += chunk.length;
      if (this.size > this.spec.maxBodyBytes) return this.fail(this.tooLargeError('went past'));
      this.chunks.push(chunk);
    });
    response.on('end', () => this.succeed());
    response.on('error', (error) => this.fail(this.classify(error)));
  }

  private succeed(): void {
    if (this.done) return;
    this.finish();
    const body = Buffer.concat(this.chunks).toString('utf8');
    const status = this.status ?? 0;
    this.spec.onAnswer(status, body);
    this.resolve({ status, body });
  }

  private fail(error: EnvoyAdminError): void {
    if (this.done) return;
    this.finish();
    this.request.destroy();
    if (this.status !== undefined) this.spec.onAnswer(this.status, this.bodySoFar());
    this.reject(error);
  }

  private finish(): void {
    this.done = true;
    this.timer.clear();
    this.spec.signal?.removeEventListener('abort', this.onAbort);
  }

  /** The beginning of what arrived, enough for an excerpt, without joining megabytes. */
  private bodySoFar(): string {
    return Buffer.concat(this.chunks.slice(0, 4)).subarray(0, EXCERPT_SOURCE_BYTES).toString('utf8');
  }

  /** What had arrived when the call ended: tells "never connected" from "answer cut short". */
  private progress(): string {
    if (this.status !== undefined) return `after HTTP ${this.status} and ${this.size} bytes of its body`;
    return this.connected ? 'connected, no answer yet' : 'not connected yet';
  }

  private timeoutError(): AdminTimeoutError {
    return new AdminTimeoutError(
      this.endpoint,
      `no complete answer within ${this.spec.timeoutMs} ms from ${this.spec.target} (${this.progress()}): Envoy may be overloaded; it may have acted on the call`,
    );
  }

  private closedError(): EnvoyAdminError {
    return new AdminTransportError(this.endpoint, `the connection to ${this.spec.target} closed before a complete answer (${this.progress()})`);
  }

  /** `what`: "declares N bytes, over" or "went past". */
  private tooLargeError(what: string): AdminResponseError {
    return new AdminResponseError(this.endpoint, `the answer ${what} the ${this.spec.maxBodyBytes}-byte limit for this call: not an answer Envoy gives`);
  }

  private classify(error: Error): EnvoyAdminError {
    const code = (error as NodeJS.ErrnoException).code;
    // Before ECONNREFUSED: connecting to a path that is a regular file or a directory is refused too (Linux).
    if ('socketPath' in this.spec.connectTo && (code === 'ECONNREFUSED' || code === 'ENOENT' || code === 'ENOTSOCK')) {
      return this.classifySocketPath(code, this.spec.connectTo.socketPath, error);
    }
    if (code === 'ECONNREFUSED') {
      return new AdminRefusedError(this.endpoint, `connection refused at ${this.spec.target} (Envoy not running?)`, { cause: error });
    }
    if (code?.startsWith('HPE_') === true) {
      return new AdminResponseError(this.endpoint, `answered something that is not HTTP/1.1 (${code}: ${error.message}): is this Envoy's admin port?`, { cause: error });
    }
    if ('socketPath' in this.spec.connectTo) {
      const socketError = this.classifySocketError(code, this.spec.connectTo.socketPath, error);
      if (socketError !== undefined) return socketError;
    } else if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') {
      return new AdminTransportError(this.endpoint, `cannot resolve ${JSON.stringify(this.spec.connectTo.host)} (${code}): check --admin-address`, { cause: error });
    }
    if (code === 'ECONNRESET') {
      return new AdminTransportError(this.endpoint, `the connection to ${this.spec.target} was reset (${this.progress()}): Envoy may have exited or restarted`, { cause: error });
    }
    return new AdminTransportError(this.endpoint, `${code ?? error.name}: ${error.message} (${this.progress()})`, { cause: error });
  }

  /**
   * A missing socket file is "nothing listens there", as a closed port is: Envoy not started yet, or exited.
   * A socket the sidecar may not connect to is no sign of Envoy at all, and the message says what to change:
   * connect(2) needs write permission on the socket file (unix(7)), and Contour creates it with mode 0644.
   */
  /**
   * A Unix socket that cannot be connected to, by what is at the path now: a socket nobody listens on (Envoy
   * exited, or not started) and no file at all are refusals; a regular file or a directory where the socket was
   * is no sign of Envoy either way (something replaced the path), and the message says what is there.
   */
  private classifySocketPath(code: string, path: string, cause: Error): EnvoyAdminError {
    const state = socketPathState(path);
    let error: AdminRefusedError | AdminTransportError;
    switch (state) {
      case 'socket':
        error = new AdminRefusedError(this.endpoint, `connection refused at ${this.spec.target}: nothing listens on the socket ${path} (Envoy not running?)`, { cause });
        break;
      case 'missing':
        error = new AdminRefusedError(this.endpoint, `no socket at ${path} (Envoy not started yet, or the directory is not the volume Envoy's container mounts there; or the socket was removed)`, { cause });
        break;
      case 'file':
        error = new AdminTransportError(this.endpoint, `${path} is now a regular file, not a Unix socket (${code}): something replaced Envoy's admin socket; Envoy may still run behind it`, { cause });
        break;
      case 'directory':
        error = new AdminTransportError(this.endpoint, `${path} is now a directory, not a Unix socket (${code}): something replaced Envoy's admin socket; Envoy may still run behind it`, { cause });
        break;
      case 'other':
        error = new AdminTransportError(this.endpoint, `${path} is not a Unix socket (${code}): check --admin-address`, { cause });
        break;
    }
    error.pathState = state;
    return error;
  }

  private classifySocketError(code: string | undefined, path: string, cause: Error): EnvoyAdminError | undefined {
    if (code === 'ENOENT') {
      return new AdminRefusedError(this.endpoint, `no socket at ${path} (Envoy not started yet, or the directory is not the volume Envoy's container mounts there)`, { cause });
    }
    if (code === 'EACCES' || code === 'EPERM') {
      const uid = process.getuid?.() ?? 'unknown';
      return new AdminTransportError(
        this.endpoint,
        `permission denied connecting to ${path} as uid ${uid}: connecting needs write permission on the socket file; run the sidecar as Envoy's user (runAsUser) or give the socket a mode that lets this user connect (admin.address.pipe.mode)`,
        { cause },
      );
    }
    if (code === 'ENOTDIR' || code === 'ENOTSOCK') {
      return new AdminTransportError(this.endpoint, `${path} is not a Unix socket (${code}): check --admin-address`, { cause });
    }
    return undefined;
  }
}
