/**
 * The ledger of this sidecar's own connections to the admin port (docs/glossary.md#ledger): its sockets, numbered
 * as they are created, and which of them the admin port answered on. That is what a process's admin counter must
 * have grown by between two reads (identity.ts OwnConnections).
 */
import type { OwnConnections } from './identity.js';

/** Numbers kept; an older one forgotten makes a count lower, which can only make two reads look more alike, never less. */
const CONNECTED_KEPT = 1_024;

export class OwnConnectionLedger implements OwnConnections {
  private count = 0;
  private readonly connected: number[] = [];

  connectionMarker(): number {
    return this.count;
  }

  /**
   * A new socket's number, and what to call (once or more) once the admin port has answered on it: a status line
   * proves that Envoy accepted it. Connected is not enough: Envoy closes a connection over its global connection
   * limit, or under overload, at accept, without counting it.
   */
  created(): () => void {
    const number = ++this.count;
    let counted = false;
    return () => {
      if (counted) return;
      counted = true;
      this.connected.push(number);
      if (this.connected.length > CONNECTED_KEPT) this.connected.splice(0, CONNECTED_KEPT / 2);
    };
  }

  connectedSince(marker: number): number {
    let count = 0;
    for (const number of this.connected) if (number > marker) count += 1;
    return count;
  }
}
