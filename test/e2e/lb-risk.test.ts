/**
 * The sparse-traffic Monte Carlo (test/e2e/lb-risk.ts): properties of one simulated drain through the real
 * LoadBalancerWatch that could fail if the model, the watch or the estimate were wrong.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import {
  DEFAULT_RUNS,
  DEFAULT_SEED,
  DEFAULT_SETTINGS,
  fixedRule,
  LAGS_MS,
  MEAN_GAPS_MS,
  mixSeed,
  riskBoundOf,
  RISK_BOUNDS,
  mulberry32,
  observedRule,
  poissonArrivals,
  RULES,
  runCell,
  simulateDrain,
  simulateRun,
  wilson,
  type RiskRule,
} from './lb-risk.js';

const LATENCY = DEFAULT_SETTINGS.readLatencyMs;

function losing(meanGapMs: number, lagMs: number, rule: RiskRule, runs: number, seed: number): number {
  const random = mulberry32(seed);
  let count = 0;
  for (let run = 0; run < runs; run += 1) if (simulateRun(meanGapMs, lagMs, rule, random).lost > 0) count += 1;
  return count;
}

describe('lb-risk: one simulated drain', () => {
  test('the fixed rule with check-delay above the lag never loses, and ends one read latency after F + check-delay', () => {
    for (const meanGapMs of [1_000, 30_000]) {
      const random = mulberry32(11);
      for (let run = 0; run < 300; run += 1) {
        const result = simulateRun(meanGapMs, 3_000, fixedRule(5_000), random);
        assert.equal(result.lost, 0, `fixed 5 s, lag 3 s, 1 per ${meanGapMs} ms, run ${run}: lost ${result.lost}`);
        assert.equal(result.endedAtMs, 5_000 + LATENCY, `fixed 5 s ends at the read sent at F + 5 s (run ${run})`);
      }
    }
  });

  test('the fixed rule with check-delay 0 and busy traffic almost always loses when the lag is well above the read interval', () => {
    const lost = losing(1_000, 30_000, fixedRule(0), 300, 12);
    assert.ok(lost >= 297, `fixed 0 s, lag 30 s, 1 per s: ${lost} of 300 runs lost (expected all but about e^-30 of them)`);
  });

  test('a run with no new client after the failure loses nothing, under every rule, and the observed rule holds it only its quiet period', () => {
    const before = [-50_000, -20_000, -1_000];
    for (const rule of [...RULES, fixedRule(0), observedRule(0, 10_000)]) {
      const result = simulateDrain(before, 120_000, rule);
      assert.equal(result.lost, 0, `${rule.label}: lost ${result.lost} with no arrival after F`);
      assert.equal(result.afterFailure, 0, `${rule.label}: no arrival after F`);
      assert.equal(result.endedBy, 'count', `${rule.label}: ended by its count`);
    }
    // The quiet period counts from the drain's first read, answered one latency before F.
    assert.equal(simulateDrain(before, 120_000, observedRule(0, 10_000)).endedAtMs, 10_000, 'observed 0 s / 10 s: ends at first read + 10 s');
    assert.equal(simulateDrain(before, 120_000, observedRule(60_000, 10_000)).endedAtMs, 60_000 + LATENCY, 'observed 60 s / 10 s: check-delay rules');
  });

  test('the observed rule lets go in a gap it cannot tell from the end, and holds for a gap three times the longest seen', () => {
    // One new client at 1 s (seen by the read at ~2 s: a gap of ~2 s), so the silence needed is the 10 s floor:
    // the drain ends about 12 s after F, and the client at 40 s is lost.
    const early = simulateDrain([1_000, 40_000], 60_000, observedRule(5_000, 10_000));
    assert.equal(early.lost, 1, `lost ${early.lost}: the client at 40 s comes after the end at ${early.endedAtMs} ms`);
    assert.ok(early.endedAtMs > 11_000 && early.endedAtMs < 13_000, `ended at ${early.endedAtMs} ms: 10 s after the read that saw the client at 1 s`);
    // The first client 8 s after F (seen by the read at ~10 s): the silence needed is 3 x 10 s, and holds to 35 s.
    const held = simulateDrain([8_000, 35_000], 40_000, observedRule(5_000, 10_000));
    assert.equal(held.lost, 0, `lost ${held.lost}: the gap of 10 s should have made it wait 30 s`);
    assert.ok(held.endedAtMs > 35_000 + 30_000, `ended at ${held.endedAtMs} ms: 3 x the longest gap after the read that saw the client at 35 s`);
    assert.equal(simulateDrain([8_000, 35_000], 40_000, fixedRule(5_000)).lost, 2, 'the fixed rule at 5 s loses both');
  });

  test('on the same arrivals the observed rule never ends before the fixed rule at its check-delay, nor loses more, nor outlives the deadline', () => {
    const arrivals = fc.array(fc.double({ min: -60_000, max: 200_000, noNaN: true }), { maxLength: 40 }).map((list) => [...list].sort((a, b) => a - b));
    fc.assert(
      fc.property(arrivals, fc.constantFrom(0, 5_000, 60_000), fc.integer({ min: 0, max: 200_000 }), (list, checkDelayMs, lagMs) => {
        const fixed = simulateDrain(list, lagMs, fixedRule(checkDelayMs));
        const observed = simulateDrain(list, lagMs, observedRule(checkDelayMs, 10_000));
        const deadline = -2 * LATENCY + DEFAULT_SETTINGS.drainTimeoutMs;
        for (const [name, run] of [['fixed', fixed], ['observed', observed]] as const) {
          assert.ok(run.endedAtMs <= deadline, `${name}: ended at ${run.endedAtMs} ms, after the deadline ${deadline}`);
          assert.ok(run.endedAtMs >= checkDelayMs, `${name}: ended at ${run.endedAtMs} ms, before check-delay ${checkDelayMs}`);
          const after = list.filter((at) => at > run.endedAtMs && at <= lagMs).length;
          assert.equal(run.lost, after, `${name}: lost counts the arrivals after the end and before F + lag`);
        }
        assert.ok(observed.endedAtMs >= fixed.endedAtMs, `observed ended at ${observed.endedAtMs} ms, before fixed at ${fixed.endedAtMs}`);
        assert.ok(observed.lost <= fixed.lost, `observed lost ${observed.lost}, fixed ${fixed.lost}`);
      }),
      { seed: 33, numRuns: 300 },
    );
  });
});

describe('lb-risk: the estimate', () => {
  test('Poisson arrivals come at the rate asked', () => {
    const arrivals = poissonArrivals(5_000, 0, 10_000_000, mulberry32(5));
    assert.ok(Math.abs(arrivals.length - 2_000) < 4 * Math.sqrt(2_000), `${arrivals.length} arrivals in 10,000 s at 1 per 5 s (expected 2,000 +- 179)`);
  });

  test('the Wilson interval matches known values', () => {
    const none = wilson(0, 2_000);
    assert.equal(none.low, 0, 'no success: the interval starts at 0');
    assert.ok(Math.abs(none.high - 0.001917) < 1e-5, `0 of 2,000: upper bound ${none.high} (z^2 / (n + z^2) = 0.001917)`);
    const half = wilson(5, 10);
    assert.ok(Math.abs(half.low - 0.2366) < 1e-4 && Math.abs(half.high - 0.7634) < 1e-4, `5 of 10: ${half.low}-${half.high} (0.2366-0.7634)`);
  });

  test('the fixed rule loss estimate covers its exact probability, and a seed gives the same estimate every time', () => {
    // Fixed check-delay 10 s ends at F + 10 s + one latency; it loses if a new client comes in the rest of the lag.
    const meanGapMs = 30_000;
    const lagMs = 30_000;
    const exact = 1 - Math.exp(-(lagMs - 10_000 - LATENCY) / meanGapMs);
    const rule = fixedRule(10_000);
    const [first] = runCell(meanGapMs, lagMs, [rule], 2_000, 2024);
    const [again] = runCell(meanGapMs, lagMs, [rule], 2_000, 2024);
    const [other] = runCell(meanGapMs, lagMs, [rule], 2_000, 2025);
    assert.ok(first !== undefined && again !== undefined && other !== undefined, 'one result per rule');
    assert.ok(first.interval.low <= exact && exact <= first.interval.high, `exact ${exact} outside ${first.interval.low}-${first.interval.high} (${first.losing} of 2,000)`);
    assert.deepEqual(again, first, 'the same seed gives the same cell');
    assert.notEqual(other.losing, first.losing, 'another seed draws other arrivals');
    assert.ok(first.medianHeldMs === 10_000 + LATENCY, `median held ${first.medianHeldMs} ms`);
  });

  test('the rules of a cell run on the same arrivals: a rule added changes no other column', () => {
    const rules = [fixedRule(5_000), observedRule(5_000, 10_000)];
    const alone = runCell(30_000, 120_000, [rules[1] as RiskRule], 500, 7);
    const together = runCell(30_000, 120_000, rules, 500, 7);
    assert.deepEqual(together[1], alone[0], 'the observed column with and without the fixed one beside it');
    assert.ok((together[1]?.losing ?? Infinity) <= (together[0]?.losing ?? -1), 'on the same arrivals, the observed rule loses in no more runs');
  });
});

describe('lb-risk: bounded expectations (issue 33, item 7)', () => {
  /** Each bounded cell of `rule`, run as the committed table runs it: its seed, its runs. */
  function cellsOf(rule: RiskRule, boundsOf: string): { cell: string; probability: number; bound: number }[] {
    const cells: { cell: string; probability: number; bound: number }[] = [];
    MEAN_GAPS_MS.forEach((meanGapMs, gapIndex) =>
      LAGS_MS.forEach((lagMs, lagIndex) => {
        const bound = riskBoundOf(boundsOf, meanGapMs, lagMs);
        if (bound === undefined) return;
        const [result] = runCell(meanGapMs, lagMs, [rule], DEFAULT_RUNS, mixSeed(DEFAULT_SEED, gapIndex, lagIndex));
        cells.push({ cell: `1 per ${meanGapMs / 1000} s, lag ${lagMs / 1000} s`, probability: result?.probability ?? 1, bound });
      }),
    );
    return cells;
  }

  test("the observed rules lose a new client no more often than their stated bound, in every cell where traffic is not sparse", () => {
    for (const rule of RULES.filter((candidate) => RISK_BOUNDS[candidate.key] !== undefined)) {
      const cells = cellsOf(rule, rule.key);
      assert.ok(cells.length >= 9, `${rule.key}: ${cells.length} bounded cells`);
      const over = cells.filter(({ probability, bound }) => probability > bound).map(({ cell, probability, bound }) => `${cell}: ${probability} > ${bound}`);
      assert.deepEqual(over, [], `${rule.label}: past its bound`);
    }
    assert.deepEqual(Object.keys(RISK_BOUNDS).sort(), RULES.filter((rule) => RISK_BOUNDS[rule.key] !== undefined).map((rule) => rule.key).sort(), 'every bound names a rule of the table');
  });

  test('control: the rule before issue 33 (no rate from before the drain) breaks the same bounds', () => {
    const before = RULES.find((rule) => rule.key === 'observed-5s-10s-no-history');
    assert.ok(before !== undefined, 'the table has the rule before issue 33');
    const over = cellsOf(before, 'observed-5s-10s').filter(({ probability, bound }) => probability > bound);
    assert.ok(over.length >= 3, `only ${over.length} cells past the proof rule's bounds`);
  });
});
