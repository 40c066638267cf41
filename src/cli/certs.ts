/**
 * `npm run certs`: a CA and a serving certificate for the webhook Service, for clusters without
 * cert-manager. Its entry point is src/certs-main.ts. Exit codes: 0 done, 1 could not write, 2 the command
 * line is wrong.
 */
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { exists, writeFileAtomic } from '../certs/files.js';
import {
  CertificateRequestError,
  DEFAULT_VALIDITY_DAYS,
  MAX_VALIDITY_DAYS,
  generateCertificates,
  serviceDnsNames,
} from '../certs/generate.js';
import {
  CA_CERT_FILE,
  CA_KEY_FILE,
  DEFAULT_NAMESPACE,
  DEFAULT_SERVICE,
  TLS_CERT_FILE,
  TLS_KEY_FILE,
  TLS_SECRET_NAME,
  WEBHOOK_CONFIGURATION_NAME,
} from '../certs/names.js';
import { EXIT_FAILURE, EXIT_OK, EXIT_USAGE, UsageError } from '../errors.js';
import type { CommandIo } from './io.js';

export const USAGE = `Usage: npm run certs -- [flags]

Generates a CA and a serving certificate for the webhook Service, for clusters without cert-manager.
Writes ${CA_CERT_FILE}, ${TLS_CERT_FILE} and ${TLS_KEY_FILE} (mode 0600) into --out and prints the caBundle.

  --service <name>     Service name of the webhook (default ${DEFAULT_SERVICE})
  --namespace <name>   Namespace of the Service (default ${DEFAULT_NAMESPACE})
  --out <dir>          Output directory, created if needed (default certs)
  --days <n>           Validity in days, 1 to ${MAX_VALIDITY_DAYS} (default ${DEFAULT_VALIDITY_DAYS})
  --dns-name <name>    Extra DNS name for the certificate (repeatable)
  --ip <address>       Extra IP address for the certificate (repeatable)
  --keep-ca-key        Also write ${CA_KEY_FILE} (mode 0600), to sign again later; keep it out of the cluster
  --force              Overwrite existing files in --out
  -h, --help           Show this help
`;

interface Options {
  readonly service: string;
  readonly namespace: string;
  readonly out: string;
  readonly days: number;
  readonly extraDnsNames: readonly string[];
  readonly ipAddresses: readonly string[];
  readonly keepCaKey: boolean;
  readonly force: boolean;
}

// Service and namespace names are RFC 1123 labels; anything else could never be dialled by the API server.
const LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;

function parseOptions(args: readonly string[]): Options | 'help' {
  let parsed;
  try {
    parsed = parseArgs({
      args: [...args],
      strict: true,
      allowPositionals: false,
      options: {
        service: { type: 'string', default: DEFAULT_SERVICE },
        namespace: { type: 'string', default: DEFAULT_NAMESPACE },
        out: { type: 'string', default: 'certs' },
        days: { type: 'string', default: String(DEFAULT_VALIDITY_DAYS) },
        'dns-name': { type: 'string', multiple: true, default: [] },
        ip: { type: 'string', multiple: true, default: [] },
        'keep-ca-key': { type: 'boolean', default: false },
        force: { type: 'boolean', default: false },
        help: { type: 'boolean', short: 'h', default: false },
      },
    });
  } catch (error) {
    // parseArgs already names the flag ("Unknown option '--sevice'"); keep its words.
    throw new UsageError(error instanceof Error ? error.message : String(error));
  }
  const { values } = parsed;
  if (values.help) return 'help';
  for (const flag of ['service', 'namespace'] as const) {
    if (!LABEL.test(values[flag])) {
      throw new UsageError(
        `--${flag}: ${JSON.stringify(values[flag])} is not valid; expected a lowercase DNS label such as ${DEFAULT_SERVICE}`,
      );
    }
  }
  if (values.out.trim() === '') throw new UsageError('--out: "" is not valid; expected a directory path');
  const days = /^\d+$/.test(values.days) ? Number(values.days) : NaN;
  if (!Number.isInteger(days) || days < 1 || days > MAX_VALIDITY_DAYS) {
    throw new UsageError(
      `--days: ${JSON.stringify(values.days)} is not valid; expected a whole number of days from 1 to ${MAX_VALIDITY_DAYS}`,
    );
  }
  return {
    service: values.service,
    namespace: values.namespace,
    out: values.out,
    days,
    extraDnsNames: values['dns-name'],
    ipAddresses: values.ip,
    keepCaKey: values['keep-ca-key'],
    force: values.force,
  };
}

