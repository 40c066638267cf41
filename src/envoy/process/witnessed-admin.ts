/**
 * The admin client the sidecar drains with: EnvoyAdminClient's calls, each refusal carrying what the witness showed,
 * each stats read judged by the witness (witness.ts), and every socket numbered in the ledger (own-connections.ts).
 * What identity.ts needs to tell which process answered, gathered around the HTTP calls in one place.
 */
import { EnvoyAdminClient, type AdminAnswer, type EnvoyAdminOptions, type EnvoyProcessInfo, type EnvoyServerState } from '../admin-client.js';
import { AdminRefusedError } from '../admin-errors.js';
import type { ConnectionCount } from '../stats.js';
import type { EnvoyVersion } from '../version.js';
import type { OwnConnections } from './identity.js';
import { OwnConnectionLedger } from './own-connections.js';
import { WitnessKeeper, type WitnessEvidence } from './witness.js';

/** A connection count, with what the witness connection showed while it was read. */
export type WitnessedCount = ConnectionCount & { readonly evidence: WitnessEvidence };

export class WitnessedAdminClient implements OwnConnections {
  private readonly ledger = new OwnConnectionLedger();
  private readonly http: EnvoyAdminClient;
  private readonly witness: WitnessKeeper;

  constructor(options: EnvoyAdminOptions) {
    this.http = new EnvoyAdminClient(options, { socketCreated: () => this.ledger.created() });
    this.witness = new WitnessKeeper(this.http.connectTarget, options.timeoutMs);
  }

  /** `http://host:port` or `unix:/path`, for logs. */
  get target(): string {
    return this.http.target;
  }

  /** `host:port` (IPv6 in brackets) or `unix:/path`. */
  get address(): string {
    return this.http.address;
  }

  /** See EnvoyAdminClient.hasAnswered. */
  get hasAnswered(): boolean {
    return this.http.hasAnswered;
  }

  get lastAnswer(): AdminAnswer | undefined {
    return this.http.lastAnswer;
  }

  get version(): EnvoyVersion | null {
    return this.http.version;
  }

  /** GET /ready; its answer proves the address is Envoy's admin API, so from then on a witness is kept. */
  async serverState(signal?: AbortSignal): Promise<EnvoyServerState> {
    const state = await this.withEvidence(this.http.serverState(signal));
    this.witness.addressProven();
    return state;
  }

  serverInfo(signal?: AbortSignal): Promise<EnvoyProcessInfo> {
    return this.withEvidence(this.http.serverInfo(signal));
  }

  passHealthChecks(signal?: AbortSignal): Promise<void> {
    return this.withEvidence(this.http.passHealthChecks(signal));
  }

  quit(signal?: AbortSignal): Promise<void> {
    return this.withEvidence(this.http.quit(signal));
  }

  failHealthChecks(signal?: AbortSignal): Promise<void> {
    return this.withEvidence(this.http.failHealthChecks(signal));
  }

  drainListeners(signal?: AbortSignal): Promise<void> {
    return this.withEvidence(this.http.drainListeners(signal));
  }

  /** A stats read, with the witness that spoke for it, if one did (WitnessKeeper.readAnswered). */
  async countOpenConnections(signal?: AbortSignal): Promise<WitnessedCount> {
    await this.witness.connected(signal);
    const sent = this.witness.readSent();
    const count = await this.withEvidence(this.http.countOpenConnections(signal));
    return { ...count, evidence: this.witness.readAnswered(sent, count.hotRestart?.epoch ?? null) };
  }

  /** The witness connection as it is now. */
  witnessEvidence(): WitnessEvidence {
    return this.witness.evidence();
  }

  connectionMarker(): number {
    return this.ledger.connectionMarker();
  }

  connectedSince(marker: number): number {
    return this.ledger.connectedSince(marker);
  }

  /** Ends the calls in flight and the witness. */
  close(): void {
    this.witness.close();
    this.http.close();
  }

  /** A refusal carries what the witness showed as it came: whether the process that held it still lives. */
  private async withEvidence<T>(call: Promise<T>): Promise<T> {
    try {
      return await call;
    } catch (error) {
      if (error instanceof AdminRefusedError) error.evidence = this.witness.evidence();
      throw error;
    }
  }
}
