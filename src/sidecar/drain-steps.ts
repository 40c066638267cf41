/**
 * The drain's admin calls by stable id, and the one table of their labels. Code compares ids, never labels, and
 * never an array index; a label is only log text (the `step` and `action` fields, the messages) and the names
 * in DrainOutcome.unconfirmedSteps, so it can be reworded here without breaking anything that decides.
 */

/** The initiation calls, in the order the drain sends them. */
export const INITIATION_STEPS = ['fail-health-checks', 'drain-listeners'] as const;

/** An initiation call: POST /healthcheck/fail, then POST /drain_listeners. */
export type DrainStepId = (typeof INITIATION_STEPS)[number];

/** Every admin call the drain makes: the initiation steps and the stats read that counts connections. */
export type DrainActionId = DrainStepId | 'count-connections';

const LABELS = {
  'fail-health-checks': 'fail health checks',
  'drain-listeners': 'drain listeners',
  'count-connections': 'count open connections',
} as const satisfies Readonly<Record<DrainActionId, string>>;

/** A step's label, as logged (the drain_step line's `step`) and as named in an outcome. */
export type DrainStepName = (typeof LABELS)[DrainStepId];

/** The label of an admin call: what the logs and the outcome call it. */
export function labelOf<Id extends DrainActionId>(id: Id): (typeof LABELS)[Id] {
  return LABELS[id];
}
