/**
 * Envoy's own drain flags. `/healthcheck/fail` drain-closes connections at once only on listeners whose drain
 * type is DEFAULT; on MODIFY_ONLY listeners (Envoy Gateway's) and under `drain_listeners`, Envoy's
 * `--drain-strategy` (default gradual) and `--drain-time-s` (default 600) decide, and with the defaults part of
 * the keep-alive clients are still connected at the sidecar's deadline and are cut. Istio, MARIN3R and Envoy
 * Gateway start Envoy with `--drain-strategy immediate` and a drain time that fits the grace period; so does
 * the injector, when it can tell that the container runs Envoy itself and the flags are absent.
 */
import type { V1Container } from '@kubernetes/client-node';
import type { PodDrainValues } from '../config/drain.js';
import { formatDuration } from '../config/duration.js';
import { parseImageReference } from '../config/image-reference.js';
import { hasSkipExit, parseEnvoyVersion, type EnvoyVersion } from '../envoy/version.js';

const DRAIN_STRATEGY_FLAG = '--drain-strategy';
const DRAIN_TIME_FLAG = '--drain-time-s';

/** Envoy's defaults, in force when a flag is absent. */
const ENVOY_DEFAULT_STRATEGY = 'gradual';
const ENVOY_DEFAULT_DRAIN_TIME_S = 600;

export type EnvoyDrainFlagsDecision =
  /** `args` is the container's new args: its own, then the flags. */
  | { readonly action: 'add'; readonly args: readonly string[] }
  /** Envoy's args stay as they are; each warning (short, for kubectl) says what may go wrong. */
  | { readonly action: 'keep'; readonly warnings: readonly string[] };

/** The flags the injector adds: the drain time is the sidecar's deadline, rounded up to whole seconds. */
function envoyDrainFlags(plan: PodDrainValues): string[] {
  // Separate elements, never `--drain-time-s=290`: Envoy's parser (TCLAP, delimiter ' ') knows no `=` form.
  return [DRAIN_STRATEGY_FLAG, 'immediate', DRAIN_TIME_FLAG, String(drainTimeSeconds(plan))];
}

function drainTimeSeconds(plan: PodDrainValues): number {
  return Math.ceil(plan['drain-timeout'] / 1000);
}

/**
 * Adds the flags when neither is present and the container runs Envoy directly; when either is present
 * the user manages Envoy's drain, so the args are left alone and only checked against the plan.
 */
export function decideEnvoyDrainFlags(container: V1Container, plan: PodDrainValues): EnvoyDrainFlagsDecision {
  const present = presentDrainFlags([...(container.command ?? []), ...(container.args ?? [])]);
  if (present !== undefined) return { action: 'keep', warnings: disagreements(present, plan, imageRelease(container.image)) };
  if (runsEnvoyDirectly(container)) return { action: 'add', args: [...(container.args ?? []), ...envoyDrainFlags(plan)] };
  const wanted = envoyDrainFlags(plan).join(' ');
  return { action: 'keep', warnings: [`cannot tell if "${container.name}" runs envoy: add ${wanted} yourself`] };
}

/**
 * Whether the container's process is Envoy with the container's args as its own, so that appending to
 * `args` reaches Envoy: its command is envoy; or, without a command, its first arg is envoy; or, without a
 * command, its args start with a flag and the image is Envoy's, whose entrypoint then prepends `envoy`
 * (docker-entrypoint.sh; the distroless image's entrypoint is envoy itself). Without command and args the
 * image's default command runs, which the pod spec does not show: not appended to.
 */
function runsEnvoyDirectly(container: V1Container): boolean {
  const command = container.command ?? [];
  const args = container.args ?? [];
  if (command.length > 0) return isEnvoyExecutable(command[0] as string);
  if (args.length === 0) return false;
  const first = args[0] as string;
  return isEnvoyExecutable(first) || (first.startsWith('-') && isEnvoyImage(container.image));
}

function isEnvoyExecutable(path: string): boolean {
  return path.trim().split('/').at(-1) === 'envoy';
}

/** envoyproxy/envoy and its variants (envoy-distroless, envoy-contrib, envoy-dev), from any registry or mirror. */
function isEnvoyImage(image: string | undefined): boolean {
  const name = parseImageReference(image ?? '').repository.split('/').at(-1) ?? '';
  return name === 'envoy' || name.startsWith('envoy-');
}

