/**
 * Envoy's release, read from `/server_info`, and the one admin call whose meaning depends on it:
 * `drain_listeners`.
 *
 * What the drain needs from that call: drain-close every connection gracefully (`Connection: close`, GOAWAY)
 * and keep accepting new connections until the sidecar lets the pod go (a load balancer may still send some).
 * What each spelling means, from ListenersHandler::handlerDrainListeners (source/server/admin/
 * listeners_handler.cc) and the admin docs (docs/root/operations/admin.rst) of each release:
 *
 * | call                 | before 1.29 (no skip_exit)       | 1.29 to 1.39 (envoy PR #30003)     | 1.40 and later (envoy PR #47042)        |
 * |----------------------|----------------------------------|------------------------------------|-----------------------------------------|
 * | (none)               | stop accepting now, no drain     | stop accepting now, no drain       | drain, stop accepting now               |
 * | `graceful`           | drain, stop at end of drain time | drain, stop at end of drain time   | drain, stop at end of drain time        |
 * | `skip_exit`          | stop accepting now (ignored)     | 400 "skip_exit requires graceful"  | drain, never stop accepting             |
 * | `graceful&skip_exit` | as `graceful` (ignored)          | drain, never stop accepting        | drain, never stop accepting             |
 *
 * PR #47042 (merged 2026-08-27, behind the runtime guard `non_graceful_drain_notifies_connections`) changed
 * only the branch without `graceful`: `graceful&skip_exit` means the same on both sides of it, and is what the
 * drain needs from 1.29 on. Before 1.29 nothing keeps the listeners open past Envoy's drain time: `graceful`
 * is sent alone (what it means there anyway) and the sidecar warns; the injector fits --drain-time-s into the
 * deadline (src/inject/envoy-drain-flags.ts). `skip_exit` alone, which the 1.40 docs list for "never stop
 * accepting", is never sent: a 1.29 to 1.39 Envoy refuses it, and a version read from /server_info may be
 * a custom build's.
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
