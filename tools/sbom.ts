/**
 * The npm packages bundled into the image, from package-lock.json: a CycloneDX SBOM (sbom.cdx.json) and their
 * licence texts (THIRD_PARTY_NOTICES), with this project's LICENSE beside them.
 *
 *   node --import tsx tools/sbom.ts --out dist/licenses     (npm run build does it; the image ships it at /licenses)
 *
 * Why from the lock file: the image has no node_modules (every mode is an esbuild bundle), so a scanner of the
 * image sees no npm package at all. The packages are the production tree of the lock file, walked from
 * package.json's dependencies as Node resolves them (a package's own node_modules first, then its parents'):
 * the only packages esbuild can bundle, since the sources import no devDependency (test/release/sbom.test.ts
 * holds the SBOM to what esbuild's metafile says it bundled). That test found one exception, now closed: debug (of
 * @kubernetes/client-node) tries `require('supports-color')`, which esbuild bundled from the build stage's
 * devDependencies (autocannon's chalk); bundle:app marks it external, and debug does without it. Hand-written rather than a CycloneDX library: it
 * is a walk of one JSON file, and a generator with a dependency tree of its own would add to what it lists.
 */
import { createHash } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join, posix } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

export const REPO_ROOT = fileURLToPath(new URL('..', import.meta.url));

interface LockEntry {
  readonly name?: string;
  readonly version?: string;
  readonly integrity?: string;
  readonly license?: string;
  readonly dev?: boolean;
  readonly optional?: boolean;
  readonly link?: boolean;
  readonly dependencies?: Readonly<Record<string, string>>;
  readonly optionalDependencies?: Readonly<Record<string, string>>;
  readonly peerDependencies?: Readonly<Record<string, string>>;
  readonly peerDependenciesMeta?: Readonly<Record<string, { optional?: boolean }>>;
}

export interface Lock {
  readonly name: string;
  readonly version: string;
  readonly lockfileVersion: number;
  readonly packages: Readonly<Record<string, LockEntry>>;
}

/** One bundled package: where the lock file puts it, and what it says of it. */
export interface BundledPackage {
  /** The lock file's key: node_modules/a/node_modules/@s/b. */
  readonly path: string;
  readonly name: string;
  readonly version: string;
  readonly license: string;
  readonly integrity: string | undefined;
  /** Paths of the packages it requires, as resolved. */
  readonly requires: readonly string[];
}

export function readLock(dir = REPO_ROOT): Lock {
  const file = join(dir, 'package-lock.json');
  const lock = JSON.parse(readFileSync(file, 'utf8')) as Lock;
  if (lock.lockfileVersion < 2 || lock.packages === undefined) {
    throw new Error(`${file}: lockfileVersion ${String(lock.lockfileVersion)} has no "packages" map (npm 7 or later writes one)`);
  }
  return lock;
}

/** The name of the package at a lock path: the part after its last node_modules/. */
function nameAt(path: string): string {
  return path.slice(path.lastIndexOf('node_modules/') + 'node_modules/'.length);
}

/** Node's resolution in the lock's layout: `name` from the package at `from`, nearest node_modules first. */
function resolve(lock: Lock, from: string, name: string): string | undefined {
  for (let base = from; ; ) {
    const candidate = base === '' ? `node_modules/${name}` : `${base}/node_modules/${name}`;
    if (lock.packages[candidate] !== undefined) return candidate;
    if (base === '') return undefined;
    const cut = base.lastIndexOf('/node_modules/');
    base = cut === -1 ? '' : base.slice(0, cut);
  }
}

/** What a package requires at run time: dependencies, optional ones installed, peers not marked optional. */
function requiredNames(entry: LockEntry): { name: string; mustExist: boolean }[] {
  const peers = Object.keys(entry.peerDependencies ?? {}).map((name) => ({ name, mustExist: entry.peerDependenciesMeta?.[name]?.optional !== true }));
  return [
    ...Object.keys(entry.dependencies ?? {}).map((name) => ({ name, mustExist: true })),
    ...Object.keys(entry.optionalDependencies ?? {}).map((name) => ({ name, mustExist: false })),
    ...peers,
  ];
}

