/**
 * The process a hot-restarting emulator forks (hot-restart.ts): it waits for its options and its parent's two
 * listen sockets on the IPC channel, asks the parent to shut its admin down, binds the admin address, reports
 * its ports, and runs until it exits (SIGTERM, /quitquitquit) like any emulator.
 */
import type net from 'node:net';
import { EnvoyEmulator } from './envoy-emulator.js';
import type { HotRestartMessage } from './hot-restart.js';

const channel = process;
if (channel.send === undefined) {
  process.stderr.write('hot-restart-child: run by the parent emulator (fork with an IPC channel), not by hand\n');
  process.exit(2);
}
const send = (message: HotRestartMessage): void => {
  if (channel.connected) channel.send?.(message);
};

async function received(): Promise<{ options: Record<string, unknown>; http: net.Server; tcp: net.Server }> {
  return new Promise((resolve) => {
    const got: { options?: Record<string, unknown>; http?: net.Server; tcp?: net.Server } = {};
    const onMessage = (message: HotRestartMessage, handle: unknown): void => {
      if (message.type === 'options') got.options = message.options as Record<string, unknown>;
      if (message.type === 'listen-socket') got[message.listener] = handle as net.Server;
      if (got.options !== undefined && got.http !== undefined && got.tcp !== undefined) {
        channel.off('message', onMessage);
        resolve({ options: got.options, http: got.http, tcp: got.tcp });
      }
    };
    channel.on('message', onMessage);
  });
}

function parentAdminClosed(): Promise<void> {
  return new Promise((resolve) => {
    const onMessage = (message: HotRestartMessage): void => {
      if (message.type !== 'parent-admin-closed') return;
      channel.off('message', onMessage);
      resolve();
    };
    channel.on('message', onMessage);
    send({ type: 'shutdown-parent-admin' });
  });
}

async function start(): Promise<EnvoyEmulator> {
  const { options, http, tcp } = await received();
  return EnvoyEmulator.startHotRestartChild(options, { http, tcp }, channel, parentAdminClosed);
}

try {
  const emulator = await start();
  process.once('SIGTERM', () => void emulator.close());
  // A parent that goes away before this child terminated it crashed, or was a test process that ended without
  // stopping this child: an emulator must not outlive its test (real Envoy would go on serving).
  channel.once('disconnect', () => {
    if (!emulator.terminatedParent) void emulator.close();
  });
  void emulator.exited.then(() => process.exit(0));
  send({ type: 'child-ready', pid: process.pid, ports: emulator.ports });
} catch (error) {
  send({ type: 'child-failed', message: error instanceof Error ? error.message : String(error) });
  process.exit(1);
}
