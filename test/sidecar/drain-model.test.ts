/**
 * The model-based fault search of the drain's promises (test/support/drain-model.ts says what is generated and
 * which invariants are checked): a bounded number of generated scenarios (DRAIN_MODEL_RUNS, default 10), each run as
 * written and at another pace, every counterexample ever found kept as a named regression test and run at two paces
 * (ALL_PACES=1: all three), and a negative control showing that the checks catch a broken drain. About 30 s.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { ALL_PACES, PACES, problemsOf, runScenario, scenarioArbitrary, type Pace, type Scenario } from '../support/drain-model.js';
import { runsAlone } from '../support/exclusive.js';

// It loads or times the machine: never beside another such file (see test/support/exclusive.ts).
runsAlone();

// --- the tests ------------------------------------------------------------------------------------------

const RUNS = Number(process.env['DRAIN_MODEL_RUNS'] ?? 10);

/**
 * Counterexamples the search has found, kept as regression tests by name. The first four broke the sidecar as it
 * was before the drain's promises were made to hold by construction (FUZZ_SEED=1: 7 of 60 runs broke an
 * invariant). The next two broke the new supervisor (FUZZ_SEED=7, 300 runs): a re-armed drain inherited the failed
 * health checks of the process before, and a drain ended as envoy-replaced left a stale mark behind, so that the
 * new process's growing counter later passed for the drained one. The last one broke the first rule for marks,
 * "any growth is the same process" (FUZZ_SEED=11): a process seconds old was replaced right after the drain's calls,
 * and the new one had counted those calls by the next read; marks now must grow by at least our own connections.
 * The last five came from issue 28's extension of the search (hot restarts, socket paths, trimmed stats, listener-heavy
 * Envoys): listener gauges trimmed summed to 0, a hot restart with its epoch trimmed passed for a counter reset, and a
 * hot restart after a drain ended passed for the drained process (also when only the child's stats had the epoch),
 * and a replaced Envoy whose predecessor's stats lacked the admin counter passed for it.
 */
