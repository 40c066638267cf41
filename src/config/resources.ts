/**
 * The sidecar's CPU and memory requests and limits: webhook-wide defaults (flags), per-pod overrides
 * (annotations shutdown-manager.io/sidecar-cpu-request, -cpu-limit, -memory-request, -memory-limit). A limit
 * may be empty, which removes it; a request never is (the scheduler must count the sidecar). A request
 * above its limit is refused here rather than by the API server, whose message would name neither the
 * annotation nor the flag that set it.
 */
import { ANNOTATIONS } from './annotation-names.js';
import { ConfigError, ConfigErrors } from './errors.js';
import { compareQuantities, type Quantity } from './quantity.js';
import type { Setting } from './settings.js';
import * as kinds from './values.js';

export const RESOURCE_SETTINGS = {
  'sidecar-cpu-request': {
    kind: kinds.cpuQuantity,
    default: kinds.cpuQuantity.parse('10m') as Quantity,
    help: "CPU request of the injected sidecar (a Kubernetes quantity); pods may override it with the annotation of the same name. About what it uses draining 1,000 connections.",
  } satisfies Setting<Quantity>,
  'sidecar-cpu-limit': {
    kind: kinds.optionalLimit(kinds.cpuQuantity),
    default: kinds.cpuQuantity.parse('200m') as Quantity | null,
    help: 'CPU limit of the injected sidecar; empty (--sidecar-cpu-limit=) for none. Pods may override it with the annotation of the same name.',
  } satisfies Setting<Quantity | null>,
  'sidecar-memory-request': {
    kind: kinds.memoryQuantity,
    default: kinds.memoryQuantity.parse('64Mi') as Quantity,
    // Figures the bench measures are not stated here (they drift): the help points to the table npm run bench writes.
    help: 'Memory request of the injected sidecar: its peak while Envoy holds 10,000 connections, measured by npm run bench (docs/performance.md), with a margin (the bench fails when the peak passes it); pods may override it with the annotation of the same name.',
  } satisfies Setting<Quantity>,
  'sidecar-memory-limit': {
    kind: kinds.optionalLimit(kinds.memoryQuantity),
    default: kinds.memoryQuantity.parse('128Mi') as Quantity | null,
    help: 'Memory limit of the injected sidecar, twice its peak under floods of requests, measured by npm run bench:budgets (docs/performance.md); empty (--sidecar-memory-limit=) for none. Pods may override it with the annotation of the same name.',
  } satisfies Setting<Quantity | null>,
};

export type ResourceSettingName = keyof typeof RESOURCE_SETTINGS;

export const RESOURCE_ANNOTATIONS: Readonly<Record<ResourceSettingName, string>> = {
  'sidecar-cpu-request': ANNOTATIONS.sidecarCpuRequest,
  'sidecar-cpu-limit': ANNOTATIONS.sidecarCpuLimit,
  'sidecar-memory-request': ANNOTATIONS.sidecarMemoryRequest,
  'sidecar-memory-limit': ANNOTATIONS.sidecarMemoryLimit,
};

export interface SidecarResources {
  readonly cpuRequest: Quantity;
  /** null: no limit. */
  readonly cpuLimit: Quantity | null;
  readonly memoryRequest: Quantity;
  readonly memoryLimit: Quantity | null;
}

/** The container's `resources`, as the pod spec writes them: limits that were removed are left out. */
export function resourceRequirements(resources: SidecarResources): {
  requests: Record<string, string>;
  limits?: Record<string, string>;
} {
  const limits: Record<string, string> = {};
  if (resources.cpuLimit !== null) limits['cpu'] = resources.cpuLimit.text;
  if (resources.memoryLimit !== null) limits['memory'] = resources.memoryLimit.text;
  return {
    requests: { cpu: resources.cpuRequest.text, memory: resources.memoryRequest.text },
    ...(Object.keys(limits).length > 0 ? { limits } : {}),
  };
}

type Values = { readonly [Name in ResourceSettingName]: (typeof RESOURCE_SETTINGS)[Name]['default'] };

function resourcesOf(values: Values): SidecarResources {
  return {
    cpuRequest: values['sidecar-cpu-request'],
    cpuLimit: values['sidecar-cpu-limit'],
    memoryRequest: values['sidecar-memory-request'],
    memoryLimit: values['sidecar-memory-limit'],
  };
}

