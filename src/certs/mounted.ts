/**
 * Serving certificates from files (--tls-cert-file/--tls-key-file, or --dev-certs' once generated) that can
 * change under a running server: cert-manager (or a kubelet Secret volume update) swaps the files, and new
 * TLS connections must see the new certificate without a restart. Changes are noticed by fs.watch for
 * promptness and by polling for reliability (Secret volumes swap a symlinked directory, which watchers do
 * not always report).
 */
import { readFileSync, watch, type FSWatcher } from 'node:fs';
import { dirname } from 'node:path';
import type { Logger } from 'pino';
import { UserFacingError } from '../errors.js';
import { TLS_OPTIONS, type TlsMaterial } from './material.js';
import type { TlsSource } from './tls-source.js';

/** Not imported: an ESM import of node:tls reads all its exports, 1 MiB of memory on Node 20 (see src/envoy/admin-client.ts). */
const { createSecureContext } = process.getBuiltinModule('node:tls');

export class TlsFileError extends UserFacingError {
  override readonly name = 'TlsFileError';
}

/** Reads and checks a certificate/key pair; throws TlsFileError naming the file and what is wrong. */
export function readTlsMaterial(certFile: string, keyFile: string): TlsMaterial {
  const cert = readPem(certFile, 'certificate (--tls-cert-file)');
  const key = readPem(keyFile, 'private key (--tls-key-file)');
  try {
    createSecureContext({ ...TLS_OPTIONS, cert, key });
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    throw new TlsFileError(`certificate ${certFile} and key ${keyFile} cannot be used together: ${reason}`);
  }
  return { cert, key };
}

function readPem(file: string, what: string): Buffer {
  try {
    return readFileSync(file);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code ?? String(error);
    throw new TlsFileError(
      `cannot read the ${what} ${file}: ${code}; mount the serving certificate there, or run with --dev-certs locally`,
    );
  }
}

export interface MountedCertificateOptions {
  readonly certFile: string;
  readonly keyFile: string;
  readonly logger: Logger;
  readonly pollIntervalMs?: number;
}

/** The mounted files as a TlsSource: read at construction (TlsFileError when they cannot be), reloaded once started. */
export class MountedCertificate implements TlsSource {
  private current: TlsMaterial;
  private apply: ((material: TlsMaterial) => void) | undefined;
  private readonly watchers: FSWatcher[] = [];
  private timer: NodeJS.Timeout | undefined;
  private debounce: NodeJS.Timeout | undefined;

  constructor(private readonly options: MountedCertificateOptions) {
    this.current = readTlsMaterial(options.certFile, options.keyFile);
  }

  /** What is served now: the files as read at construction until a reload replaces them. */
  get certificate(): TlsMaterial {
    return this.current;
  }

  start(apply: (material: TlsMaterial) => void): void {
    this.apply = apply;
    const directories = new Set([dirname(this.options.certFile), dirname(this.options.keyFile)]);
    for (const directory of directories) {
      try {
        const watcher = watch(directory, () => this.scheduleCheck());
        watcher.on('error', () => undefined); // polling still covers this directory
        this.watchers.push(watcher);
      } catch {
        // A directory that cannot be watched is still polled.
      }
    }
    this.timer = setInterval(() => this.check(), this.options.pollIntervalMs ?? 10_000);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    for (const watcher of this.watchers.splice(0)) watcher.close();
    clearInterval(this.timer);
    clearTimeout(this.debounce);
  }

  /** Several events arrive for one rotation (cert, then key): wait until they settle. */
  private scheduleCheck(): void {
    clearTimeout(this.debounce);
    this.debounce = setTimeout(() => this.check(), 100);
    this.debounce.unref();
  }

  /** Reads the files and serves them if they changed. */
  private check(): void {
    let next: TlsMaterial;
    try {
      next = readTlsMaterial(this.options.certFile, this.options.keyFile);
    } catch (error) {
      // Mid-rotation the cert may not match the key yet: keep serving the old pair and look again later.
      this.options.logger.warn({ err: error }, 'serving certificate not reloaded; keeping the current one');
      return;
    }
    if (next.cert.equals(this.current.cert) && next.key.equals(this.current.key)) return;
    this.apply?.(next);
    this.current = next;
    this.options.logger.info({ certFile: this.options.certFile }, 'serving certificate reloaded');
  }
}
