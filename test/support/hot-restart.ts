/** A hot restart of an emulator in a test (src/emulator/hot-restart.ts), whose child is stopped when the test ends. */
import type { TestContext } from 'node:test';
import type { EnvoyEmulator, HotRestartedChild } from '../../src/emulator/envoy-emulator.js';

export async function hotRestarted(t: TestContext, parent: EnvoyEmulator): Promise<HotRestartedChild> {
  const child = await parent.hotRestart();
  t.after(async () => {
    if (child.process.exitCode !== null || child.process.signalCode !== null) return;
    const exited = new Promise((resolve) => child.process.once('exit', resolve));
    child.process.kill('SIGTERM');
    await exited;
  });
  return child;
}
