/**
 * The chance that a drain lets its pod go while the load balancer still sends it new clients, for sparse traffic:
 * a seeded Monte Carlo through the real LoadBalancerWatch (src/sidecar/load-balancer.ts), on virtual time (no
 * timers, no sockets), written into docs/proof.md between `<!-- proof:risk:begin -->` and `<!-- proof:risk:end -->`.
 *
 *   node --import tsx test/e2e/lb-risk.ts                      2,000 runs a cell, seed 33, written to docs/proof.md
 *   node --import tsx test/e2e/lb-risk.ts --runs=500 --seed=7  fewer runs, another seed
 *   node --import tsx test/e2e/lb-risk.ts --print-only         printed, docs untouched
 *   node --import tsx test/e2e/lb-risk.ts --check-interval=5s  the sidecar's shipped check-interval
 *
 * One run, one pod, times in ms with the health-check failure F at 0:
 *
 * - **Traffic.** New clients reach Envoy as a Poisson process of mean gap `meanGapMs`, from well before the drain
 *   starts until F + lag, and none after: the load balancer lets go `lag` after the failure (unknown to the
 *   sidecar). Each new client adds 1 to one watched HTTP listener's `downstream_cx_total` and 1 to its
 *   `downstream_rq_completed` (the ArrivalTally that src/envoy/stats.ts builds: `connections` and `responses`
 *   keyed `<listener> <prefix>`), so arrivalsBetween counts it as a request and a new client. No health-check
 *   counter, no idle keep-alive client, no open connection: the count is always at min-open-connections, so the
 *   drain ends as soon as its rule lets it.
 * - **Reads, as src/sidecar/drain.ts does them.** The drain starts at S = F - drain-delay - 2 read latencies; each
 *   round reads the stats (sent at the round's start, answered one latency later, the counters taken half-way)
 *   and calls `watch.observe(tally, sentAt, answeredAt, failedAt)`, failedAt undefined until the round that sends
 *   the steps (its read comes first, then POST /healthcheck/fail, whose answer is F). The next round is at the
 *   earliest of the last round's start + check-interval, the steps' due time, and countMayEndFromMs if later than
 *   the last round (drain.ts's nextRoundAtMs); countMayEndFromMs = max(F + check-delay, watch.quietFromMs()).
 *   The drain ends by its count at the answer of the first read sent at or after countMayEndFromMs (endOfDrainBy),
 *   or at its deadline, S + drain-timeout (the shipped default: 4m50s, for the default grace period of 300 s).
 * - **Loss.** The pod dies when its drain ends (Envoy exits at once: the optimistic end for the pod, the pessimistic
 *   one for its clients). A run loses if a new client arrives after that and before F + lag; `lost` counts them.
 *
 * The rules are pluggable (RULES): each entry names the sidecar settings it ends the drain with and a factory for
 * its watch, so that a rule added to load-balancer.ts is one more entry. Every rule of a cell runs on the same
 * arrivals (common random numbers): the columns compare rules on the same traffic, and adding a rule changes no
 * other column's figures.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { pathToFileURL } from 'node:url';
import type { ArrivalTally } from '../../src/envoy/arrivals.js';
import { POD_DRAIN_SETTINGS } from '../../src/config/drain.js';
import { parseDuration } from '../../src/config/duration.js';
import { SIDECAR_SETTINGS } from '../../src/config/sidecar.js';
import { LoadBalancerWatch, PRIOR_WINDOW_MS, type PriorTraffic } from '../../src/sidecar/load-balancer.js';
import { seededRandom } from '../../src/emulator/drain-manager.js';
import { replaceBetween } from './fleet/proof-tables.js';

// --- randomness -----------------------------------------------------------------------------------------------

/** mulberry32 (the emulator's seeded source of 32-bit integers), uniform in [0, 1). */
export function mulberry32(seed: number): () => number {
  const next = seededRandom(seed);
  return () => next() / 4_294_967_296;
}

/** A seed for one cell, mixed from the run's seed and the cell's indexes, so that every cell is reproducible alone. */
export function mixSeed(seed: number, ...parts: readonly number[]): number {
  let hash = Math.imul(seed >>> 0, 0x9e3779b1) ^ 0x85ebca6b;
  for (const part of parts) {
    hash = Math.imul(hash ^ (part >>> 0), 0xcc9e2d51);
    hash = Math.imul((hash << 15) | (hash >>> 17), 0x1b873593);
  }
  hash ^= hash >>> 16;
  hash = Math.imul(hash, 0x85ebca6b);
  hash ^= hash >>> 13;
  return hash >>> 0;
}

