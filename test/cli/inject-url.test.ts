/**
 * `inject` and `uninject` read a manifest from an http(s) URL, as kubectl -f and Linkerd's inject do (issue 35:
 * `inject https://...` was ENOENT): through the built CLI against a real HTTP server on loopback.
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { MAX_URL_BYTES } from '../../src/cli/input.js';
import { runBuiltEntry } from '../support/process.js';

const MANIFEST = await readFile(new URL('../fixtures/manifests/mixed.yaml', import.meta.url), 'utf8');

let server: http.Server;
let base: string;

before(async () => {
  server = http.createServer((request, response) => {
    if (request.url === '/edge.yaml') return void response.writeHead(200, { 'content-type': 'application/yaml' }).end(MANIFEST);
    if (request.url === '/moved') return void response.writeHead(302, { location: '/edge.yaml' }).end();
    if (request.url === '/huge') {
      response.writeHead(200, { 'content-type': 'application/yaml' });
      const chunk = Buffer.alloc(1024 * 1024, 0x61);
      for (let sent = 0; sent <= MAX_URL_BYTES; sent += chunk.length) response.write(chunk);
      return void response.end();
    }
    response.writeHead(404, { 'content-type': 'text/plain' }).end('not found');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

after(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

describe('inject and uninject read a URL', () => {
  test('inject URL: the manifest fetched, marked for the webhook, named by its URL in the summary; a redirect is followed', async () => {
    for (const path of ['/edge.yaml', '/moved']) {
      const run = await runBuiltEntry(['inject', `${base}${path}`], { timeoutMs: 15_000 });
      assert.equal(run.code, 0, run.stderr);
      assert.match(run.stdout, /shutdown-manager\.io\/inject: enabled/);
      assert.match(run.stderr, /deployment "edge\/envoy" annotated \(the webhook injects it\)/);
      assert.ok(run.stderr.includes(`note: ${base}${path}: document 5`), 'notes name the URL as they name a file');
    }
    const back = await runBuiltEntry(['uninject', '-f', `${base}/edge.yaml`], { timeoutMs: 15_000 });
    assert.equal(back.code, 0, back.stderr);
  });

  test('a 404, a refused connection and an answer past the size bound: one line naming the URL and why, exit 1', async () => {
    // A port nothing listens on: one just freed (fetch refuses the ports browsers block, such as 1).
    const closed = http.createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const closedPort = (closed.address() as AddressInfo).port;
    await new Promise((resolve) => closed.close(resolve));
    const cases: [string, RegExp][] = [
      [`${base}/missing.yaml`, /cannot read http:\/\/127\.0\.0\.1:\d+\/missing\.yaml: the server answered 404 Not Found$/],
      [`http://127.0.0.1:${closedPort}/edge.yaml`, /cannot read http:\/\/127\.0\.0\.1:\d+\/edge\.yaml: .*ECONNREFUSED/],
      [`${base}/huge`, /cannot read http:\/\/127\.0\.0\.1:\d+\/huge: larger than 16 MiB: not a manifest to inject$/],
    ];
    for (const [url, message] of cases) {
      const run = await runBuiltEntry(['inject', url], { timeoutMs: 15_000 });
      assert.equal(run.code, 1, `${url}: ${run.stderr}`);
      assert.equal(run.stdout, '', 'nothing written');
      assert.match(run.stderr.trim(), message);
      assert.doesNotMatch(run.stderr, /\n {4}at /, 'no stack trace');
    }
  });
});
