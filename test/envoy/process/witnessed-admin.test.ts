import assert from 'node:assert/strict';
import { describe, test, type TestContext } from 'node:test';
import { EnvoyEmulator } from '../../../src/emulator/envoy-emulator.js';
import { AdminRefusedError } from '../../../src/envoy/admin-errors.js';
import { WitnessedAdminClient } from '../../../src/envoy/process/witnessed-admin.js';
import { freePorts } from '../../support/ports.js';
import { waitUntil } from '../../support/wait.js';

/** An emulated Envoy and a client of its admin API; `adminPort` for a successor that binds the same port. */
async function envoyAndClient(t: TestContext, adminPort?: number): Promise<{ envoy: EnvoyEmulator; client: WitnessedAdminClient }> {
  const envoy = await EnvoyEmulator.start(adminPort === undefined ? {} : { adminPort });
  t.after(() => envoy.close());
  const client = new WitnessedAdminClient({ address: '127.0.0.1', port: envoy.ports.admin, timeoutMs: 1_000 });
  t.after(() => client.close());
  return { envoy, client };
}

describe('WitnessedAdminClient', () => {
  test('once witnesses are kept, a read goes out only with one connected: the first read of a successor is witnessed (FUZZ_SEED=404)', { timeout: 10_000 }, async (t) => {
    const [adminPort] = (await freePorts(1)) as [number];
    const { envoy: first, client } = await envoyAndClient(t, adminPort);
    await client.countOpenConnections();
    await client.countOpenConnections();
    const held = await client.countOpenConnections();
    assert.notEqual(held.evidence.witness, null, 'the third read is witnessed');
    await first.close();
    await waitUntil(() => client.witnessEvidence().closedThrough >= (held.evidence.witness ?? 0), 2_000, 'the exit closes the witness');
    const successor = await EnvoyEmulator.start({ adminPort });
    t.after(() => successor.close());
    // Read at once: the witness the exit closed is not open again yet, and nothing else ties this read to a process.
    const read = await client.countOpenConnections();
    assert.notEqual(read.evidence.witness, null, "the successor's first read is sent with a witness connected to it");
    assert.ok(read.evidence.witness! > held.evidence.witness!, 'a new witness, not the closed one');
  });

  test('no witness before the address proved to be Envoy: one-off calls and a wrong address leave no connection behind', async (t) => {
    const { client } = await envoyAndClient(t);
    const first = await client.countOpenConnections();
    assert.equal(first.evidence.created, 0, 'the first read opens no witness');
    await client.serverState();
    assert.equal(client.witnessEvidence().created, 1, "GET /ready's answer proves the address: one witness is opened");
    await waitUntil(() => client.witnessEvidence().witness !== null, 2_000, 'the witness connects');
    const read = await client.countOpenConnections();
    assert.equal(read.evidence.witness, 1, 'the read is spoken for by the witness opened after /ready');
  });

  test('a refusal carries the witness evidence: the process that held the witness closed it as it exited', { timeout: 10_000 }, async (t) => {
    const { envoy, client } = await envoyAndClient(t);
    await client.countOpenConnections();
    const held = await client.countOpenConnections();
    await waitUntil(() => client.witnessEvidence().witness !== null, 2_000, 'the witness connects');
    await envoy.close();
    await waitUntil(() => client.witnessEvidence().lastClosed, 2_000, 'the exit closes the witness');
    const refusal = await client.failHealthChecks().then(
      () => assert.fail('a closed admin port refuses'),
      (error: unknown) => error,
    );
    assert.ok(refusal instanceof AdminRefusedError, `refused, got ${String(refusal)}`);
    assert.equal(refusal.evidence?.lastClosed, true, 'the evidence says the last witness was closed by the other end');
    assert.ok((refusal.evidence?.created ?? 0) > (held.evidence.createdAtSend ?? 0), 'a witness was created after the second read');
  });
});
