/** What a command reads and writes: the process's own streams, or a test's. */
export interface CommandIo {
  readonly stdin: NodeJS.ReadableStream;
  readonly stdout: NodeJS.WritableStream;
  readonly stderr: NodeJS.WritableStream;
  readonly env: NodeJS.ProcessEnv;
}

/** The process's streams and environment. stdin is looked up only by a command that reads it. */
export function processIo(): CommandIo {
  return {
    get stdin() {
      return process.stdin;
    },
    stdout: process.stdout,
    stderr: process.stderr,
    env: process.env,
  };
}
