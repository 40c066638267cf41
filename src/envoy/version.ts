/**
 * Envoy's release, read from `/server_info`, and the one admin call whose meaning depends on it: `drain_listeners`.
 * The drain needs it to drain-close every connection and keep accepting until the sidecar lets the pod go: what
 * `graceful&skip_exit` means from Envoy 1.29 on, on both sides of envoy PR #47042 (1.40). Before 1.29 `graceful` is
 * sent alone, with a warning. `skip_exit` alone is never sent: a 1.29 to 1.39 Envoy refuses it, and a version read
 * from /server_info may be a custom build's.
 *
 * Each spelling by release, from Envoy's source and admin docs: docs/distributions.md#envoys-release.
 */

/** A release number, as `/server_info` `version` carries it: `<sha>/1.36.2/Clean/RELEASE/BoringSSL`. */
export interface EnvoyVersion {
  readonly major: number;
  readonly minor: number;
  readonly patch: number;
  /** As written in the build string, suffix included (`1.40.0-dev`). */
  readonly text: string;
}

/** The first release with `drain_listeners?skip_exit` (envoy PR #30003, 2023-10). */
export const SKIP_EXIT_SINCE = { major: 1, minor: 29 } as const;

const RELEASE = /^(\d{1,4})\.(\d{1,4})\.(\d{1,4})(?:[-+][0-9A-Za-z.-]{1,64})?$/;

/**
 * The release in an Envoy build string (`version` of /server_info: revision, release, status, build type,
 * TLS library, separated by "/"; source/common/version/version.cc); null when none of its parts is one.
 */
export function parseEnvoyVersion(build: unknown): EnvoyVersion | null {
  if (typeof build !== 'string' || build.length > 512) return null;
  for (const part of build.split('/')) {
    const match = RELEASE.exec(part);
    if (match !== null) return { major: Number(match[1]), minor: Number(match[2]), patch: Number(match[3]), text: part };
  }
  return null;
}

/** Whether `version` knows `skip_exit`; an unknown version is taken to (see drainListenersPath). */
export function hasSkipExit(version: EnvoyVersion | null): boolean {
  if (version === null) return true;
  return version.major > SKIP_EXIT_SINCE.major || (version.major === SKIP_EXIT_SINCE.major && version.minor >= SKIP_EXIT_SINCE.minor);
}

/**
 * The `drain_listeners` call that means "drain-close gracefully, keep accepting" on `version` (see the
 * table above). An unknown version (no /server_info answer yet, a custom build string) gets
 * `graceful&skip_exit`, which no release refuses and which at worst means `graceful`.
 */
export function drainListenersPath(version: EnvoyVersion | null, inboundOnly: boolean): string {
  const parameters = ['graceful', ...(hasSkipExit(version) ? ['skip_exit'] : []), ...(inboundOnly ? ['inboundonly'] : [])];
  return `/drain_listeners?${parameters.join('&')}`;
}