/** The production tree: every package reachable from the root's dependencies, sorted by lock path. */
export function productionPackages(lock: Lock): BundledPackage[] {
  const root = lock.packages[''];
  if (root === undefined) throw new Error('package-lock.json: no root package ("" in "packages")');
  const found = new Map<string, BundledPackage>();
  const pending: { from: string; names: { name: string; mustExist: boolean }[] }[] = [
    { from: '', names: [...Object.keys(root.dependencies ?? {}), ...Object.keys(root.optionalDependencies ?? {})].map((name) => ({ name, mustExist: true })) },
  ];
  for (let next = pending.pop(); next !== undefined; next = pending.pop()) {
    for (const { name, mustExist } of next.names) {
      const path = resolve(lock, next.from, name);
      if (path === undefined) {
        if (mustExist) throw new Error(`package-lock.json: ${next.from || 'the root package'} requires ${name}, which the lock file does not hold`);
        continue;
      }
      if (found.has(path)) continue;
      const entry = lock.packages[path] as LockEntry;
      // A package marked dev reached from production dependencies: the lock file contradicts itself.
      if (entry.dev === true) throw new Error(`package-lock.json: ${path} is marked dev but ${next.from || 'the root package'} needs it at run time`);
      if (entry.link === true) throw new Error(`package-lock.json: ${path} is a link (a workspace?); only registry packages are supported`);
      found.set(path, describe(lock, path, entry));
      pending.push({ from: path, names: requiredNames(entry) });
    }
  }
  return [...found.values()].sort((a, b) => a.path.localeCompare(b.path));
}

function describe(lock: Lock, path: string, entry: LockEntry): BundledPackage {
  if (entry.version === undefined) throw new Error(`package-lock.json: ${path} has no version`);
  const requires = requiredNames(entry)
    .map(({ name }) => resolve(lock, path, name))
    .filter((resolved): resolved is string => resolved !== undefined);
  return {
    path,
    name: entry.name ?? nameAt(path),
    version: entry.version,
    license: entry.license ?? 'NOASSERTION',
    integrity: entry.integrity,
    requires: [...new Set(requires)].sort(),
  };
}

/** The package URL (purl) of an npm package: the scope's @ encoded, as the purl spec requires. */
export function purl(name: string, version: string): string {
  return `pkg:npm/${name.replace(/^@/, '%40')}@${version}`;
}

/** A licence as CycloneDX wants it: an SPDX identifier alone, or an SPDX expression (MIT OR Apache-2.0). */
function cdxLicense(license: string): Record<string, unknown> {
  if (license === 'NOASSERTION') return { license: { name: 'NOASSERTION' } };
  return /^[A-Za-z0-9.+-]+$/.test(license) ? { license: { id: license } } : { expression: license.replace(/^\((.*)\)$/, '$1') };
}

/** The lock file's integrity (sha512-<base64>) as a CycloneDX hash (hex). */
function cdxHashes(integrity: string | undefined): Record<string, string>[] {
  const match = /^sha512-([A-Za-z0-9+/=]+)$/.exec(integrity ?? '');
  return match ? [{ alg: 'SHA-512', content: Buffer.from(match[1] as string, 'base64').toString('hex') }] : [];
}

/**
 * The CycloneDX 1.5 SBOM. No timestamp and a serial number derived from the content: the same lock file gives
 * the same bytes, so that a rebuild can be compared with the published one.
 */
export function cycloneDx(lock: Lock, packages: readonly BundledPackage[]): Record<string, unknown> {
  const refOf = new Map(packages.map((pkg) => [pkg.path, purl(pkg.name, pkg.version)]));
  const rootRef = purl(lock.name, lock.version);
  // The same name and version installed at two paths is one component: CycloneDX wants each bom-ref once.
  const unique = packages.filter((pkg, index) => packages.findIndex((other) => refOf.get(other.path) === refOf.get(pkg.path)) === index);
  const components = unique.map((pkg) => {
    const scope = /^(@[^/]+)\/(.+)$/.exec(pkg.name);
    return {
      type: 'library',
      'bom-ref': refOf.get(pkg.path),
      ...(scope ? { group: scope[1], name: scope[2] } : { name: pkg.name }),
      version: pkg.version,
      purl: purl(pkg.name, pkg.version),
      licenses: [cdxLicense(pkg.license)],
      hashes: cdxHashes(pkg.integrity),
    };
  });
  const rootRequires = Object.keys(lock.packages['']?.dependencies ?? {}).map((name) => refOf.get(resolve(lock, '', name) ?? ''));
  const dependencies = [
    { ref: rootRef, dependsOn: rootRequires.filter((ref): ref is string => ref !== undefined).sort() },
    ...unique.map((pkg) => {
      const paths = packages.filter((other) => refOf.get(other.path) === refOf.get(pkg.path)).flatMap((other) => other.requires);
      return { ref: refOf.get(pkg.path), dependsOn: [...new Set(paths.map((path) => refOf.get(path) as string))].sort() };
    }),
  ];
  const body = {
    bomFormat: 'CycloneDX',
    specVersion: '1.5',
    version: 1,
    metadata: {
      tools: { components: [{ type: 'application', name: 'envoy-shutdown-manager tools/sbom.ts', version: lock.version }] },
      component: { type: 'application', 'bom-ref': rootRef, name: lock.name, version: lock.version, purl: rootRef, licenses: [{ license: { id: 'Apache-2.0' } }] },
    },
    components,
    dependencies,
  };
  return { ...body, serialNumber: serialNumber(JSON.stringify(body)) };
}