const FLAG_OF_FIELD: Readonly<Record<string, string>> = {
  dnsNames: '--dns-name',
  ipAddresses: '--ip',
  validityDays: '--days',
};

/** Quotes a path for the printed shell commands only when it needs it. */
function shellQuote(text: string): string {
  return /^[\w./:=@-]+$/.test(text) ? text : `'${text.replaceAll("'", `'\\''`)}'`;
}

export async function runCertsCommand(args: readonly string[], io: CommandIo): Promise<number> {
  let options: Options | 'help';
  try {
    options = parseOptions(args);
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    io.stderr.write(`certs: ${error.message}\nRun with --help for the flags.\n`);
    return EXIT_USAGE;
  }
  if (options === 'help') {
    io.stdout.write(USAGE);
    return EXIT_OK;
  }

  const files = {
    caCert: join(options.out, CA_CERT_FILE),
    caKey: join(options.out, CA_KEY_FILE),
    cert: join(options.out, TLS_CERT_FILE),
    key: join(options.out, TLS_KEY_FILE),
  };
  const targets = [files.caCert, files.cert, files.key, ...(options.keepCaKey ? [files.caKey] : [])];
  if (!options.force) {
    const existing = [];
    for (const file of targets) if (await exists(file)) existing.push(file);
    if (existing.length > 0) {
      // A CA replaced by accident breaks a running webhook until its caBundle is patched: opt in to that.
      io.stderr.write(`certs: ${existing.join(', ')} already exist; pass --force to replace them, or choose another --out\n`);
      return EXIT_FAILURE;
    }
  }

  const dnsNames = [...serviceDnsNames(options.service, options.namespace), ...options.extraDnsNames];
  let bundle;
  try {
    bundle = await generateCertificates({
      dnsNames,
      ipAddresses: options.ipAddresses,
      validityDays: options.days,
      commonName: `${options.service}.${options.namespace}.svc`,
    });
  } catch (error) {
    if (error instanceof CertificateRequestError) {
      // Only --dns-name and --ip reach the generator unchecked; name them as the user wrote them.
      const flag = FLAG_OF_FIELD[error.field] ?? error.field;
      io.stderr.write(`certs: ${flag}: ${JSON.stringify(error.value)} is not valid; expected ${error.expected}\n`);
      return EXIT_USAGE;
    }
    throw error;
  }

  try {
    await writeFileAtomic(files.key, bundle.keyPem, 0o600);
    await writeFileAtomic(files.cert, bundle.certPem, 0o644);
    await writeFileAtomic(files.caCert, bundle.caCertPem, 0o644);
    if (options.keepCaKey) await writeFileAtomic(files.caKey, bundle.caKeyPem, 0o600);
  } catch (error) {
    io.stderr.write(`certs: could not write into ${options.out}: ${error instanceof Error ? error.message : String(error)}\n`);
    return EXIT_FAILURE;
  }

  const caBundle = Buffer.from(bundle.caCertPem).toString('base64');
  const patch = JSON.stringify([{ op: 'add', path: '/webhooks/0/clientConfig/caBundle', value: caBundle }]);
  io.stdout.write(
    [
      `Wrote ${targets.join(', ')}`,
      `  names: ${[...dnsNames, ...options.ipAddresses].join(', ')}`,
      `  valid until ${bundle.notAfter.toISOString()}`,
      '',
      `caBundle: ${caBundle}`,
      '',
      // In the order the objects exist: the Secret needs the namespace, the patch the webhook configuration.
      'Then, in this order:',
      '1. Deploy the webhook without cert-manager: the namespace and the webhook configuration (its pods wait for the Secret):',
      '  kubectl apply -k manifests/base',
      '2. Create the Secret the webhook Deployment mounts:',
      `  kubectl -n ${options.namespace} create secret tls ${TLS_SECRET_NAME} --cert=${shellQuote(files.cert)} --key=${shellQuote(files.key)} --dry-run=client -o yaml | kubectl apply -f -`,
      '3. Give the API server the CA (only without cert-manager, which injects it itself):',
      `  kubectl patch mutatingwebhookconfiguration ${WEBHOOK_CONFIGURATION_NAME} --type=json -p '${patch}'`,
      '',
    ].join('\n'),
  );
  return EXIT_OK;
}