/** `foundAt`: the pace the search found it at, if not as written (it runs at that pace and as written). */
const KEPT: readonly { readonly name: string; readonly scenario: Scenario; readonly mustNotAnswer?: RegExp; readonly foundAt?: Pace }[] = [
  {
    name: 'a stats read answered 101 Switching Protocols held /shutdown until the client gave up (I1)',
    scenario: {
      steps: [
        { kind: 'pause', ms: 52 },
        { kind: 'script', path: '/stats', behaviours: ['status:404', 'upgrade'] },
        { kind: 'script', path: '/server_info', behaviours: ['reset', 'silent', 'upgrade', 'answer'] },
        { kind: 'shutdown' },
      ],
      minOpenConnections: 0,
      drainDelayMs: 40,
    },
  },
  {
    name: 'SIGTERM waited for a drain that an upgrade answer held, and was never answered (I1)',
    scenario: {
      steps: [
        { kind: 'pause', ms: 35 },
        { kind: 'connections', open: 1 },
        { kind: 'script', path: '*', behaviours: ['upgrade', 'status:500'] },
        { kind: 'shutdown' },
        { kind: 'pause', ms: 146 },
        { kind: 'shutdown' },
        { kind: 'sigterm' },
      ],
      minOpenConnections: 1,
      drainDelayMs: 40,
    },
  },
  {
    name: 'an Envoy replaced after a drain, behind a /server_info that fails, got the old answer and was not drained (I3)',
    scenario: {
      steps: [
        { kind: 'pause', ms: 193 },
        { kind: 'shutdown' },
        { kind: 'shutdown' },
        { kind: 'script', path: '/server_info', behaviours: ['endless', 'upgrade', 'reset'] },
        { kind: 'script', path: '/server_info', behaviours: [{ kind: 'deep-json', depth: 100_000 }, 'upgrade'] },
        { kind: 'connections', open: 0 },
        { kind: 'pause', ms: 47 },
        { kind: 'script', path: '/healthcheck/fail', behaviours: ['silent', 'endless'] },
        { kind: 'pause', ms: 166 },
        { kind: 'replace', open: 1 },
        { kind: 'connections', open: 0 },
        { kind: 'shutdown' },
      ],
      minOpenConnections: 1,
      drainDelayMs: 40,
    },
  },
  {
    name: 'a 101 to /healthcheck/fail after an Envoy restart held /wait and /shutdown (I1)',
    scenario: {
      steps: [
        { kind: 'wait' },
        { kind: 'script', path: '/healthcheck/fail', behaviours: ['delay:120', 'upgrade'] },
        { kind: 'restart', open: 3 },
        { kind: 'shutdown' },
        { kind: 'strangers', count: 15, style: 'pipeline' },
        { kind: 'shutdown' },
      ],
      minOpenConnections: 1,
      drainDelayMs: 40,
    },
  },
  {
    name: 'a drain re-armed for a restarted Envoy inherited the failed health checks of the one before (I4)',
    scenario: {
      steps: [
        { kind: 'shutdown' },
        { kind: 'pause', ms: 41 },
        { kind: 'connections', open: 3 },
        { kind: 'step-wall', ms: 3_600_000 },
        { kind: 'connections', open: 2 },
        { kind: 'wait' },
        { kind: 'wait' },
        { kind: 'shutdown' },
        { kind: 'script', path: '/stats', behaviours: ['status:404', 'status:404'] },
        { kind: 'shutdown' },
        { kind: 'shutdown' },
        { kind: 'restart', open: 1 },
        { kind: 'pause', ms: 95 },
        { kind: 'shutdown' },
      ],
      minOpenConnections: 1,
      drainDelayMs: 0,
    },
  },
  {
    name: 'after an envoy-replaced drain, the new process passed for the drained one once its counter grew (I3)',
    scenario: {
      steps: [
        { kind: 'stop' },
        { kind: 'script', path: '/ready', behaviours: ['status:404', { kind: 'deep-json', depth: 100_000 }, { kind: 'deep-json', depth: 100_000 }] },
        { kind: 'pause', ms: 33 },
        { kind: 'strangers', count: 11, style: 'junk' },
        { kind: 'shutdown' },
        { kind: 'script', path: '/stats', behaviours: ['answer'] },
        { kind: 'restart', open: 3 },
        { kind: 'pause', ms: 12 },
        { kind: 'restart', open: 2 },
        { kind: 'restart', open: 2 },
        { kind: 'pause', ms: 79 },
        { kind: 'pause', ms: 112 },
        { kind: 'pause', ms: 67 },
        { kind: 'shutdown' },
      ],
      minOpenConnections: 1,
      drainDelayMs: 40,
    },
  },
  {
    name: "a young Envoy replaced right after the drain's calls passed for the drained one (I2)",
    scenario: {
      steps: [
        { kind: 'script', path: '*', behaviours: ['reset', { kind: 'deep-json', depth: 100_000 }] },
        { kind: 'connections', open: 0 },
        { kind: 'replace', open: 1 },
        { kind: 'connections', open: 0 },
        { kind: 'pause', ms: 119 },
        { kind: 'restart', open: 1 },
        { kind: 'script', path: '/healthcheck/fail', behaviours: ['silent', 'upgrade', 'status:500'] },
        { kind: 'shutdown' },
        { kind: 'pause', ms: 52 },
        { kind: 'connections', open: 1 },
        { kind: 'shutdown' },
        { kind: 'script', path: '/drain_listeners', behaviours: [{ kind: 'deep-json', depth: 100_000 }, { kind: 'deep-json', depth: 100_000 }, 'delay:120', 'delay:120'] },
        { kind: 'restart', open: 2 },
        { kind: 'shutdown' },
        { kind: 'sigterm' },
      ],
      minOpenConnections: 1,
      drainDelayMs: 0,
    },
  },
  {
    // Issue 28's search (FUZZ_SEED=1, the first 40 runs): found restarted with the gauges trimmed, shrunk by hand.
    name: 'an Envoy whose stats_matcher trims the listener gauges was drained on a count of 0 while it held 3 connections (I2)',
    scenario: {
      steps: [{ kind: 'connections', open: 3 }, { kind: 'shutdown' }],
      minOpenConnections: 0,
      drainDelayMs: 0,
      trim: 'listener-gauges',
    },
  },
  {
    // Issue 28's search: a hot restart over TCP with server.hot_restart_epoch trimmed (the parent holds the witness,
    // the child's counter starts at 0) read as a counter reset; the drain ended on the child's count, check-delay
    // after the PARENT's /healthcheck/fail, and the child was never told to fail its health checks nor to drain.
    name: 'a hot restart with the restart epoch trimmed passed for a counter reset, and its child was never told to drain (I4)',
    scenario: {
      steps: [
        { kind: 'connections', open: 1 },
        { kind: 'shutdown' },
        { kind: 'pause', ms: 60 },
        { kind: 'hot-restart', open: 0, trim: 'hot-restart-gauges' },
        { kind: 'parent-connections', open: 0 },
        { kind: 'pause', ms: 200 },
      ],
      minOpenConnections: 0,
      drainDelayMs: 0,
      transport: 'tcp',
      trim: 'hot-restart-gauges',
    },
  },
  {
    // Issue 28's search (FUZZ_SEED=3): after a drain ended, Envoy hot-restarted; the child's reads came while the
    // parent held the witness, so they read as a counter reset of the drained process, and the next /shutdown got
    // the old "drained" while the child, never told to drain, served. A higher restart epoch is now another process.
    name: 'a hot restart after a drain ended passed for the drained process, and /shutdown got the old answer (I3)',
    scenario: {
      steps: [
        { kind: 'shutdown' },
        { kind: 'pause', ms: 132 },
        { kind: 'hot-restart', open: 2, trim: 'none' },
        { kind: 'pause', ms: 104 },
        { kind: 'shutdown' },
        { kind: 'script', path: '/healthcheck/fail', behaviours: ['status:404', 'status:404', 'reset'] },
        { kind: 'strangers', count: 9, style: 'pipeline' },
        { kind: 'script', path: '/server_info', behaviours: ['delay:120', 'delay:120', 'delay:40'] },
        { kind: 'shutdown' },
      ],
      minOpenConnections: 0,
      drainDelayMs: 40,
      transport: 'tcp',
      trim: 'none',
    },
  },
  {
    // Issue 28's search (FUZZ_SEED=3, on the fix above): the drained process's stats lacked the restart epoch (a
    // stats_matcher), its hot restart child's had one, and the child still passed for the drained process. An epoch
    // above 0 where the earlier answer had none is now a hot restart child (a stats_matcher is fixed per process).
    name: 'a hot restart child whose stats show the epoch its trimmed parent lacked passed for the drained process (I3)',
    scenario: {
      steps: [
        { kind: 'script', path: '/server_info', behaviours: ['delay:120'] },
        { kind: 'script', path: '/server_info', behaviours: ['endless', 'status:500'] },
        { kind: 'pause', ms: 84 },
        { kind: 'shutdown' },
        { kind: 'pause', ms: 114 },
        { kind: 'connections', open: 1 },
        { kind: 'script', path: '*', behaviours: ['answer'] },
        { kind: 'script', path: '/server_info', behaviours: [{ kind: 'deep-json', depth: 100_000 }] },
        { kind: 'parent-exit' },
        { kind: 'strangers', count: 4, style: 'junk' },
        { kind: 'hot-restart', open: 0, trim: 'none' },
        { kind: 'shutdown' },
        { kind: 'script', path: '/drain_listeners', behaviours: ['reset', 'answer', 'endless'] },
        { kind: 'shutdown' },
        { kind: 'sigterm' },
      ],
      minOpenConnections: 0,
      drainDelayMs: 40,
      transport: 'tcp',
      trim: 'hot-restart-gauges',
    },
  },
  {
    // Issue 28's search (FUZZ_SEED=6): an Envoy whose stats lacked the admin counter was drained, then replaced (over
    // a Unix socket) by one whose stats had it. The witness closed with the old one, yet the watch followed the new
    // one's 'unknown' read, then took it for the same process: /shutdown got the old answer. An unknown read is no
    // longer followed once the earlier process has let go of the witness.
    name: 'an Envoy replaced after a drain, the old one without the admin counter, passed for the drained one (I3)',
    scenario: {
      steps: [
        { kind: 'shutdown' },
        { kind: 'pause', ms: 126 },
        { kind: 'replace', open: 1, trim: 'none' },
        { kind: 'pause', ms: 110 },
        { kind: 'step-wall', ms: 5000 },
        { kind: 'connections', open: 0 },
        { kind: 'shutdown' },
      ],
      minOpenConnections: 1,
      drainDelayMs: 0,
      transport: 'unix',
      trim: 'admin-counter',
    },
  },
  {
    // Issue 38 (FUZZ_SEED=4242, 1 of 300 runs; 10 of 10 replays on an idle machine): Envoy hot-restarted right after
    // /shutdown, so the drain pinned the child (epoch 1) while the parent held the witness the sidecar had opened at
    // start. The parent exited 83 ms later, closing it; then the child's counters were reset. The closed witness
    // was taken for the child letting go, the reset counter for another process: "envoy-replaced", and both
    // /shutdown calls got 200 "drained" while the child held its 2 connections. A witness now speaks only for reads
    // of its holder's restart epoch (identity.ts holderEpochOf, witnessVouches): the drain holds to its deadline.
    name: "a followed hot restart child's counter reset, right after its parent exited, was taken for another Envoy and answered drained (I4)",
    mustNotAnswer: /^drained/,
    scenario: {
      steps: [
        { kind: 'shutdown' },
        { kind: 'script', path: '/drain_listeners', behaviours: ['endless', 'silent'] },
        { kind: 'script', path: '/stats', behaviours: ['delay:40', 'answer', 'reset', 'upgrade'] },
        { kind: 'hot-restart', open: 2, trim: 'none' },
        { kind: 'pause', ms: 83 },
        { kind: 'parent-exit' },
        { kind: 'reset-counters' },
        { kind: 'script', path: '/healthcheck/fail', behaviours: [{ kind: 'deep-json', depth: 100_000 }] },
        { kind: 'script', path: '/drain_listeners', behaviours: [{ kind: 'deep-json', depth: 100_000 }, 'upgrade', 'upgrade', 'endless'] },
        { kind: 'parent-exit' },
        { kind: 'shutdown' },
      ],
      minOpenConnections: 1,
      drainDelayMs: 0,
      transport: 'tcp',
      extraListeners: 2_000,
      trim: 'none',
    },
  },
  {
    // Issue 33, case 6 (the FUZZ_SEED=10 run left open by issue 28): after a drain ended, a hot restart whose child's
    // stats lack the restart epoch. The parent held the witness, so the child read as the drained process with its
    // counters reset, and the next /shutdown got the old answer. A witness held by a process whose stats carry the
    // epoch does not speak for one whose stats lack it (a stats_matcher is fixed per process).
    name: 'after a drain ended, a hot restart child without the restart epoch passed for the drained process (I3)',
    scenario: {
      steps: [
        { kind: 'connections', open: 0 },
        { kind: 'shutdown' },
        { kind: 'pause', ms: 250 },
        { kind: 'hot-restart', open: 1, trim: 'hot-restart-gauges' },
        { kind: 'parent-connections', open: 1 },
        { kind: 'pause', ms: 60 },
        { kind: 'shutdown' },
      ],
      minOpenConnections: 1,
      drainDelayMs: 0,
      transport: 'tcp',
      trim: 'none',
    },
  },
  {
    // The same with neither process's stats carrying the epoch: the reset cannot be told from a hot restart, and after
    // an ended drain it was answered with the old outcome. It now re-arms (supervisor.ts afterWatchRead), and the
    // next drain fails the health checks of whatever answers, as a running drain does for such a reset.
    name: 'after a drain ended, a counter reset without any restart epoch (a hot restart?) got the old answer (I3)',
    scenario: {
      steps: [
        { kind: 'connections', open: 0 },
        { kind: 'shutdown' },
        { kind: 'pause', ms: 250 },
        { kind: 'hot-restart', open: 1, trim: 'hot-restart-gauges' },
        { kind: 'parent-connections', open: 1 },
        { kind: 'pause', ms: 60 },
        { kind: 'shutdown' },
      ],
      minOpenConnections: 1,
      drainDelayMs: 0,
      transport: 'tcp',
      trim: 'hot-restart-gauges',
    },
  },
  {
    // Issue 38's wider search beside two CPU burners (FUZZ_SEED=107, the brisk pace; 5 of 5 replays at that pace):
    // the drain pinned a process whose stats lacked the admin counter; it was replaced, and the new one's first read,
    // with a counter, read as 'unknown' and was followed, so its later reads passed for the pinned process's. A
    // counter that appears (or goes) is now another process's: a stats_matcher is fixed for a process's life.
    name: "a replacement whose stats carry the admin counter the pinned process's lacked was followed as the pinned process (I2)",
    foundAt: PACES.brisk,
    scenario: {
      steps: [
        { kind: 'hot-restart', open: 3, trim: 'none' },
        { kind: 'stop' },
        { kind: 'shutdown' },
        { kind: 'script', path: '/healthcheck/fail', behaviours: ['delay:40', 'reset', 'reset', 'status:500'] },
        { kind: 'restart', open: 0, trim: 'admin-counter' },
        { kind: 'pause', ms: 143 },
        { kind: 'hot-restart', open: 0, trim: 'none' },
        { kind: 'script', path: '/server_info', behaviours: ['upgrade', 'reset'] },
        { kind: 'shutdown' },
        { kind: 'socket-path', change: 'file' },
        { kind: 'script', path: '/healthcheck/fail', behaviours: ['answer', 'reset', 'status:404', 'reset'] },
        { kind: 'restart', open: 3, trim: 'none' },
        { kind: 'shutdown' },
        { kind: 'sigterm' },
      ],
      minOpenConnections: 1,
      drainDelayMs: 40,
      transport: 'unix',
      extraListeners: 0,
      trim: 'none',
    },
  },
  {
    // The same search (FUZZ_SEED=108, brisk): Envoy restarted right before the drain's first read, then its socket
    // path was unlinked. The witness closed by the process before it was taken for the pinned one letting go, and the
    // refusals for its exit: "drained" (envoy-exited) while it ran. Refusals prove an exit only once the pinned
    // process let go of a witness that spoke for it (drain.ts exitProven, identity.ts letGoOfUs).
    name: 'refusals after a restart just before the first read were taken for the exit of the process drained, by the witness of the one before (I4)',
    foundAt: PACES.brisk,
    scenario: {
      steps: [
        { kind: 'strangers', count: 20, style: 'idle' },
        { kind: 'shutdown' },
        { kind: 'restart', open: 0, trim: 'none' },
        { kind: 'pause', ms: 86 },
        { kind: 'socket-path', change: 'unlink' },
        { kind: 'shutdown' },
      ],
      minOpenConnections: 0,
      drainDelayMs: 40,
      transport: 'unix',
      extraListeners: 0,
      trim: 'hot-restart-gauges',
    },
  },
  {
    // Issue 38's search on the fixed code beside two CPU burners (FUZZ_SEED=210; 3 of 4 replays as written on an
    // idle machine): a hot restart child (epoch 1) was pinned moments after it started, then replaced by a new
    // process (epoch 0) whose admin counter had outgrown the child's by exactly the growth our connections predict,
    // so its reads passed for the pinned process's (I2). A restart epoch that changes otherwise than to a child's is
    // now another process, whatever the counter (identity.ts epochChanged).
    name: "a young hot restart child replaced by a process of a lower restart epoch, whose counter outgrew its own, passed for it (I2)",
    foundAt: PACES.brisk,
    scenario: {
      steps: [
        { kind: 'shutdown' },
        { kind: 'socket-path', change: 'file' },
        { kind: 'socket-path', change: 'directory' },
        { kind: 'wait' },
        { kind: 'hot-restart', open: 0, trim: 'none' },
        { kind: 'pause', ms: 27 },
        { kind: 'shutdown' },
        { kind: 'strangers', count: 24, style: 'junk' },
        { kind: 'script', path: '/stats', behaviours: ['delay:120'] },
        { kind: 'replace', open: 3, trim: 'none' },
        { kind: 'shutdown' },
      ],
      minOpenConnections: 1,
      drainDelayMs: 40,
      transport: 'tcp',
      extraListeners: 2_000,
      trim: 'none',
    },
  },
  {
    // Issue 38's final search beside two CPU burners (FUZZ_SEED=404, brisk; 1 of 6 brisk replays on an idle machine):
    // the drain pinned a process 27 ms old, read while no witness was open (the last one's process had just exited).
    // It was replaced; the successor counted our failed calls, so its counter outgrew the pinned one's by just what our
    // connections predict, and two of its polls passed for the pinned process's (I2). Now a read goes out only with a
    // witness connected (admin-client.ts witnessConnected), and a closed witness that spoke for the earlier read makes
    // any later read another process's, whatever its counter (identity.ts ProcessTrail.observe).
    name: 'a young pinned process replaced by one that counted our failed calls passed for it on its counter alone (I2)',
    foundAt: PACES.brisk,
    scenario: {
      steps: [
        { kind: 'pause', ms: 5 },
        { kind: 'connections', open: 2 },
        { kind: 'replace', open: 1, trim: 'none' },
        { kind: 'shutdown' },
        { kind: 'pause', ms: 161 },
        { kind: 'connections', open: 3 },
        { kind: 'replace', open: 2, trim: 'none' },
        { kind: 'script', path: '*', behaviours: ['status:404', 'reset', 'endless', 'delay:120'] },
        { kind: 'script', path: '*', behaviours: ['status:500', 'endless', 'status:500', 'answer'] },
        { kind: 'pause', ms: 194 },
        { kind: 'shutdown' },
      ],
      minOpenConnections: 1,
      drainDelayMs: 0,
      transport: 'tcp',
      extraListeners: 2_000,
      trim: 'none',
    },
  },
  {
    // Issue 38's idle search on the fixed code (FUZZ_SEED=603, the leisurely pace; 8 of 10 replays on the code before
    // it): Envoy exited and ended a drain "drained"; a new process started, its Unix socket path was then unlinked,
    // and a /shutdown got the ended drain's answer while the new process ran: its refusal was taken for "no Envoy".
    // Now a refusal while a witness is still held (the process holding it lives) drains again (supervisor.ts
    // drainIfNewProcess), and no read is sent without a witness connected (admin-client.ts witnessConnected).
    name: 'a /shutdown after an ended drain, refused by a new process whose socket path was unlinked, got the old "drained" (I3)',
    foundAt: PACES.leisurely,
    scenario: {
      steps: [
        { kind: 'reset-counters' },
        { kind: 'reset-counters' },
        { kind: 'shutdown' },
        { kind: 'stop' },
        { kind: 'shutdown' },
        { kind: 'script', path: '*', behaviours: ['endless'] },
        { kind: 'script', path: '/drain_listeners', behaviours: ['silent', 'delay:40', { kind: 'deep-json', depth: 100_000 }, 'delay:120'] },
        { kind: 'script', path: '*', behaviours: ['status:404', { kind: 'deep-json', depth: 100_000 }] },
        { kind: 'reset-counters' },
        { kind: 'shutdown' },
        { kind: 'restart', open: 2, trim: 'none' },
        { kind: 'socket-path', change: 'unlink' },
        { kind: 'parent-connections', open: 2 },
        { kind: 'parent-connections', open: 2 },
        { kind: 'shutdown' },
      ],
      minOpenConnections: 0,
      drainDelayMs: 0,
      transport: 'unix',
      extraListeners: 2_000,
      trim: 'none',
    },
  },
  {
    // Issue 38's idle search on the fixed code (FUZZ_SEED=707, brisk; 2 of 12 brisk replays on the code before, 0 of 30
    // since; identity.test.ts holds the rule itself deterministically): a hot restart, then a
    // replacement that bound the Unix socket path again, right at the drain's first read. That read was answered while
    // the witness it would have spoken through held the old socket (a path that names another one now), so no witness
    // spoke for it; its counters had just been reset (mark 1), and the successor's, grown by our witness's connect and
    // our calls, passed for it: "drained" on the successor's count (I2). Now only the counter tying an unwitnessed read
    // to a witnessed one is a doubt (identity.ts), drained as for both, held to its deadline.
    name: 'an unwitnessed first read after counters were reset, and a successor on a path bound again, passed for the pinned process: "drained" on its count (I2)',
    foundAt: PACES.brisk,
    scenario: {
      steps: [
        { kind: 'shutdown' },
        { kind: 'script', path: '/server_info', behaviours: [{ kind: 'deep-json', depth: 100_000 }, 'silent', 'delay:40', 'delay:120'] },
        { kind: 'reset-counters' },
        { kind: 'pause', ms: 9 },
        { kind: 'shutdown' },
        { kind: 'strangers', count: 12, style: 'pipeline' },
        { kind: 'parent-connections', open: 1 },
        { kind: 'hot-restart', open: 1, trim: 'none' },
        { kind: 'pause', ms: 6 },
        { kind: 'connections', open: 2 },
        { kind: 'replace', open: 0, trim: 'none' },
        { kind: 'shutdown' },
        { kind: 'shutdown' },
        { kind: 'sigterm' },
      ],
      minOpenConnections: 0,
      drainDelayMs: 0,
      transport: 'unix',
      extraListeners: 2_000,
      trim: 'none',
    },
  },
  {
    // The same search (FUZZ_SEED=206, the leisurely pace; reproduced only beside two CPU burners, 2 of 10 replays, none
    // since the fix): processes replaced and hot-restarted in turn, the restart epoch going down from a child's to a
    // new chain's 0; polls of the new chain's process passed for the pinned one's (I2). Fixed by the same rule.
    name: "a replacement of a lower restart epoch, after hot restarts and a trimmed admin counter, passed for the pinned process (I2)",
    foundAt: PACES.leisurely,
    scenario: {
      steps: [
        { kind: 'socket-path', change: 'file' },
        { kind: 'shutdown' },
        { kind: 'shutdown' },
        { kind: 'restart', open: 2, trim: 'none' },
        { kind: 'step-wall', ms: -3_600_000 },
        { kind: 'socket-path', change: 'unlink' },
        { kind: 'shutdown' },
        { kind: 'replace', open: 1, trim: 'admin-counter' },
        { kind: 'hot-restart', open: 3, trim: 'none' },
        { kind: 'replace', open: 1, trim: 'none' },
        { kind: 'wait' },
        { kind: 'pause', ms: 32 },
        { kind: 'shutdown' },
        { kind: 'sigterm' },
      ],
      minOpenConnections: 0,
      drainDelayMs: 0,
      transport: 'unix',
      extraListeners: 2_000,
      trim: 'none',
    },
  },
];

