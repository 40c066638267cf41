/**
 * One finding of `envoy-shutdown-manager check`, what every check makes (webhook.ts, pods.ts, drains.ts,
 * certificate.ts, pre.ts) and report.ts gathers. Its own module so that the checks need not import the report,
 * which holds drains.ts's part (test/architecture.test.ts: no import circles).
 */
/** `info` is neither good nor bad: something the reader should know (an opted-out pod, a failurePolicy). */
export type CheckStatus = 'ok' | 'info' | 'warning' | 'failure';

/** `pre`: check --pre, before install; the others: the installed webhook and the pods it protects. */
export type SectionName = 'pre' | 'webhook' | 'pods' | 'drains';

export interface Finding {
  /** Stable, for scripts: `webhook.endpoints`, `pods.missing-sidecar`... */
  readonly check: string;
  readonly section: SectionName;
  readonly status: CheckStatus;
  /** One line saying what was found. */
  readonly message: string;
  /** The command or setting that fixes it; absent when there is nothing to fix. */
  readonly fix?: string;
  /** The pods concerned (namespace/name), for findings about pods. */
  readonly pods?: readonly string[];
}