/**
 * New-client arrival times of a Poisson process of mean gap `meanGapMs`, from `fromMs` (exclusive) to `toMs`
 * (inclusive), sorted.
 */
export function poissonArrivals(meanGapMs: number, fromMs: number, toMs: number, random: () => number): number[] {
  const arrivals: number[] = [];
  let at = fromMs;
  for (;;) {
    at += -Math.log(1 - random()) * meanGapMs;
    if (at > toMs) return arrivals;
    arrivals.push(at);
  }
}

// --- rules ----------------------------------------------------------------------------------------------------

/** What the simulated drain asks of a watch: what drain.ts asks of its LoadBalancerWatch. */
export type DrainWatch = Pick<LoadBalancerWatch, 'observe' | 'quietFromMs'>;

/** A rule that ends drains: the sidecar settings it ends them with, and its watch. */
export interface RiskRule {
  /** Short name, for `--rules`. */
  readonly key: string;
  /** The table's column title. */
  readonly label: string;
  readonly checkDelayMs: number;
  /** drain-delay: reads before the failure (the shipped default is 0: one read, the drain's first). */
  readonly drainDelayMs: number;
  /** A fresh watch for one drain; undefined quietFromMs (a rule that is off) leaves check-delay alone. */
  readonly makeWatch: (prior: PriorTraffic) => DrainWatch;
}

const SHIPPED_CHECK_DELAY_MS = POD_DRAIN_SETTINGS['check-delay'].default;
const SHIPPED_QUIET_PERIOD_MS = POD_DRAIN_SETTINGS['quiet-period'].default;
const SHIPPED_DRAIN_DELAY_MS = POD_DRAIN_SETTINGS['drain-delay'].default;
/** The check-delay the proof's observed rule runs with (test/e2e/fleet/proof-tables.ts, OBSERVED_CHECK_DELAY_MS). */
const PROOF_CHECK_DELAY_MS = 5_000;

function seconds(ms: number): string {
  return `${Number((ms / 1000).toFixed(3))} s`;
}

/** The sidecar's quiet period from its setting, as drain.ts's quietPeriodOf maps it: 0 is off (null). */
export function quietPeriodOf(quietPeriodMs: number): number | null {
  return quietPeriodMs > 0 ? quietPeriodMs : null;
}

/** The fixed rule: quiet-period 0, check-delay alone. */
export function fixedRule(checkDelayMs: number, drainDelayMs = SHIPPED_DRAIN_DELAY_MS): RiskRule {
  return {
    key: `fixed-${checkDelayMs / 1000}s`,
    label: `fixed: check-delay ${seconds(checkDelayMs)}`,
    checkDelayMs,
    drainDelayMs,
    makeWatch: () => new LoadBalancerWatch(quietPeriodOf(0)),
  };
}

/** The observed rule (LoadBalancerWatch as drain.ts makes it: GAP_FACTOR unless `gapFactor` says otherwise). */
export function observedRule(
  checkDelayMs: number,
  quietPeriodMs: number,
  options: { readonly drainDelayMs?: number; readonly label?: string; readonly key?: string; readonly history?: boolean } = {},
): RiskRule {
  return {
    key: options.key ?? `observed-${checkDelayMs / 1000}s-${quietPeriodMs / 1000}s`,
    label: options.label ?? `observed: check-delay ${seconds(checkDelayMs)}, quiet-period ${seconds(quietPeriodMs)}`,
    checkDelayMs,
    drainDelayMs: options.drainDelayMs ?? SHIPPED_DRAIN_DELAY_MS,
    makeWatch: (prior) => {
      const watch = new LoadBalancerWatch(quietPeriodOf(quietPeriodMs));
      // The supervisor's reads between drains (supervisor.ts noteTraffic): the rule as shipped; `history: false`, without.
      if (options.history !== false) watch.setPriorTraffic(prior);
      return watch;
    },
  };
}

/**
 * The rules of the table, in its column order. The shipped defaults (src/config/drain.ts, what the webhook
 * injects) are check-delay 60 s and quiet-period 10 s; the proof's observed rule (docs/proof.md) uses check-delay 5 s.
 */
