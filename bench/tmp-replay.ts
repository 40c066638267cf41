import { readFileSync } from 'node:fs';
import { problemsOf, runScenario } from '../test/support/drain-model.js';
for (const line of readFileSync(process.argv[2] ?? '', 'utf8').split('\n').filter(Boolean)) {
  for (let i = 0; i < Number(process.argv[3] ?? 3); i++) {
    const report = await runScenario(JSON.parse(line));
    const reasons = report.log.filter((l) => l.fields['event'] === 'drain_finished').map((l) => l.fields['reason']);
    console.log(JSON.stringify(reasons), problemsOf(report));
  }
}
