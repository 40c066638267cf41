/**
 * `npm run docs`: writes the reference docs the code defines (docs/reference/): the configuration, from the settings
 * tables (src/config/reference.ts), and the metrics, from the very registries the webhook and the sidecar serve.
 * test/docs/reference.test.ts fails when the committed files differ from what this writes.
 */
import { writeFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { configurationReference, GENERATED_NOTICE } from '../src/config/reference.js';
import { sidecarMetrics } from '../src/sidecar/metrics.js';
import { WebhookMetrics } from '../src/webhook/metrics.js';

interface DescribedMetric {
  readonly name: string;
  readonly help: string;
  readonly type: string;
  readonly labelNames: readonly string[];
}

/** The metrics of a registry as defined: nothing is collected (collect() reads a running drain). */
function described(registry: { getMetricsAsArray(): unknown[] }): DescribedMetric[] {
  return (registry.getMetricsAsArray() as DescribedMetric[]).map(({ name, help, type, labelNames }) => ({ name, help, type, labelNames: [...labelNames] }));
}

const unused = (): never => {
  throw new Error('the reference reads definitions only');
};

function metricTable(metrics: readonly DescribedMetric[]): string {
  const rows = metrics.map(({ name, help, type, labelNames }) => {
    const labels = labelNames.length === 0 ? '' : `{${labelNames.join(', ')}}`;
    return `| \`${name}${labels}\` | ${type} | ${help.replaceAll('|', '\\|')} |`;
  });
  return ['| metric | type | meaning |', '|---|---|---|', ...rows].join('\n');
}

/** docs/reference/metrics.md. */
export function metricsReference(): string {
  const sidecar = described(sidecarMetrics({ snapshot: unused, readiness: unused }, unused, unused));
  const webhook = described(new WebhookMetrics().registry).filter((metric) => metric.name.startsWith('shutdown_manager_'));
  return [
    GENERATED_NOTICE.replace('the settings tables (src/config/)', 'the metrics registries (src/sidecar/metrics.ts, src/webhook/metrics.ts)'),
    '',
    '# Metrics reference',
    '',
    'Both modes serve `GET /metrics` in the Prometheus text format.',
    '',
    '## Sidecar (`mode=sidecar`, the serve port)',
    '',
    metricTable(sidecar),
    '',
    "## Webhook (`mode=webhook`, the HTTPS port; Node's default process metrics too)",
    '',
    metricTable(webhook),
    '',
  ].join('\n');
}

export const REFERENCE_FILES: Readonly<Record<string, () => string>> = {
  'docs/reference/configuration.md': configurationReference,
  'docs/reference/metrics.md': metricsReference,
};

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) {
  const root = new URL('../', import.meta.url);
  for (const [path, write] of Object.entries(REFERENCE_FILES)) {
    await writeFile(new URL(path, root), write());
    process.stdout.write(`wrote ${path}\n`);
  }
}
