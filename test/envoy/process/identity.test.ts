import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { MarkTrust, ProcessTrail, holderEpochOf, witnessVouches, type ReadEvidence } from '../../../src/envoy/process/identity.js';
import { ScriptedEnvoy } from '../../support/scripted-envoy.js';

/**
 * One read as the admin client sends it: expected before its socket is created, observed once answered. Our
 * connections are the scripted Envoy's (each one answered), the marks and the witness's evidence the test's own.
 */
function read(trail: ProcessTrail, own: ScriptedEnvoy, mark: number, seen: ReadEvidence) {
  const expected = trail.expect();
  own.connect();
  return trail.observe(mark, expected, seen);
}

/** What a read's witness showed; `createdAtSend`: the witnesses made when it was sent (by default all of them). */
function evidence(witness: number | null, closedThrough: number, created: number, restartEpoch: number | null = 0, createdAtSend = created): ReadEvidence {
  return { witness, closedThrough, created, createdAtSend, restartEpoch, closed: [] };
}

/** A trail whose marks are proved to follow our connections, with a first read of mark 10 that witness 1 spoke for. */
function verifiedTrail() {
  const own = new ScriptedEnvoy();
  const trust = new MarkTrust();
  trust.verified = true;
  const trail = new ProcessTrail(own, trust);
  assert.equal(read(trail, own, 10, evidence(1, 0, 1)), 'first');
  return { own, trail };
}

describe('ProcessTrail: which process answered', () => {
  test('the witness held across both reads: the same process, and a counter that went down is a reset', () => {
    const { own, trail } = verifiedTrail();
    assert.equal(read(trail, own, 11, evidence(1, 0, 1)), 'same');
    assert.equal(read(trail, own, 2, evidence(1, 0, 1)), 'reset');
  });

  test('the witness that spoke for the earlier read closed by the other end: another process, whatever its counter (FUZZ_SEED=404)', () => {
    const { own, trail } = verifiedTrail();
    own.connect(2);
    // A young successor that took our two failed calls and this read: its counter outgrew the pinned process's by just
    // what our connections predict.
    assert.equal(read(trail, own, 10 + 3, evidence(2, 1, 2)), 'replaced');
  });

  test('control: the same growth with the witness still open is the same process', () => {
    const { own, trail } = verifiedTrail();
    own.connect(2);
    assert.equal(read(trail, own, 10 + 3, evidence(1, 0, 1)), 'same');
  });

  test('before marks are proved to follow our connections, a closed witness is a doubt, never "same"', () => {
    const own = new ScriptedEnvoy();
    const trail = new ProcessTrail(own, new MarkTrust());
    read(trail, own, 10, evidence(1, 0, 1));
    assert.equal(read(trail, own, 12, evidence(2, 1, 2)), 'doubtful');
  });

  test('an earlier read no witness spoke for, while one speaks for this one: a counter that grew enough is a doubt, never "same" (FUZZ_SEED=707); a hot restart child\'s epoch ties them', () => {
    const own = new ScriptedEnvoy();
    const trust = new MarkTrust();
    trust.verified = true;
    const trail = new ProcessTrail(own, trust);
    // The earlier read: counters reset (mark 1), its process not the one holding witness 1 (a path bound again).
    assert.equal(read(trail, own, 1, evidence(null, 0, 1)), 'first');
    own.connect(2);
    assert.equal(read(trail, own, 1 + 3 + 1, evidence(2, 1, 2)), 'doubtful', "a successor that counted our witness's connect and our calls");
    // Control: a read sent before witnesses were kept (the start-up probe that begins them answered meanwhile) is no
    // doubt: nothing was amiss then, and the counter ties it as it did before witnesses.
    const early = new ProcessTrail(own, trust);
    assert.equal(read(early, own, 3, evidence(null, 0, 1, 0, 0)), 'first');
    assert.equal(read(early, own, 4, evidence(1, 0, 1)), 'same');
    // Control: a hot restart child (epoch 1) is tied by its epoch, and followed on its counter.
    const child = new ProcessTrail(own, trust);
    assert.equal(read(child, own, 3, evidence(null, 0, 2, 1)), 'first');
    assert.equal(read(child, own, 4, evidence(3, 0, 3, 1)), 'same');
  });

  test('a restart epoch that changes is another process: a hot restart child at once, a new chain on the witness\'s evidence', () => {
    const { own, trail } = verifiedTrail();
    assert.equal(read(trail, own, 50, evidence(null, 0, 1, 1)), 'replaced', 'a higher epoch: a hot restart child');
    const second = verifiedTrail();
    assert.equal(read(second.trail, second.own, 50, evidence(null, 0, 1, null)), 'doubtful', 'the gauge gone, the witness not closed');
  });
});

describe('holderEpochOf and witnessVouches: a witness speaks only for its holder\'s reads', () => {
  test('settled when the reads around its connect agree, or the later is a new chain\'s 0; else ambiguous', () => {
    assert.equal(holderEpochOf(1, 1), 1);
    assert.equal(holderEpochOf(2, 0), 0);
    assert.equal(holderEpochOf(0, 1), 'ambiguous');
    assert.equal(holderEpochOf(undefined, null), null);
    assert.equal(witnessVouches(1, 1), true);
    assert.equal(witnessVouches(0, 1), false, "a hot restart child's read, the parent holding the witness");
    assert.equal(witnessVouches('ambiguous', 0), false);
    assert.equal(witnessVouches(null, 0), false, 'the gauge appeared: another process');
  });
});
