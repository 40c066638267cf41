/** `npm run bench`: every figure the project reports, each against a floor or as sequential timings. */
import { runWebhookBench } from './webhook.js';

await runWebhookBench();
try {
  const { runSidecarBench } = await import('./sidecar.js');
  await runSidecarBench();
} catch (error) {
  if ((error as NodeJS.ErrnoException).code !== 'ERR_MODULE_NOT_FOUND') throw error;
}