/** A UUID (version 5 layout) from the SBOM's content. */
function serialNumber(content: string): string {
  const hex = createHash('sha256').update(content).digest('hex');
  const variant = ((parseInt(hex.slice(16, 17), 16) & 0x3) | 0x8).toString(16);
  return `urn:uuid:${hex.slice(0, 8)}-${hex.slice(8, 12)}-5${hex.slice(13, 16)}-${variant}${hex.slice(17, 20)}-${hex.slice(20, 32)}`;
}

const LICENCE_FILE = /^(LICEN[CS]E|COPYING|NOTICE)([.-].*)?$/i;

/** The licence files a package ships (LICENSE, LICENCE.md, COPYING, NOTICE...), sorted. */
function licenceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true })
    .filter((entry) => entry.isFile() && LICENCE_FILE.test(entry.name))
    .map((entry) => entry.name)
    .sort();
}

export interface Notices {
  readonly text: string;
  /** Packages that ship no licence file: their entry says so, with the licence their package.json declares. */
  readonly withoutLicenceFile: readonly string[];
}

/** THIRD_PARTY_NOTICES: each package's name, version and declared licence, then the texts of its licence files. */
export function thirdPartyNotices(packages: readonly BundledPackage[], root = REPO_ROOT): Notices {
  const rule = '='.repeat(80);
  const withoutLicenceFile: string[] = [];
  const sections = packages.map((pkg) => {
    const dir = join(root, ...pkg.path.split(posix.sep));
    if (!existsSync(dir)) throw new Error(`${pkg.path} is not installed: run npm ci before generating the notices`);
    const files = licenceFiles(dir);
    if (files.length === 0) withoutLicenceFile.push(`${pkg.name}@${pkg.version}`);
    const texts = files.map((file) => `--- ${file}\n\n${readFileSync(join(dir, file), 'utf8').trimEnd()}\n`);
    const body = texts.length > 0 ? texts.join('\n') : `The package ships no licence file; its package.json declares ${pkg.license}.\n`;
    return `${rule}\n${pkg.name} ${pkg.version} (${pkg.license})\n${rule}\n\n${body}`;
  });
  const header =
    'Third-party software bundled into the envoy-shutdown-manager image: the npm packages of its production\n' +
    'dependency tree (package-lock.json), each with the licence files it ships. The SBOM beside this file\n' +
    '(sbom.cdx.json) lists the same packages; LICENSE is the licence of envoy-shutdown-manager itself.\n\n';
  return { text: header + sections.join('\n'), withoutLicenceFile };
}

/** Writes sbom.cdx.json, THIRD_PARTY_NOTICES and LICENSE into `out`. */
export function writeLicences(out: string, root = REPO_ROOT): { packages: number; withoutLicenceFile: readonly string[] } {
  const lock = readLock(root);
  const packages = productionPackages(lock);
  const notices = thirdPartyNotices(packages, root);
  mkdirSync(out, { recursive: true });
  writeFileSync(join(out, 'sbom.cdx.json'), `${JSON.stringify(cycloneDx(lock, packages), null, 2)}\n`);
  writeFileSync(join(out, 'THIRD_PARTY_NOTICES'), notices.text);
  copyFileSync(join(root, 'LICENSE'), join(out, 'LICENSE'));
  return { packages: packages.length, withoutLicenceFile: notices.withoutLicenceFile };
}

function main(): void {
  const { values } = parseArgs({ options: { out: { type: 'string' } }, strict: true });
  if (values.out === undefined) throw new Error('usage: node --import tsx tools/sbom.ts --out DIR');
  // Quiet on success: it runs on every npm run build. THIRD_PARTY_NOTICES says which packages ship no licence file.
  writeLicences(values.out);
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) {
  try {
    main();
  } catch (error) {
    process.stderr.write(`tools/sbom.ts: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exitCode = 1;
  }
}
