/**
 * AdmissionReview in, AdmissionReview out: decoding, the decision, encoding. Pure, no HTTP; the Fastify
 * layer calls it with the schemas compiled by ajv (review-schema.ts). Only CREATE of a Pod is ever mutated, whatever
 * the webhook configuration selects.
 */
import type { V1Pod } from '@kubernetes/client-node';
import { injectPod, type InjectionOutcome } from '../inject/injector.js';
import { podPatch } from '../inject/patch.js';
import { newShutdownToken } from '../inject/sidecar.js';
import type { InjectionConfig } from '../config/webhook.js';
import { isJsonObject } from '../json.js';
import { ADMISSION_REVIEW_SCHEMA, ADMISSION_VERSIONS, describeViolation, POD_SCHEMA, type ReviewSchemaChecks } from './review-schema.js';

export { ADMISSION_VERSIONS };
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

/** What happened to one review, for logs and metrics. */
export type AdmissionDecision =
  | { readonly action: 'ignore'; readonly reason: string }
  | InjectionOutcome;

export type AdmissionAnswer =
  /** A well-formed review, decided on. */
  | { readonly kind: 'reviewed'; readonly review: AdmissionReview; readonly response: AdmissionResponse; readonly decision: AdmissionDecision }
  /**
   * A malformed review whose uid could still be read: answered in kind, not allowed, status 400 naming the
   * field. The API server shows that message to whoever created the object, whatever the failurePolicy.
   */
  | {
      readonly kind: 'rejected';
      readonly apiVersion: AdmissionVersion;
      readonly response: AdmissionResponse;
      readonly reason: string;
    }
  /** Not an AdmissionReview this webhook can answer in kind (no readable apiVersion or uid): an HTTP 400. */
  | { readonly kind: 'unanswerable'; readonly reason: string };

/**
 * Body in, answer out. `body` is whatever JSON arrived; every field that the decision or the injector reads is
 * checked by schema first, so nothing below meets a value of a type it does not expect.
 */
export function answerAdmission(body: unknown, config: InjectionConfig, schemas: ReviewSchemaChecks): AdmissionAnswer {
  const violation = schemas.review(body);
  if (violation !== undefined) {
    const reason = describeViolation(ADMISSION_REVIEW_SCHEMA, '', body, violation);
    const identity = readableIdentity(body);
    return identity === undefined ? { kind: 'unanswerable', reason } : reject(identity, reason);
  }
  // The schema has checked every field this type declares.
  const review = body as AdmissionReview;
  const { request } = review;
  const allow: AdmissionResponse = { uid: request.uid, allowed: true };

  if (request.kind.kind !== 'Pod' || (request.kind.group ?? '') !== '') {
    return reviewed(review, allow, { action: 'ignore', reason: `kind ${request.kind.kind}` });
  }
  if (request.operation !== 'CREATE' || request.subResource) {
    return reviewed(review, allow, { action: 'ignore', reason: `operation ${request.operation}` });
  }

  const podViolation = schemas.pod(request.object);
  if (podViolation !== undefined) {
    return reject(review, describeViolation(POD_SCHEMA, 'request.object', request.object, podViolation));
  }
  // Checked by POD_SCHEMA for every field the injector reads.
  const pod = request.object as V1Pod;
  const decision = injectPod(pod, config, newShutdownToken());
  return reviewed(review, respond(request.uid, pod, decision), decision);
}

function reviewed(review: AdmissionReview, response: AdmissionResponse, decision: AdmissionDecision): AdmissionAnswer {
  return { kind: 'reviewed', review, response, decision };
}

interface ReviewIdentity {
  readonly apiVersion: AdmissionVersion;
  readonly request: { readonly uid: string };
}

function reject(identity: ReviewIdentity, reason: string): AdmissionAnswer {
  return {
    kind: 'rejected',
    apiVersion: identity.apiVersion,
    reason,
    response: {
      uid: identity.request.uid,
      allowed: false,
      status: { code: 400, reason: 'BadRequest', message: `envoy-shutdown-manager: ${reason}` },
    },
  };
}

/** The API server matches an answer to its call by apiVersion and uid; without both there is nothing to answer in kind. */
function readableIdentity(body: unknown): ReviewIdentity | undefined {
  if (!isJsonObject(body) || body.kind !== 'AdmissionReview' || !isJsonObject(body.request)) return undefined;
  const apiVersion = ADMISSION_VERSIONS.find((version) => version === body.apiVersion);
  const uid = body.request.uid;
  return apiVersion !== undefined && typeof uid === 'string' && uid !== '' ? { apiVersion, request: { uid } } : undefined;
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

/**
 * `JSON.stringify(encodeAdmissionReview(apiVersion, response))`, byte for byte, without having JSON.stringify
 * scan the patch: kilobytes of base64, which has nothing to escape, checked character by character took
 * longer than writing the rest of the review. The review is written with an empty patch and the patch
 * put between its quotes: `"patch":""` occurs once, as the key, since every quote inside a string is escaped.
 */
export function admissionReviewJson(apiVersion: AdmissionVersion, response: AdmissionResponse): string {
  const { patch } = response;
  if (patch === undefined) return JSON.stringify(encodeAdmissionReview(apiVersion, response));
  const json = JSON.stringify(encodeAdmissionReview(apiVersion, { ...response, patch: '' }));
  const at = json.indexOf('"patch":""') + '"patch":"'.length;
  return json.slice(0, at) + patch + json.slice(at);
}