function valuesOf(resources: SidecarResources): Values {
  return {
    'sidecar-cpu-request': resources.cpuRequest,
    'sidecar-cpu-limit': resources.cpuLimit,
    'sidecar-memory-request': resources.memoryRequest,
    'sidecar-memory-limit': resources.memoryLimit,
  };
}

/**
 * The webhook-wide defaults, checked: a request above its limit stops the webhook at start. `sourceOf`
 * names the flag (or environment variable) a value came from.
 */
export function makeSidecarResources(values: Values, sourceOf: (name: ResourceSettingName) => string): SidecarResources {
  const resources = resourcesOf(values);
  const errors = limitErrors(resources, (name) => ({ source: sourceOf(name), chosen: true }));
  if (errors.length > 0) throw new ConfigErrors(errors);
  return resources;
}

/**
 * The pod's resources: its annotations over the defaults. Throws ConfigErrors naming every bad annotation,
 * its value and the accepted form, and a request above its limit (naming the annotation that set it).
 */
export function resolveSidecarResources(
  annotations: Readonly<Record<string, string>> | undefined,
  defaults: SidecarResources,
): SidecarResources {
  const values: { -readonly [Name in ResourceSettingName]: Values[Name] } = { ...valuesOf(defaults) };
  const annotated = new Set<ResourceSettingName>();
  const errors: ConfigError[] = [];
  for (const name of Object.keys(RESOURCE_SETTINGS) as ResourceSettingName[]) {
    const key = RESOURCE_ANNOTATIONS[name];
    if (annotations === undefined || !Object.hasOwn(annotations, key)) continue;
    const raw = String(annotations[key]);
    const { kind } = RESOURCE_SETTINGS[name];
    const value = kind.parse(raw);
    if (value === undefined) {
      errors.push(new ConfigError(`annotation ${key}`, raw, requestFormOf(name, kind, raw), name));
      continue;
    }
    (values as Record<ResourceSettingName, Quantity | null>)[name] = value;
    annotated.add(name);
  }
  if (errors.length > 0) throw new ConfigErrors(errors);
  const resources = resourcesOf(values);
  const limitProblems = limitErrors(resources, (name) =>
    annotated.has(name) ? { source: `annotation ${RESOURCE_ANNOTATIONS[name]}`, chosen: true } : { source: `default ${name}`, chosen: false },
  );
  if (limitProblems.length > 0) throw new ConfigErrors(limitProblems);
  return resources;
}

/** A request may not be empty: say so, rather than "not a quantity". */
function requestFormOf(name: ResourceSettingName, kind: kinds.ValueKind<unknown>, raw: string): string {
  if (raw.trim() === '' && name.endsWith('-request')) return `${kind.form}; only limits may be empty`;
  return kinds.expectedForm(kind, raw);
}

/**
 * Each request above its limit, reported on the value the user chose: the request when both were chosen
 * (or neither), the limit when only it was.
 */
function limitErrors(
  resources: SidecarResources,
  origin: (name: ResourceSettingName) => { readonly source: string; readonly chosen: boolean },
): ConfigError[] {
  const errors: ConfigError[] = [];
  const pairs = [
    ['CPU', 'sidecar-cpu-request', resources.cpuRequest, 'sidecar-cpu-limit', resources.cpuLimit],
    ['memory', 'sidecar-memory-request', resources.memoryRequest, 'sidecar-memory-limit', resources.memoryLimit],
  ] as const;
  for (const [what, requestName, request, limitName, limit] of pairs) {
    if (limit === null || compareQuantities(request, limit) <= 0) continue;
    const requestOrigin = origin(requestName);
    const limitOrigin = origin(limitName);
    if (limitOrigin.chosen && !requestOrigin.chosen) {
      errors.push(
        new ConfigError(
          limitOrigin.source,
          limit.text,
          `a ${what} limit no lower than the request ${request.text} (${requestOrigin.source}), or empty for no limit`,
          limitName,
        ),
      );
    } else {
      errors.push(
        new ConfigError(requestOrigin.source, request.text, `a ${what} request no higher than the limit ${limit.text} (${limitOrigin.source})`, requestName),
      );
    }
  }
  return errors;
}
