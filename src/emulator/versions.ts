/**
 * Envoy releases, for the behaviours the emulator changes by release (its `version` option): how a version
 * is written (source/common/version/version.cc VersionInfo::version(), "<revision>/<X.Y.Z>/Clean/RELEASE/
 * BoringSSL"; a build of main says "X.Y.Z-dev", after its VERSION.txt) and the default release played.
 */

/** The release played when `version` is not given. */
export const DEFAULT_VERSION = '1.36.2';

/**
 * Envoy's main branch as the emulator plays it: its VERSION.txt could not be read here (no copy of the
 * repository at hand), so this is the release after 1.40 with main's "-dev" suffix, an assumption.
 */
export const ENVOY_MAIN_VERSION = '1.41.0-dev';

/** An Envoy release, for the behaviours that changed between releases. */
export interface EnvoyVersion {
  readonly major: number;
  readonly minor: number;
  readonly patch: number;
}

/**
 * Reads "X.Y.Z", or "X.Y.Z-dev" as a build of Envoy's main branch names itself (VERSION.txt; /server_info
 * shows it so), taken as X.Y.Z; undefined if it is neither.
 */
export function parseEnvoyVersion(text: string): EnvoyVersion | undefined {
  const match = /^(\d{1,4})\.(\d{1,4})\.(\d{1,4})(?:-dev)?$/.exec(text);
  if (match === null) return undefined;
  return { major: Number(match[1]), minor: Number(match[2]), patch: Number(match[3]) };
}

/** Whether `version` is `major.minor` or later. */
export function atLeast(version: EnvoyVersion, major: number, minor: number): boolean {
  return version.major > major || (version.major === major && version.minor >= minor);
}