describe('the drain model: generated faults against the real sidecar', () => {
  test(`${RUNS} generated runs keep every invariant, each as written and at another pace`, { timeout: RUNS * 8_000 + 30_000 }, async () => {
    const heapBefore = process.memoryUsage().heapUsed;
    await fc.assert(
      fc.asyncProperty(scenarioArbitrary, fc.constantFrom(PACES.brisk, PACES.leisurely), async (scenario, pace) => {
        for (const each of [PACES['as written'], pace]) {
          const problems = problemsOf(await runScenario(scenario, each));
          assert.deepEqual(problems, [], `${JSON.stringify(scenario)} (${each.name})`);
        }
      }),
      { numRuns: RUNS, endOnFailure: true },
    );
    const grownMib = (process.memoryUsage().heapUsed - heapBefore) / 1024 / 1024;
    assert.ok(grownMib < 128, `I5: the heap grew by ${grownMib.toFixed(1)} MiB over ${RUNS} runs`);
  });

  // Each at two paces, as written and the one it broke at (brisk where it broke as written); ALL_PACES=1 runs all three.
  const pacesOf = (found: Pace | undefined): readonly Pace[] =>
    process.env['ALL_PACES'] === '1' ? ALL_PACES : [PACES['as written'], found === undefined || found === PACES['as written'] ? PACES.brisk : found];
  for (const { name, scenario, mustNotAnswer, foundAt } of KEPT) {
    test(`kept counterexample, at more than one pace: ${name}`, async () => {
      for (const pace of pacesOf(foundAt)) {
        const report = await runScenario(scenario, pace);
        assert.deepEqual(problemsOf(report), [], `at the ${pace.name} pace`);
        // Beyond the invariants, the answer the issue saw, to a /shutdown sent while the hot restart child (which holds
        // its connections throughout) ran. One sent before may be answered for the parent, drained before it.
        const children = new Set(report.hotRestarts.map(({ child }) => child));
        const wrong = report.calls.filter((call) => mustNotAnswer !== undefined && call.kind === 'shutdown' && children.has(call.processAtSend ?? -1) && mustNotAnswer.test(call.body ?? ''));
        assert.deepEqual(wrong.map((call) => call.body), [], `at the ${pace.name} pace, no /shutdown sent while the child ran may be answered ${String(mustNotAnswer)}`);
      }
    });
  }
});

