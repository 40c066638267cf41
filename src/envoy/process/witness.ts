/**
 * The witness (docs/glossary.md#witness): one connection to Envoy's admin address, kept open and never sent a
 * request, that only the process that accepted it can hold and that the kernel closes when that process exits. What
 * it showed around each stats read is the evidence identity.ts judges processes by. Why no request: an admin
 * connection that carries none is never closed by Envoy's drain (`connection: close` on every admin answer after
 * /healthcheck/fail) nor by an idle timeout (AdminImpl leaves idle_timeout_ unset: source/server/admin/admin.h).
 */
import { inodeOf, type ConnectTarget } from '../admin-address.js';
import { holderEpochOf, witnessVouches, type ClosedWitness, type HolderEpoch } from './identity.js';

const net = process.getBuiltinModule('node:net');

/**
 * What the witness connection showed when a read was answered or a call failed: the evidence identity.ts and the
 * drain judge processes by, beyond the counter.
 */
export interface WitnessEvidence {
  /**
   * The witness that was open when the call was sent and still open when it ended, and whose address still
   * names the socket it connected to (a Unix socket path not replaced since); for a stats read, only if held by a
   * process of the read's restart epoch (identity.ts witnessVouches); null when none was.
   */
  readonly witness: number | null;
  /** Every witness numbered up to this one has been closed by the other end (0: none has). */
  readonly closedThrough: number;
  /** How many witnesses had been created when the call ended (they are numbered 1, 2…). */
  readonly created: number;
  /** Of a stats read: how many had been created when it was sent (0: witnesses were not kept yet). */
  readonly createdAtSend?: number;
  /** Whether the latest witness that ever connected has been closed by the other end, and none is open now. */
  readonly lastClosed: boolean;
  /**
   * Of a stats read: `server.hot_restart_epoch` in the same answer (null when absent). A higher one than an earlier
   * read's is a hot restart child, which the witness, held by its parent, says nothing of (identity.ts).
   */
  readonly restartEpoch?: number | null;
  /** The latest witnesses closed by the other end (at most CLOSED_WITNESSES_KEPT), with their holders' epochs. */
  readonly closed: readonly ClosedWitness[];
}

/** Closed witnesses kept for the evidence: one is created at most once per answered read, and older ones decide nothing new. */
const CLOSED_WITNESSES_KEPT = 16;

/** One witness connection. */
interface Witness {
  readonly id: number;
  readonly socket: import('node:net').Socket;
  open: boolean;
  closed: boolean;
  /** For a Unix socket: the socket file it connected to (device and inode). */
  inode: string | undefined;
  /** Closed by us (a connect that hung, a witness let go): not evidence of the other end. */
  givenUp: boolean;
  /** The epoch of the newest stats read answered before it was created (undefined: none). */
  readonly epochBefore: number | null | undefined;
  /** The epoch of the process holding it, once a read sent while it was open settled it. */
  holder: HolderEpoch | undefined;
}

/** What `readSent` took as a stats read went out: the witness open then, and how many had been created. */
export interface ReadSent {
  readonly createdAtSend: number;
  readonly witnessAtSend: Witness | undefined;
}

/**
 * The witnesses of one admin address, one open at a time. Kept from the first answer that proves the address is
 * Envoy's (`addressProven`: GET /ready, the start-up probe's call) or the second stats read answered, so that one-off
 * calls and a wrong address leave no connection behind; reopened after each answered read whenever the last closed.
 */
export class WitnessKeeper {
  private witness: Witness | undefined;
  private witnesses = 0;
  /**
   * `server.hot_restart_epoch` of the newest stats read answered (null: the answer lacked it; undefined: none yet): a
   * witness created after it connected to that process or a later one (identity.ts holderEpochOf).
   */
  private latestEpoch: number | null | undefined;
  private closedWitnesses: ClosedWitness[] = [];
  /** Every witness numbered up to this has closed (ids only grow, and one is opened only once the last closed). */
  private witnessesClosedThrough = 0;
  /** The number of the latest witness that connected, and whether it has closed since. */
  private lastConnectedWitness: { id: number; closed: boolean } | undefined;
  private closing = false;
  /** Stats reads answered so far: witnesses are kept from the second on. */
  private answeredReads = 0;

  /** `timeoutMs`: a connect that hangs longer is given up, as a call is. */
  constructor(
    private readonly connectTo: ConnectTarget,
    private readonly timeoutMs: number,
  ) {}

  /** The address answered as Envoy does (GET /ready): from now on a witness is kept. */
  addressProven(): void {
    this.ensureWitness();
  }

  /**
   * Before a stats read is sent. Once witnesses are kept, no read goes out without one connected: a read sent while
   * none is open (the last one's process just exited) is tied to nothing but its counter, and a young successor's
   * counter can pass for its own (FUZZ_SEED=404). One connect to an address that answered a moment ago: a loopback
   * round trip. Waits until it has connected, failed or been given up at the call timeout, or the caller cancelled;
   * never throws: a read without a witness is still a read.
   */
  async connected(signal: AbortSignal | undefined): Promise<void> {
    if (this.witness === undefined) return;
    this.ensureWitness();
    const connecting = this.witness;
    if (connecting === undefined || connecting.open || connecting.closed || signal?.aborted === true) return;
    await new Promise<void>((resolve) => {
      const done = (): void => {
        signal?.removeEventListener('abort', done);
        connecting.socket.off('connect', done).off('close', done);
        resolve();
      };
      signal?.addEventListener('abort', done, { once: true });
      connecting.socket.once('connect', done).once('close', done);
    });
  }

