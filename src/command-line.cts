/**
 * How a command line names its mode, read the same way by the image's entry point (entry.cts) and by main.ts:
 * `inject` first is the offline command, whose arguments are all its own; otherwise the first `mode=` argument,
 * wherever it stands, names the mode, and the others are the mode's. CommonJS, so that entry.cts can require it
 * without Node's ES module loader.
 */
function splitModeArgument(args: readonly string[]): { readonly modeArg: string | undefined; readonly rest: string[] } {
  const index = args[0] === 'inject' ? -1 : args.findIndex((arg) => arg.startsWith('mode='));
  return { modeArg: args[index], rest: args.filter((_arg, at) => at !== index) };
}

export = { splitModeArgument };