export const RULES: readonly RiskRule[] = [
  fixedRule(PROOF_CHECK_DELAY_MS),
  observedRule(PROOF_CHECK_DELAY_MS, SHIPPED_QUIET_PERIOD_MS, { label: `observed: check-delay ${seconds(PROOF_CHECK_DELAY_MS)}, quiet-period ${seconds(SHIPPED_QUIET_PERIOD_MS)} (the proof's)` }),
  observedRule(PROOF_CHECK_DELAY_MS, SHIPPED_QUIET_PERIOD_MS, {
    key: `observed-${PROOF_CHECK_DELAY_MS / 1000}s-${SHIPPED_QUIET_PERIOD_MS / 1000}s-no-history`,
    label: 'the same, without the rate before the drain (the rule before issue 33)',
    history: false,
  }),
  fixedRule(SHIPPED_CHECK_DELAY_MS),
  observedRule(SHIPPED_CHECK_DELAY_MS, SHIPPED_QUIET_PERIOD_MS, {
    key: 'shipped',
    label: `shipped defaults: check-delay ${seconds(SHIPPED_CHECK_DELAY_MS)}, quiet-period ${seconds(SHIPPED_QUIET_PERIOD_MS)}`,
  }),
  observedRule(SHIPPED_CHECK_DELAY_MS, SHIPPED_QUIET_PERIOD_MS, {
    key: 'shipped-no-history',
    label: 'the same, without the rate before the drain (the rule before issue 33)',
    history: false,
  }),
];

/** The traffic axis: mean gap between new clients. */
export const MEAN_GAPS_MS: readonly number[] = [1_000, 5_000, 30_000, 120_000];
/** The lag axis: how long after the failure the load balancer still sends new clients. */
export const LAGS_MS: readonly number[] = [3_000, 30_000, 120_000];

/**
 * Bounded expectations (issue 33, item 7): the observed rules' chance of losing a new client, at most, in each cell
 * where the traffic before the drain is not sparse (1 per 30 s or busier), at the committed seed and runs. Seeded, so
 * the test cannot flake, and a rule that lets more pods go fails it: about 1.5 times what the committed table shows,
 * never below 0.5 %. The proof's rule before issue 33 (no rate from before the drain) breaks four of its bounds (26 to 91 %). The fleet's NLB-like and 10 s x 3
 * rows under the observed rule, whose losses vary from run to run, are held by these (proof-tables.ts VARIES).
 */
export const RISK_BOUNDS: Readonly<Record<string, Readonly<Record<string, number>>>> = {
  [`observed-${PROOF_CHECK_DELAY_MS / 1000}s-${SHIPPED_QUIET_PERIOD_MS / 1000}s`]: {
    '1000 3000': 0.005, '1000 30000': 0.005, '1000 120000': 0.005,
    '5000 3000': 0.005, '5000 30000': 0.015, '5000 120000': 0.09,
    '30000 3000': 0.005, '30000 30000': 0.005, '30000 120000': 0.005,
  },
  shipped: {
    '1000 3000': 0.005, '1000 30000': 0.005, '1000 120000': 0.005,
    '5000 3000': 0.005, '5000 30000': 0.005, '5000 120000': 0.015,
    '30000 3000': 0.005, '30000 30000': 0.005, '30000 120000': 0.005,
  },
};

/** The bound of one rule's cell, if it has one. */
export function riskBoundOf(ruleKey: string, meanGapMs: number, lagMs: number): number | undefined {
  return RISK_BOUNDS[ruleKey]?.[`${meanGapMs} ${lagMs}`];
}

/** The committed table's runs a cell and seed, which the bounds are stated at. */
export const DEFAULT_RUNS = 2_000;
export const DEFAULT_SEED = 33;

// --- one drain ------------------------------------------------------------------------------------------------

export interface RiskSettings {
  /** The sidecar's check-interval (the proof's 2 s; the shipped default is 5 s). */
  readonly checkIntervalMs: number;
  /** The drain's deadline from its start (the shipped default). */
  readonly drainTimeoutMs: number;
  /** From a stats read (or POST /healthcheck/fail) sent to its answer; the counters are taken half-way. */
  readonly readLatencyMs: number;
}

export const DEFAULT_SETTINGS: RiskSettings = {
  checkIntervalMs: 2_000,
  drainTimeoutMs: SIDECAR_SETTINGS['drain-timeout'].default,
  readLatencyMs: 10,
};

export interface DrainRun {
  /** When the drain ended (the pod died), from the failure F. */
  readonly endedAtMs: number;
  readonly endedBy: 'count' | 'deadline';
  /** New clients that arrived after the end (and before F + lag): lost. */
  readonly lost: number;
  /** New clients that arrived after F. */
  readonly afterFailure: number;
  /** Reads the drain made. */
  readonly reads: number;
}

