/** Where the webhook's serving certificate comes from, apart from the code that picks one (source.ts), which every kind of source would otherwise import back. */
import type { TlsMaterial } from './material.js';

export interface TlsSource {
  /** The certificate to listen with; later ones go to start()'s `apply`. */
  readonly certificate: TlsMaterial;
  /** From now until stop(), hands every new certificate (rotated files, a renewal) to `apply`. */
  start(apply: (material: TlsMaterial) => void): void;
  /** Stops watching; cancels a self-managed check in progress. */
  stop(): Promise<void>;
}