describe('the drain model: its checks can fail', () => {
  test('negative control: a report doctored to say "drained" by another process\'s count, or too late, is caught', async () => {
    const report = await runScenario({
      steps: [{ kind: 'connections', open: 2 }, { kind: 'shutdown' }, { kind: 'pause', ms: 80 }, { kind: 'replace', open: 0 }, { kind: 'pause', ms: 100 }],
      minOpenConnections: 0,
      drainDelayMs: 0,
    });
    assert.deepEqual(problemsOf(report), []);
    const finished = report.log.find((line) => line.fields['event'] === 'drain_finished');
    assert.equal(finished?.fields['reason'], 'envoy-replaced', 'the real drain saw the new process');
    // As if the drain had counted the new process's 0 connections as the drained one's: a poll of the stats
    // answer that process 2 gave, and the drain ended on it.
    const newProcessRead = report.adminCalls.find((call) => call.path === '/stats' && call.processId === 2 && call.rendered !== undefined);
    assert.ok(newProcessRead?.rendered !== undefined && newProcessRead.answeredAt !== undefined && finished !== undefined, 'the new process was read, answered and the drain finished');
    const fakePoll = { ...finished, fields: { event: 'poll', admin_connections: newProcessRead.rendered.adminConnectionsTotal, open_connections: 0 } };
    const doctored = {
      ...report,
      log: report.log.flatMap((line) => (line === finished ? [fakePoll, { ...line, fields: { ...line.fields, reason: 'connections-closed' } }] : [line])),
    };
    assert.ok(problemsOf(doctored).some((problem) => problem.startsWith('I2: drained by the count of process 2, pinned to 1')), 'the doctored count is caught by I2');
    const late = { ...report, calls: report.calls.map((call) => ({ ...call, answeredAt: call.sentAt + 5_000 })) };
    assert.ok(problemsOf(late).some((problem) => problem.startsWith('I1:')), 'the late report is caught by I1');
  });
});