const LISTENER = '0.0.0.0_10000';
const RESPONSES_KEY = `${LISTENER} ingress_http`;
/** Counters at the window's start: Envoy had served before (any value: only growth counts). */
const BASE_COUNT = 1_000;

/**
 * The tally of a read whose counters show `seen` new clients since the window's start (see the header): no probe of
 * the kubelet on the listener (they go to Envoy's admin port), no blind spot. Built as a variable rather than
 * returned as a literal so that it fits ArrivalTally whether or not that has the later fields (probeRates,
 * blindSpots) yet: a fresh literal would be checked for excess properties.
 */
export function tallyOf(seen: number): ArrivalTally {
  const tally = {
    connections: { [LISTENER]: BASE_COUNT + seen },
    responses: { [RESPONSES_KEY]: BASE_COUNT + seen },
    healthChecks: {},
    connectionListeners: [],
    watched: [LISTENER],
    probeRates: {},
    blindSpots: [],
  };
  return tally;
}

/** How far before the drain's start arrivals are drawn from (memoryless: any span works; this one shows it). */
export const WARM_UP_MS = PRIOR_WINDOW_MS;

/**
 * One drain of one pod under `rule`, given every new client's arrival time (ms from the failure F, sorted; the
 * ones after F + lagMs are ignored: the load balancer sent none). Pure: the same input gives the same run.
 */
export function simulateDrain(arrivalsMs: readonly number[], lagMs: number, rule: RiskRule, settings: RiskSettings = DEFAULT_SETTINGS): DrainRun {
  const latency = settings.readLatencyMs;
  const arrivals = arrivalsMs.filter((at) => at <= lagMs);
  const startedAtMs = -rule.drainDelayMs - 2 * latency;
  const stepsDueAtMs = startedAtMs + rule.drainDelayMs;
  const deadlineAtMs = startedAtMs + settings.drainTimeoutMs;
  // What the supervisor saw before the drain: the new clients of the window before it (PRIOR_WINDOW_MS).
  const newClientsBefore = arrivalsMs.filter((at) => at < startedAtMs && at >= startedAtMs - PRIOR_WINDOW_MS).length;
  const watch = rule.makeWatch({ newClients: newClientsBefore, spanMs: PRIOR_WINDOW_MS });
  let failedAtMs: number | undefined;
  let seen = 0;
  let reads = 0;
  let roundAtMs = startedAtMs;
  let endedAtMs = deadlineAtMs;
  let endedBy: DrainRun['endedBy'] = 'deadline';
  const countMayEndFromMs = (): number | undefined => {
    if (failedAtMs === undefined) return undefined;
    return Math.max(failedAtMs + rule.checkDelayMs, watch.quietFromMs() ?? -Infinity);
  };
  while (roundAtMs < deadlineAtMs) {
    const sentAtMs = roundAtMs;
    const answeredAtMs = sentAtMs + latency;
    if (answeredAtMs > deadlineAtMs) break;
    const takenAtMs = sentAtMs + latency / 2;
    while (seen < arrivals.length && (arrivals[seen] as number) <= takenAtMs) seen += 1;
    reads += 1;
    watch.observe(tallyOf(seen), sentAtMs, answeredAtMs, failedAtMs);
    const mayEnd = countMayEndFromMs();
    if (mayEnd !== undefined && sentAtMs >= mayEnd) {
      endedAtMs = answeredAtMs;
      endedBy = 'count';
      break;
    }
    // The steps, once due, right after the read: POST /healthcheck/fail answered one latency later is F.
    if (failedAtMs === undefined && answeredAtMs >= stepsDueAtMs) failedAtMs = answeredAtMs + latency;
    const candidates = [roundAtMs + settings.checkIntervalMs];
    if (stepsDueAtMs > roundAtMs) candidates.push(stepsDueAtMs);
    const next = countMayEndFromMs();
    if (next !== undefined && next > roundAtMs) candidates.push(next);
    roundAtMs = Math.max(roundAtMs + 1, Math.min(...candidates));
  }
  let afterFailure = 0;
  let lost = 0;
  for (const at of arrivals) {
    if (at > 0) afterFailure += 1;
    if (at > endedAtMs) lost += 1;
  }
  return { endedAtMs, endedBy, lost, afterFailure, reads };
}