  /** As a stats read is sent. */
  readSent(): ReadSent {
    return { createdAtSend: this.witnesses, witnessAtSend: this.vouchingWitness() };
  }

  /**
   * As a stats read is answered with `restartEpoch` (`server.hot_restart_epoch`, null when absent): the witness
   * that spoke for it, if one did. A witness held by another process than the one answering (a hot restart's parent,
   * while the child took the address) proves nothing of it: it is let go, and one that connects to the process
   * answering now is opened.
   */
  readAnswered(sent: ReadSent, restartEpoch: number | null): WitnessEvidence {
    const witnessAtAnswer = this.vouchingWitness();
    const held = sent.witnessAtSend !== undefined && sent.witnessAtSend === witnessAtAnswer ? sent.witnessAtSend : undefined;
    const vouches = held !== undefined && witnessVouches(this.settleHolder(held, restartEpoch), restartEpoch);
    const evidence: WitnessEvidence = { ...this.evidence(), witness: vouches ? held.id : null, restartEpoch, createdAtSend: sent.createdAtSend };
    this.latestEpoch = restartEpoch;
    this.answeredReads += 1;
    if (held !== undefined && !vouches) this.renewWitness();
    // From the second answered read on: the next read, and every read after, has a witness to be judged by.
    if (this.answeredReads >= 2) this.ensureWitness();
    return evidence;
  }

  /** The witness connection as it is now; `witness`: the one open now, whatever the address. */
  evidence(): WitnessEvidence {
    const open = this.witness !== undefined && this.witness.open && !this.witness.closed ? this.witness.id : null;
    return {
      witness: open,
      closedThrough: this.witnessesClosedThrough,
      created: this.witnesses,
      lastClosed: open === null && this.lastConnectedWitness?.closed === true,
      closed: [...this.closedWitnesses],
    };
  }

  /** Closes the witness; its close is ours, not evidence of the other end, and none is opened again. */
  close(): void {
    this.closing = true;
    this.witness?.socket.destroy();
  }

  /** The epoch of the process holding `witness`, settled by the first read sent once it was open (identity.ts holderEpochOf). */
  private settleHolder(witness: Witness, readEpoch: number | null): HolderEpoch {
    witness.holder ??= holderEpochOf(witness.epochBefore, readEpoch);
    return witness.holder;
  }

  /**
   * The open witness, if the admin address still names what it connected to: always over TCP (one process binds
   * a port at a time: Envoy's admin listener sets no SO_REUSEPORT); for a Unix socket, only while the path is the
   * same socket (device and inode) as when the witness connected: a second Envoy that unlinks and rebinds the path
   * answers there while the first still holds the witness.
   */
  private vouchingWitness(): Witness | undefined {
    const witness = this.witness;
    if (witness === undefined || !witness.open || witness.closed) return undefined;
    if (!('socketPath' in this.connectTo)) return witness;
    return witness.inode !== undefined && inodeOf(this.connectTo.socketPath) === witness.inode ? witness : undefined;
  }

  /** Lets go of the witness (its close is ours, not evidence of the other end) and opens another. */
  private renewWitness(): void {
    const witness = this.witness;
    if (witness !== undefined && !witness.closed) {
      witness.givenUp = true;
      witness.socket.destroy();
    }
    this.witness = undefined;
    this.ensureWitness();
  }

  /** Opens a witness unless one is open or connecting. Never throws: a witness that cannot connect is just absent. */
  private ensureWitness(): void {
    if (this.closing || (this.witness !== undefined && !this.witness.closed)) return;
    const id = ++this.witnesses;
    const target = this.connectTo;
    const socket = 'socketPath' in target ? net.connect({ path: target.socketPath }) : net.connect({ host: target.host, port: target.port, autoSelectFamily: true });
    const witness: Witness = { id, socket, open: false, closed: false, inode: undefined, givenUp: false, epochBefore: this.latestEpoch, holder: undefined };
    this.witness = witness;
    // A witness never keeps the process alive, and a connect that hangs is given up at the call timeout.
    socket.unref();
    socket.setTimeout(this.timeoutMs, () => {
      if (witness.open) return;
      witness.givenUp = true;
      socket.destroy();
    });
    socket.once('connect', () => {
      socket.setTimeout(0);
      witness.open = true;
      if ('socketPath' in target) witness.inode = inodeOf(target.socketPath);
      this.lastConnectedWitness = { id, closed: false };
    });
    socket.on('data', () => undefined); // Envoy sends nothing unasked; anything is dropped
    socket.on('error', () => undefined); // the close that follows says it
    socket.once('close', () => this.noteClosed(witness));
  }

  private noteClosed(witness: Witness): void {
    witness.closed = true;
    witness.open = false;
    // Given up by us (a connect that hung) or the client closing: nothing the other end did.
    if (witness.givenUp || this.closing) return;
    this.witnessesClosedThrough = Math.max(this.witnessesClosedThrough, witness.id);
    this.closedWitnesses = [...this.closedWitnesses, { id: witness.id, holder: witness.holder }].slice(-CLOSED_WITNESSES_KEPT);
    if (this.lastConnectedWitness?.id === witness.id) this.lastConnectedWitness.closed = true;
  }
}
