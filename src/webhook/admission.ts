/**
 * AdmissionReview in, AdmissionReview out: decoding, the decision, encoding. Pure, no HTTP; the Fastify
 * layer calls it. Only CREATE of a Pod is ever mutated, whatever the webhook configuration selects.
 */
import type { V1Pod } from '@kubernetes/client-node';
import { injectPod, type InjectionOutcome } from '../inject/injector.js';
import { podPatch } from '../inject/patch.js';
import { newShutdownToken } from '../inject/sidecar.js';
import type { InjectionConfig } from '../config/webhook.js';
import { isJsonObject, type JsonObject } from '../json.js';

export const ADMISSION_VERSIONS = ['admission.k8s.io/v1', 'admission.k8s.io/v1beta1'] as const;
export type AdmissionVersion = (typeof ADMISSION_VERSIONS)[number];

export interface AdmissionRequest {
  readonly uid: string;
  readonly kind: { readonly group?: string; readonly version?: string; readonly kind: string };
  readonly operation: string;
  readonly subResource?: string;
  readonly namespace?: string;
  readonly name?: string;
  readonly object?: unknown;
}

export interface AdmissionReview {
  readonly apiVersion: AdmissionVersion;
  readonly kind: 'AdmissionReview';
  readonly request: AdmissionRequest;
}

export interface AdmissionResponse {
  uid: string;
  allowed: boolean;
  patchType?: 'JSONPatch';
  patch?: string;
  warnings?: string[];
  status?: { code: number; reason: string; message: string };
}

/** The request body is not an AdmissionReview this webhook can answer; the message says which field is wrong. */
export class InvalidAdmissionReviewError extends Error {
  override readonly name = 'InvalidAdmissionReviewError';
}

/** What happened to one review, for logs and metrics. */
export type AdmissionDecision =
  | { readonly action: 'ignore'; readonly reason: string }
  | InjectionOutcome;

function fail(field: string, expected: string): never {
  throw new InvalidAdmissionReviewError(`AdmissionReview ${field} must be ${expected}`);
}

export function decodeAdmissionReview(body: unknown): AdmissionReview {
  if (!isJsonObject(body)) fail('body', 'a JSON object');
  if (!ADMISSION_VERSIONS.includes(body.apiVersion as AdmissionVersion)) {
    fail('apiVersion', `one of ${ADMISSION_VERSIONS.join(', ')} (got ${JSON.stringify(body.apiVersion)})`);
  }
  if (body.kind !== 'AdmissionReview') fail('kind', `"AdmissionReview" (got ${JSON.stringify(body.kind)})`);
  const request = body.request;
  if (!isJsonObject(request)) fail('request', 'an object');
  if (typeof request.uid !== 'string' || request.uid === '') fail('request.uid', 'a non-empty string');
  if (typeof request.operation !== 'string') fail('request.operation', 'a string such as "CREATE"');
  if (!isJsonObject(request.kind) || typeof request.kind.kind !== 'string') {
    fail('request.kind', 'an object with a string "kind", such as {"group":"","version":"v1","kind":"Pod"}');
  }
  return body as unknown as AdmissionReview;
}

/** A pod as far as the injector relies on its shape; anything else is a malformed request, not a pod to admit. */
function decodePod(object: unknown): V1Pod {
  if (!isJsonObject(object)) fail('request.object', 'the Pod being created');
  if (object.metadata !== undefined && !isJsonObject(object.metadata)) fail('request.object.metadata', 'an object');
  const metadata = (object.metadata ?? {}) as JsonObject;
  for (const map of ['labels', 'annotations'] as const) {
    const value = metadata[map];
    if (value !== undefined && (!isJsonObject(value) || Object.values(value).some((v) => typeof v !== 'string'))) {
      fail(`request.object.metadata.${map}`, 'a map of strings');
    }
  }
  if (!isJsonObject(object.spec)) fail('request.object.spec', 'an object');
  for (const list of ['containers', 'initContainers'] as const) {
    const containers = object.spec[list];
    if (containers === undefined) continue;
    if (!Array.isArray(containers) || containers.some((c) => !isJsonObject(c) || typeof c.name !== 'string')) {
      fail(`request.object.spec.${list}`, 'a list of containers, each with a string name');
    }
  }
  return object as V1Pod;
}

export function reviewAdmission(
  review: AdmissionReview,
  config: InjectionConfig,
): { response: AdmissionResponse; decision: AdmissionDecision } {
  const { request } = review;
  const allow: AdmissionResponse = { uid: request.uid, allowed: true };

  if (request.kind.kind !== 'Pod' || (request.kind.group ?? '') !== '') {
    return { response: allow, decision: { action: 'ignore', reason: `kind ${request.kind.kind}` } };
  }
  if (request.operation !== 'CREATE' || request.subResource) {
    return { response: allow, decision: { action: 'ignore', reason: `operation ${request.operation}` } };
  }

  const pod = decodePod(request.object);
  const decision = injectPod(pod, config, newShutdownToken());
  return { response: respond(request.uid, pod, decision), decision };
}

function respond(uid: string, original: V1Pod, decision: InjectionOutcome): AdmissionResponse {
  switch (decision.action) {
    case 'deny':
      return {
        uid,
        allowed: false,
        status: { code: 400, reason: 'BadRequest', message: `envoy-shutdown-manager: ${decision.message}` },
      };
    case 'skip':
      return withWarnings({ uid, allowed: true }, decision.warnings);
    case 'inject': {
      const operations = podPatch(original, decision.pod);
      const response: AdmissionResponse = { uid, allowed: true };
      if (operations.length > 0) {
        response.patchType = 'JSONPatch';
        response.patch = Buffer.from(JSON.stringify(operations)).toString('base64');
      }
      return withWarnings(response, decision.warnings);
    }
  }
}

/** kubectl prints warnings verbatim; long ones wrap badly, so they are kept short. */
export const WARNING_MAX_LENGTH = 120;

function withWarnings(response: AdmissionResponse, warnings: readonly string[]): AdmissionResponse {
  if (warnings.length === 0) return response;
  const prefix = 'shutdown-manager: ';
  return {
    ...response,
    warnings: warnings.map((text) => {
      const full = prefix + text;
      return full.length <= WARNING_MAX_LENGTH ? full : `${full.slice(0, WARNING_MAX_LENGTH - 1)}…`;
    }),
  };
}

export function encodeAdmissionReview(apiVersion: AdmissionVersion, response: AdmissionResponse): object {
  return { apiVersion, kind: 'AdmissionReview', response };
}