/** The arrivals one run draws: from before the earliest drain start of `rules` to F + lag. */
export function drawArrivals(meanGapMs: number, lagMs: number, random: () => number, drainDelayMs = SHIPPED_DRAIN_DELAY_MS): number[] {
  return poissonArrivals(meanGapMs, -drainDelayMs - WARM_UP_MS, lagMs, random);
}

/** One simulated drain, given the traffic rate (as its mean gap), the lag, the rule and a PRNG. Pure but for the PRNG's state. */
export function simulateRun(meanGapMs: number, lagMs: number, rule: RiskRule, random: () => number, settings: RiskSettings = DEFAULT_SETTINGS): DrainRun {
  return simulateDrain(drawArrivals(meanGapMs, lagMs, random, rule.drainDelayMs), lagMs, rule, settings);
}

// --- cells ----------------------------------------------------------------------------------------------------

/** The 95 % Wilson score interval of `successes` out of `trials`. */
export function wilson(successes: number, trials: number, z = 1.959964): { readonly low: number; readonly high: number } {
  if (trials === 0) return { low: 0, high: 1 };
  const p = successes / trials;
  const z2 = z * z;
  const denominator = 1 + z2 / trials;
  const center = (p + z2 / (2 * trials)) / denominator;
  const half = (z * Math.sqrt((p * (1 - p)) / trials + z2 / (4 * trials * trials))) / denominator;
  // Exact at the ends, where rounding would leave a trace (1e-19) of what is 0.
  return { low: successes === 0 ? 0 : Math.max(0, center - half), high: successes === trials ? 1 : Math.min(1, center + half) };
}

export interface CellResult {
  readonly rule: RiskRule;
  readonly runs: number;
  /** Runs that lost at least one new client. */
  readonly losing: number;
  readonly probability: number;
  readonly interval: { readonly low: number; readonly high: number };
  /** Median of the time the pod was held after the failure (drain end - F). */
  readonly medianHeldMs: number;
  /** Runs whose drain reached its deadline. */
  readonly deadlines: number;
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? (sorted[middle] as number) : ((sorted[middle - 1] as number) + (sorted[middle] as number)) / 2;
}

/**
 * `runs` runs of one (rate, lag) cell for every rule, on the same arrivals (drawn once per run from a PRNG seeded
 * with `seed`; every rule's drain-delay must be the same for that, or each rule draws its own).
 */
export function runCell(meanGapMs: number, lagMs: number, rules: readonly RiskRule[], runs: number, seed: number, settings: RiskSettings = DEFAULT_SETTINGS): CellResult[] {
  const drainDelays = new Set(rules.map((rule) => rule.drainDelayMs));
  const shared = drainDelays.size === 1;
  const random = mulberry32(seed);
  const perRule = rules.map(() => ({ losing: 0, deadlines: 0, held: [] as number[] }));
  for (let run = 0; run < runs; run += 1) {
    const arrivals = shared ? drawArrivals(meanGapMs, lagMs, random, rules[0]?.drainDelayMs) : undefined;
    rules.forEach((rule, index) => {
      const result = arrivals === undefined ? simulateRun(meanGapMs, lagMs, rule, random, settings) : simulateDrain(arrivals, lagMs, rule, settings);
      const tally = perRule[index] as (typeof perRule)[number];
      if (result.lost > 0) tally.losing += 1;
      if (result.endedBy === 'deadline') tally.deadlines += 1;
      tally.held.push(result.endedAtMs);
    });
  }
  return rules.map((rule, index) => {
    const { losing, deadlines, held } = perRule[index] as (typeof perRule)[number];
    return { rule, runs, losing, probability: losing / runs, interval: wilson(losing, runs), medianHeldMs: median(held), deadlines };
  });
}

// --- the table ------------------------------------------------------------------------------------------------

/** A percentage without its sign: 0, two decimals below 1 %, one above. */
function percent(fraction: number): string {
  const value = fraction * 100;
  return value === 0 ? '0' : value < 1 ? value.toFixed(2) : value.toFixed(1);
}

function gapLabel(meanGapMs: number): string {
  return `1 per ${meanGapMs / 1000} s`;
}

/** A cell: the loss probability, its interval, the median hold, and the deadlines reached if any. */
export function formatCell(result: CellResult): string {
  const { probability, interval, medianHeldMs, deadlines, runs } = result;
  const deadline = deadlines === 0 ? '' : `; deadline ${percent(deadlines / runs)} %`;
  return `${percent(probability)} % (${percent(interval.low)}-${percent(interval.high)}); ${(medianHeldMs / 1000).toFixed(1)} s${deadline}`;
}

