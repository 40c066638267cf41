/**
 * The status annotation (shutdown-manager.io/status): what injection did, and what it replaced, so that a
 * later injection can replace it (re-injection) and uninjection can undo it. Written by the injector, read
 * back from pods that anyone may have edited: reading checks every field it returns.
 */
import type { V1LifecycleHandler } from '@kubernetes/client-node';
import { isJsonObject, type JsonObject } from '../json.js';

/** What injection overwrote in the pod, recorded so that uninjection can put it back. */
export interface ReplacedFields {
  /** The Envoy container's preStop hook before injection; null when it had none. */
  readonly envoyPreStop: V1LifecycleHandler | null;
  /** Envoy's args before injection added its drain flags (null: it had none); absent when injection left them alone. */
  readonly envoyArgs?: readonly string[] | null;
  /** The pod's terminationGracePeriodSeconds before injection; null when it set none. */
  readonly terminationGracePeriodSeconds: number | null;
  /** The own preStop hooks of the wait containers that had one, by container name. */
  readonly waitPreStops?: Readonly<Record<string, V1LifecycleHandler>>;
}

/**
 * A preStop hook as the status records it: the fields of a Kubernetes LifecycleHandler, each of its type, and
 * nothing else. The API server decodes a pod into its types before admission, dropping unknown fields, so a
 * real pod loses nothing here; a review that was never decoded (a hand-made or hostile one) cannot make the
 * record, or the annotation's JSON, any deeper than a handler is (a hook nested 5,000 levels deep overflowed
 * JSON.stringify's stack).
 */
export function recordedHandler(hook: unknown): V1LifecycleHandler {
  if (!isJsonObject(hook)) return {};
  const { exec, httpGet, tcpSocket, sleep } = hook;
  return {
    ...(isJsonObject(exec) && isStringList(exec['command']) ? { exec: { command: [...(exec['command'] as string[])] } } : {}),
    ...(isJsonObject(httpGet) && isPort(httpGet['port']) ? { httpGet: recordedHttpGet(httpGet) } : {}),
    ...(isJsonObject(tcpSocket) && isPort(tcpSocket['port'])
      ? { tcpSocket: { port: tcpSocket['port'] as number | string, ...stringField(tcpSocket, 'host') } }
      : {}),
    ...(isJsonObject(sleep) && isNumber(sleep['seconds']) ? { sleep: { seconds: sleep['seconds'] as number } } : {}),
  };
}

function recordedHttpGet(httpGet: JsonObject): NonNullable<V1LifecycleHandler['httpGet']> {
  const headers = Array.isArray(httpGet['httpHeaders'])
    ? httpGet['httpHeaders'].filter((header): header is { name: string; value: string } => isJsonObject(header) && isString(header['name']) && isString(header['value']))
    : undefined;
  return {
    port: httpGet['port'] as number | string,
    ...stringField(httpGet, 'path'),
    ...stringField(httpGet, 'host'),
    ...stringField(httpGet, 'scheme'),
    ...(headers === undefined ? {} : { httpHeaders: headers.map(({ name, value }) => ({ name, value })) }),
  };
}

const stringField = (object: JsonObject, name: string): Record<string, string> => (isString(object[name]) ? { [name]: object[name] as string } : {});
const isPort = (value: unknown): boolean => isNumber(value) || isString(value);

/** What the status annotation records, so that a later look (or a later webhook call) knows what was done. */
export interface InjectionStatus {
  readonly version: string;
  readonly sidecar: string;
  readonly envoyContainer: string;
  readonly servePort: number;
  /** True when the sidecar was injected as a native sidecar (an init container). */
  readonly native: boolean;
  /** App containers given a preStop hook that waits for the drain; absent when none. */
  readonly waitContainers?: readonly string[];
  /** Envoy's admin API as the sidecar reaches it: a host, or unix:/path. */
  readonly adminAddress?: string;
  /** Absent for a Unix socket. */
  readonly adminPort?: number;
  /** Where the admin address came from: `annotation …`, `container port "admin"`, `inline --config-yaml`, `contour bootstrap`, `default`. */
  readonly adminFrom?: string;
  /** The pod's volume mounted into the sidecar to reach the admin socket. */
  readonly adminVolume?: string;
  /** The sidecar's user when it is not the image's own (Envoy's, to connect to its socket). */
  readonly sidecarUser?: number;
  /** What injection replaced; absent in statuses written before uninjection existed (0.1.0 and earlier builds). */
  readonly replaced?: ReplacedFields;
}

export type StatusReading =
  | { readonly ok: true; readonly status: InjectionStatus }
  | { readonly ok: false; readonly reason: string };

/** The annotation's value read back; `reason` says which field is wrong, for a warning or an error. */
export function readInjectionStatus(raw: string): StatusReading {
  let value: unknown;
  try {
    value = JSON.parse(raw);
  } catch {
    return { ok: false, reason: 'not JSON' };
  }
  if (!isJsonObject(value)) return { ok: false, reason: 'not a JSON object' };
  const wrong = wrongField(value);
  return wrong === undefined ? { ok: true, status: value as unknown as InjectionStatus } : { ok: false, reason: `field ${wrong} is not as written by injection` };
}

/** The first field (by its name) whose type is not the one injection writes; undefined when all are right. */
function wrongField(status: JsonObject): string | undefined {
  const checks: ReadonlyArray<readonly [string, (value: unknown) => boolean]> = [
    ['version', isString],
    ['sidecar', isString],
    ['envoyContainer', isString],
    ['servePort', isNumber],
    ['waitContainers', optional(isStringList)],
  ];
  for (const [name, check] of checks) if (!check(status[name])) return name;
  const replaced = status.replaced;
  if (replaced === undefined) return undefined;
  if (!isJsonObject(replaced)) return 'replaced';
  return wrongReplacedField(replaced);
}

function wrongReplacedField(replaced: JsonObject): string | undefined {
  const checks: ReadonlyArray<readonly [string, (value: unknown) => boolean]> = [
    ['envoyPreStop', nullable(isJsonObject)],
    ['envoyArgs', optional(nullable(isStringList))],
    ['terminationGracePeriodSeconds', nullable(isNumber)],
    ['waitPreStops', optional((value) => isJsonObject(value) && Object.values(value).every(isJsonObject))],
  ];
  for (const [name, check] of checks) if (!check(replaced[name])) return `replaced.${name}`;
  return undefined;
}

const isString = (value: unknown): boolean => typeof value === 'string';
const isNumber = (value: unknown): boolean => typeof value === 'number' && Number.isFinite(value);
const isStringList = (value: unknown): boolean => Array.isArray(value) && value.every(isString);
const optional = (check: (value: unknown) => boolean) => (value: unknown): boolean => value === undefined || check(value);
const nullable = (check: (value: unknown) => boolean) => (value: unknown): boolean => value === null || check(value);
