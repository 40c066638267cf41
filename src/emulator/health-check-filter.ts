/**
 * Envoy's HTTP health-check filter, envoy.filters.http.health_check, in non pass-through mode
 * (source/extensions/filters/http/health_check/health_check.cc HealthCheckFilter::decodeHeaders, onComplete and
 * encodeHeaders; docs/root/configuration/http/http_filters/health_check_filter.rst), first in the HTTP
 * listener's filter chain when the `healthCheckPath` option puts it there. Its stats are gated by release
 * (HEALTH_CHECK_FILTER_STATS_SINCE, an unverified assumption).
 */
import type { DataExchange, EmulatorCore } from './core.js';
import { counter, type StatValue } from './stats.js';
import { atLeast } from './versions.js';

/**
 * A release whose health-check filter reports `http.<prefix>.health_check.{request_total,ok,failed}`: the docs of
 * Envoy v1.33.3 (envoyproxy.io/docs/envoy/v1.33.3/configuration/http/http_filters/health_check_filter, "Statistics")
 * list them; the release that added them was not found, so releases before 1.33 are shown without them (as a
 * trimmed stat, stats_matcher, would be). The tests follow this constant.
 */
export const HEALTH_CHECK_FILTER_STATS_SINCE = { major: 1, minor: 33 } as const;

/** Http::Headers::EnvoyImmediateHealthCheckFail (source/common/http/headers.h). */
export const IMMEDIATE_HEALTH_CHECK_FAIL = 'x-envoy-immediate-health-check-fail';

export class HealthCheckFilter {
  /** `health_check.request_total`, `ok` and `failed`. */
  private readonly counts = { requests: 0, ok: 0, failed: 0 };

  constructor(private readonly core: EmulatorCore) {}

  /**
   * Answers `exchange` if it is a health check, and says whether it did. A request whose `:path` is exactly
   * `healthCheckPath` (a `headers` matcher on `:path` with an exact match, as Contour configures it: the query
   * string is part of `:path`, any method) is marked a health check (StreamInfo::healthCheck) and answered by
   * the filter with a local reply, never routed: 200 while live, 503 once `/healthcheck/fail` was taken
   * (again 200 after `/healthcheck/ok`), empty body, `x-envoy-upstream-healthchecked-cluster` set to the local
   * cluster (`--service-cluster`, "" when unset). It is still a request of the connection manager: counted in
   * `downstream_rq_total` when it starts; but chargeStats returns early for a health check, so it is in
   * neither `downstream_rq_completed` nor `downstream_rq_<N>xx` (see `chargeStats` in stats.ts). Its response
   * asks the drain decision like any other. Counted in `health_check.request_total` and `ok` or `failed`.
   */
  answer(exchange: DataExchange): boolean {
    const path = this.core.options.healthCheckPath;
    if (path === undefined || exchange.url !== path) return false;
    exchange.healthCheck = true;
    this.counts.requests += 1;
    const live = !this.core.healthCheckFailed;
    if (live) this.counts.ok += 1;
    else this.counts.failed += 1;
    exchange.head(live ? 200 : 503, {
      server: 'envoy',
      'content-length': '0',
      'x-envoy-upstream-healthchecked-cluster': this.core.commandLine.serviceCluster ?? '',
    });
    exchange.end();
    return true;
  }

  /**
   * Whether the filter marks responses now (encodeHeaders): it is configured and health checks are failed.
   * Then every response of the listener, health check or not, carries `x-envoy-immediate-health-check-fail:
   * true` (health_check_filter.rst's note).
   */
  marksResponses(): boolean {
    return this.core.options.healthCheckPath !== undefined && this.core.healthCheckFailed;
  }

  /**
   * The filter's counters in its connection manager's scope, `http.<prefix>.health_check.`: `request_total`
   * (every request it answered itself), `ok` (answered 200) and `failed` (answered 503), per
   * health_check_filter.rst as the brief for this emulator cites it. None without the filter, or on a release
   * before HEALTH_CHECK_FILTER_STATS_SINCE.
   */
  stats(httpPrefix: string): StatValue[] {
    const since = HEALTH_CHECK_FILTER_STATS_SINCE;
    if (this.core.options.healthCheckPath === undefined || !atLeast(this.core.version, since.major, since.minor)) return [];
    const scope = `${httpPrefix}.health_check`;
    return [counter(`${scope}.failed`, this.counts.failed), counter(`${scope}.ok`, this.counts.ok), counter(`${scope}.request_total`, this.counts.requests)];
  }
}