export function tableLines(rules: readonly RiskRule[], cells: readonly { readonly meanGapMs: number; readonly lagMs: number; readonly results: readonly CellResult[] }[]): string[] {
  const header = ['new clients', 'lag', ...rules.map((rule) => rule.label)];
  return [
    `| ${header.join(' | ')} |`,
    `|${header.map(() => '---').join('|')}|`,
    ...cells.map(({ meanGapMs, lagMs, results }) => `| ${[gapLabel(meanGapMs), `${lagMs / 1000} s`, ...results.map(formatCell)].join(' | ')} |`),
  ];
}

// --- the command ----------------------------------------------------------------------------------------------

const DOC = new URL('../../docs/proof.md', import.meta.url);
async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      runs: { type: 'string', default: String(DEFAULT_RUNS) },
      seed: { type: 'string', default: String(DEFAULT_SEED) },
      'check-interval': { type: 'string', default: '2s' },
      rules: { type: 'string' },
      'print-only': { type: 'boolean', default: false },
      'any-scale': { type: 'boolean', default: false },
    },
  });
  const runs = Number(values.runs);
  const seed = Number(values.seed);
  const checkIntervalMs = parseDuration(values['check-interval']);
  if (!Number.isInteger(runs) || runs < 1) throw new Error(`--runs: ${values.runs} is no positive whole number`);
  if (!Number.isInteger(seed) || seed < 0 || seed > 0xffffffff) throw new Error(`--seed: ${values.seed} is no whole number from 0 to 2^32-1`);
  if (checkIntervalMs === undefined || checkIntervalMs <= 0) throw new Error(`--check-interval: ${values['check-interval']} is no positive duration (2s, 500ms)`);
  const wanted = values.rules?.split(',');
  const rules = wanted === undefined ? RULES : RULES.filter((rule) => wanted.includes(rule.key));
  if (rules.length === 0) throw new Error(`--rules: none of ${values.rules} is a rule (${RULES.map((rule) => rule.key).join(', ')})`);
  const settings: RiskSettings = { ...DEFAULT_SETTINGS, checkIntervalMs };
  const started = performance.now();
  const cells = MEAN_GAPS_MS.flatMap((meanGapMs, gapIndex) =>
    LAGS_MS.map((lagMs, lagIndex) => ({ meanGapMs, lagMs, results: runCell(meanGapMs, lagMs, rules, runs, mixSeed(seed, gapIndex, lagIndex), settings) })),
  );
  const took = (performance.now() - started) / 1000;
  const lines = tableLines(rules, cells);
  const flags = [
    runs === DEFAULT_RUNS ? '' : ` --runs=${runs}`,
    seed === DEFAULT_SEED ? '' : ` --seed=${seed}`,
    values['check-interval'] === '2s' ? '' : ` --check-interval=${values['check-interval']}`,
    values.rules === undefined ? '' : ` --rules=${values.rules}`,
  ].join('');
  const produced =
    `Produced by \`node --import tsx test/e2e/lb-risk.ts${flags}\` (${runs} runs a cell, seed ${seed}, check-interval ${seconds(checkIntervalMs)}, ` +
    `read latency ${settings.readLatencyMs} ms, drain deadline ${seconds(settings.drainTimeoutMs)}) on ${new Date().toISOString().slice(0, 10)}, ` +
    `Node ${process.version}; ${took.toFixed(1)} s. Each cell: the chance that a pod loses a new client (95 % Wilson interval); ` +
    `the median time the pod was held after its health checks failed; and, if any, the share of drains that reached their deadline.`;
  console.log(`${produced}\n\n${lines.join('\n')}`);
  // Fewer runs, another seed or some rules only would pass for the committed table: printed, unless asked for.
  const committed = runs === DEFAULT_RUNS && seed === DEFAULT_SEED && values.rules === undefined && values['check-interval'] === '2s';
  if (!values['print-only'] && !committed && !values['any-scale']) {
    console.error(`\nnot written: docs/proof.md's risk table is committed at ${DEFAULT_RUNS} runs a cell, seed ${DEFAULT_SEED}, every rule, check-interval 2s; add --any-scale to write this one anyway`);
    process.exitCode = 2;
    return;
  }
  if (!values['print-only']) {
    const doc = await readFile(DOC, 'utf8');
    await writeFile(DOC, replaceBetween(doc, 'risk', `${produced}\n\n${lines.join('\n')}`));
    console.log('\nwritten to docs/proof.md');
  }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) await main();
