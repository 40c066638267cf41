/** A serving certificate as node:tls takes it, whichever source it comes from (files, the self-managed Secret). */
import type { SecureContextOptions } from 'node:tls';

export interface TlsMaterial {
  readonly cert: Buffer;
  readonly key: Buffer;
}

/** TLS 1.2 is the oldest version the Kubernetes API server speaks; nothing older is accepted. */
export const TLS_OPTIONS = { minVersion: 'TLSv1.2' } as const satisfies SecureContextOptions;
