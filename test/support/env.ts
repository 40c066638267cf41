/** The environment for a spawned process under test: the caller's, minus any SHUTDOWN_MANAGER_* it happens to set. */
export function cleanEnvironment(extra: Readonly<Record<string, string>> = {}): NodeJS.ProcessEnv {
  const inherited = Object.entries(process.env).filter(([name]) => !name.startsWith('SHUTDOWN_MANAGER_'));
  return { ...Object.fromEntries(inherited), NODE_OPTIONS: '', ...extra };
}
