/**
 * Development certificates on disk, for `--dev-certs`: a webhook started on a laptop or in a test can
 * serve TLS without anyone running `npm run certs` first. The file operations below serve `npm run certs`
 * (src/cli/certs.ts) too.
 */
import { randomBytes } from 'node:crypto';
import { access, chmod, mkdir, rename, rm, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { UserFacingError } from '../errors.js';
import { generateCertificates } from './generate.js';

export const DEV_DNS_NAMES: readonly string[] = ['localhost'];
export const DEV_IP_ADDRESSES: readonly string[] = ['127.0.0.1', '::1'];
/** Written next to the certificate, so that a client (curl --cacert, a test) can trust the dev server. */
export const DEV_CA_FILE_NAME = 'ca.crt';

/** The files cannot be created as asked; the message says which file and what to do. */
export class DevCertificatesError extends UserFacingError {
  override readonly name = 'DevCertificatesError';
}

export async function exists(path: string): Promise<boolean> {
  try {
    await access(path);
    return true;
  } catch {
    return false;
  }
}

/**
 * Writes through a temporary file and a rename, so that a reader (the webhook's certificate watcher)
 * never sees a half-written PEM file.
 */
export async function writeFileAtomic(path: string, contents: string, mode: number): Promise<void> {
  await mkdir(dirname(path), { recursive: true });
  const temporary = `${path}.${randomBytes(6).toString('hex')}.tmp`;
  try {
    await writeFile(temporary, contents, { mode, flag: 'wx' });
    // writeFile's mode is filtered by the umask and ignored for existing files; make it exact.
    await chmod(temporary, mode);
    await rename(temporary, path);
  } catch (error) {
    await rm(temporary, { force: true });
    throw error;
  }
}

/**
 * Generates a development CA and a certificate for localhost, 127.0.0.1 and ::1 unless both files exist.
 * Existing files are never overwritten: if only one of the two exists, that is a mistake to fix by hand
 * (a certificate without its key, or the reverse) and this throws instead of replacing it.
 */
export async function ensureDevCertificates(
  certFile: string,
  keyFile: string,
): Promise<{ generated: boolean; caFile?: string }> {
  const [haveCert, haveKey] = await Promise.all([exists(certFile), exists(keyFile)]);
  if (haveCert && haveKey) return { generated: false };
  if (haveCert !== haveKey) {
    const [present, missing] = haveCert ? [certFile, keyFile] : [keyFile, certFile];
    throw new DevCertificatesError(
      `dev certificates: ${present} exists but ${missing} does not; ` +
        `remove ${present} to have a new pair generated, or point the flags at a matching certificate and key`,
    );
  }
  const caFile = join(dirname(certFile), DEV_CA_FILE_NAME);
  if (resolve(caFile) === resolve(certFile) || resolve(caFile) === resolve(keyFile)) {
    throw new DevCertificatesError(
      `dev certificates: ${DEV_CA_FILE_NAME} is reserved for the development CA; name the certificate and key otherwise`,
    );
  }

  const bundle = await generateCertificates({ dnsNames: DEV_DNS_NAMES, ipAddresses: DEV_IP_ADDRESSES });
  // Key before certificate: a watcher that reloads on a certificate change then finds the matching key.
  await writeFileAtomic(keyFile, bundle.keyPem, 0o600);
  await writeFileAtomic(certFile, bundle.certPem, 0o644);
  await writeFileAtomic(caFile, bundle.caCertPem, 0o644);
  return { generated: true, caFile };
}
