/**
 * The bucket bounds (seconds) of the sidecar's histogram of settled load-balancer lags
 * (shutdown_manager_drain_load_balancer_lag_seconds): from in-cluster balancers (a second or two) to IP-target cloud
 * ones (minutes). `check` reads the same bounds to recommend a check-delay (src/check/drains.ts).
 */
export const LAG_BUCKETS_SECONDS: readonly number[] = [0, 1, 2, 5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 600];
