/** The default bounds of the sidecar's port (src/sidecar/server/connection-limits.ts), from the process's open-file limit. */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { defaultConnectionLimits, openFilesSoftLimit } from '../../src/sidecar/server/connection-limits.js';

describe('default connection limits', () => {
  test('at most 512 connections, fewer under a low open-file limit, never below 8', () => {
    assert.deepEqual(defaultConnectionLimits(1_024), {
      requestWithinMs: 5_000,
      maxConnections: 512,
      maxRequestsInFlight: 4,
      maxUnflushedBytes: 32 * 1024,
      writeWithinMs: 5_000,
    });
    assert.equal(defaultConnectionLimits(1_048_576).maxConnections, 512);
    assert.equal(defaultConnectionLimits(undefined).maxConnections, 512);
    assert.equal(defaultConnectionLimits(256).maxConnections, 192);
    assert.equal(defaultConnectionLimits(40).maxConnections, 8);
  });

  test("the soft open-file limit is read from /proc's limits format; unlimited or unreadable is undefined", (t) => {
    const directory = mkdtempSync(join(tmpdir(), 'limits-'));
    t.after(() => rmSync(directory, { recursive: true, force: true }));
    const limitsFile = (openFiles: string): string => {
      const path = join(directory, `limits-${openFiles.replace(/\W/g, '')}`);
      writeFileSync(
        path,
        'Limit                     Soft Limit           Hard Limit           Units     \n' +
          'Max processes             unlimited            unlimited            processes \n' +
          `Max open files            ${openFiles}            files     \n` +
          'Max locked memory         8388608              8388608              bytes     \n',
      );
      return path;
    };
    assert.equal(openFilesSoftLimit(limitsFile('1024                 524288')), 1_024);
    assert.equal(openFilesSoftLimit(limitsFile('unlimited            unlimited')), undefined);
    assert.equal(openFilesSoftLimit(join(directory, 'absent')), undefined);
  });
});