interface PresentFlags {
  /** Raw values; undefined when the flag is absent (or has no value). */
  readonly strategy: string | undefined;
  readonly drainTime: string | undefined;
}

/**
 * The drain flags found anywhere in command and args, or undefined when neither is there. Each element is
 * split on whitespace: Envoy also takes `--drain-time-s 600` as one element (Contour writes its flags so),
 * and a shell wrapper (`sh -c "envoy ... --drain-time-s 600"`) holds them inside one string. `--flag=value`
 * is recognised too, as the user clearly meant it (Envoy itself would refuse it).
 */
function presentDrainFlags(argv: readonly string[]): PresentFlags | undefined {
  // Most pods have neither flag: splitting every element of their command and args would be wasted.
  if (!argv.some((element) => element.includes(DRAIN_STRATEGY_FLAG) || element.includes(DRAIN_TIME_FLAG))) return undefined;
  const tokens = argv.flatMap((element) => element.trim().split(/\s+/)).filter((token) => token !== '');
  const valueOf = (flag: string): { found: boolean; value: string | undefined } => {
    for (let i = 0; i < tokens.length; i += 1) {
      const token = tokens[i] as string;
      if (token === flag) return { found: true, value: unquote(tokens[i + 1]) };
      if (token.startsWith(`${flag}=`)) return { found: true, value: unquote(token.slice(flag.length + 1)) };
    }
    return { found: false, value: undefined };
  };
  const strategy = valueOf(DRAIN_STRATEGY_FLAG);
  const drainTime = valueOf(DRAIN_TIME_FLAG);
  if (!strategy.found && !drainTime.found) return undefined;
  return { strategy: strategy.value, drainTime: drainTime.value };
}

function unquote(value: string | undefined): string | undefined {
  return value?.replace(/^(['"])(.*)\1$/, '$2');
}

/**
 * What in Envoy's own flags works against the plan (a flag left out is Envoy's default). Values that
 * cannot be read here (`$(DRAIN_TIME)`, a typo that Envoy will refuse at start) are not judged.
 */
function disagreements(present: PresentFlags, plan: PodDrainValues, release: EnvoyVersion | null): string[] {
  const strategy = present.strategy ?? ENVOY_DEFAULT_STRATEGY;
  const drainTimeS =
    present.drainTime === undefined ? ENVOY_DEFAULT_DRAIN_TIME_S : /^\d+$/.test(present.drainTime) ? Number(present.drainTime) : undefined;
  if (drainTimeS === undefined) return [];
  const warnings: string[] = [];
  // drain_listeners is sent after drain-delay: the gradual drain must be over by the deadline from there.
  const leftMs = plan['drain-timeout'] - plan['drain-delay'];
  if (strategy === 'gradual' && drainTimeS * 1000 > leftMs) {
    warnings.push(
      `Envoy's gradual ${DRAIN_TIME_FLAG} ${drainTimeS} outlasts the ${formatDuration(leftMs)} left: use ${DRAIN_STRATEGY_FLAG} immediate`,
    );
  }
  // Before 1.29 (no skip_exit) Envoy closes the drained listeners after its drain time: load balancers still
  // sending get refused. From 1.29 the sidecar's drain_listeners?graceful&skip_exit keeps them open.
  if (drainTimeS * 1000 < plan['check-delay'] && (release === null || !hasSkipExit(release))) {
    const which = release === null ? 'before Envoy 1.29, ' : '';
    warnings.push(
      `Envoy's ${DRAIN_TIME_FLAG} ${drainTimeS} < check-delay ${formatDuration(plan['check-delay'])}: ${which}listeners close while ${release === null ? 'LBs' : 'load balancers'} still send`,
    );
  }
  return warnings;
}

/**
 * Envoy's release from its image tag, when the tag names one (`envoyproxy/envoy:v1.39.0`,
 * `envoy:distroless-v1.35.8`, `envoy-contrib:contrib-v1.36.2`, also beside a digest: `envoy:v1.39.0@sha256:…`);
 * null for `latest`, a digest without a tag or a tag of one's own.
 */
export function imageRelease(image: string | undefined): EnvoyVersion | null {
  const tag = parseImageReference(image ?? '').tag;
  const release = tag === undefined ? undefined : /(?:^|-)v?(\d+\.\d+\.\d+)$/.exec(tag)?.[1];
  return release === undefined ? null : parseEnvoyVersion(release);
}
