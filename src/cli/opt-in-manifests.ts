/**
 * Offline `inject` without --manual: each pod template the webhook would inject gets its opt-in annotation
 * instead of the sidecar; the webhook injects the pods when they are created, in namespaces labelled for it
 * (named in notes when the input does not show them labelled). The template is first run through the same injector as the webhook, with a throwaway token, so that
 * what the webhook would deny (a bad annotation) or skip (no Envoy container, a Job without a native sidecar)
 * is said here, as `--manual` says it. A template injected offline before loses that injection (and with it
 * its token): the webhook draws a fresh one for every pod it creates.
 */
import type { V1Pod } from '@kubernetes/client-node';
import { ANNOTATIONS } from '../config/annotation-names.js';
import type { InjectionConfig } from '../config/webhook.js';
import { injectPod } from '../inject/injector.js';
import { uninjectPod } from '../inject/uninjector.js';
import { editManifests, skippedStatus, type InjectedManifests, type SourceName, type TemplateEdit } from './manifests.js';
import { isOptedIn, labelCommand, namespaceName, namespaceOptIn, OPT_IN_KEY, withOptIn } from './opt-in.js';

/** Never written anywhere: the injector needs a token to build the pod that is then thrown away. */
const DRY_RUN_TOKEN = 'dry-run';

export interface OptInManifests extends InjectedManifests {
  /** The namespaces of the templates left to the webhook (those that name one). */
  readonly workloadNamespaces: ReadonlySet<string>;
  /** Templates left to the webhook that name no namespace. */
  readonly unnamespaced: number;
  /** Namespaces in the input that carry the opt-in label. */
  readonly labelled: ReadonlySet<string>;
  /** Namespaces in the input labelled with another value: the webhook injects none of their pods. */
  readonly optedOut: ReadonlySet<string>;
}

export function optInManifests(text: string, config: InjectionConfig, source: SourceName = 'stdin'): OptInManifests {
  const tally = { templates: 0, selected: 0, injected: 0, upToDate: 0 };
  const workloadNamespaces = new Set<string>();
  const labelled = new Set<string>();
  const optedOut = new Set<string>();
  let unnamespaced = 0;
  const edited = editManifests(
    text,
    (template, _workload, namespace) => {
      const { edit, selected } = optInEdit(template, config);
      tally.templates += 1;
      if (selected) tally.selected += 1;
      if (edit.action === 'change') tally.injected += 1;
      if (edit.action === 'keep' && edit.status === ALREADY) tally.upToDate += 1;
      if (edit.action === 'change' || (edit.action === 'keep' && edit.status === ALREADY)) {
        if (namespace === undefined) unnamespaced += 1;
        else workloadNamespaces.add(namespace);
      }
      return edit;
    },
    source,
    {
      namespace: (object) => {
        const optIn = namespaceOptIn(object);
        if (optIn === 'in') labelled.add(namespaceName(object));
        if (optIn === 'out') optedOut.add(namespaceName(object));
      },
    },
  );
  return { ...edited, tally, workloadNamespaces, unnamespaced, labelled, optedOut };
}

const ALREADY = 'unchanged (already left to the webhook)';

/** What becomes of one template, and whether it matched --pod-selector (for the "nothing injected" note). */
function optInEdit(template: V1Pod, config: InjectionConfig): { edit: TemplateEdit; selected: boolean } {
  const injectedHere = template.metadata?.annotations?.[ANNOTATIONS.status] !== undefined;
  const removed = injectedHere ? uninjectPod(template) : undefined;
  if (removed?.action === 'refuse') return { edit: removed, selected: true };
  const bare = removed?.action === 'uninject' ? removed.pod : template;
  const outcome = injectPod(bare, config, DRY_RUN_TOKEN);
  switch (outcome.action) {
    case 'deny':
      return { edit: { action: 'refuse', message: outcome.message }, selected: true };
    case 'skip': {
      const status = skippedStatus(outcome.reason, outcome.warnings.length > 0, config);
      return { edit: { action: 'keep', warnings: outcome.warnings, status }, selected: outcome.reason !== 'not-selected' };
    }
    case 'inject': {
      const warnings = [...(removed?.action === 'uninject' ? removed.warnings : []), ...outcome.warnings];
      if (!injectedHere && isOptedIn(template.metadata?.annotations?.[OPT_IN_KEY])) {
        return { edit: { action: 'keep', warnings, status: ALREADY }, selected: true };
      }
      const status = injectedHere ? 'annotated (offline injection and its token removed; the webhook injects it)' : 'annotated (the webhook injects it)';
      return { edit: { action: 'change', pod: withOptIn(bare), warnings, status }, selected: true };
    }
  }
}

/**
 * The notes after the summary: the webhook injects only in labelled namespaces, so each namespace of a
 * template left to it that the input does not show labelled is named, with the command that labels it.
 */
export function namespaceNotes(results: readonly OptInManifests[]): string[] {
  const all = (pick: (result: OptInManifests) => ReadonlySet<string>): Set<string> => new Set(results.flatMap((result) => [...pick(result)]));
  const labelled = all((result) => result.labelled);
  const optedOut = all((result) => result.optedOut);
  const named = [...all((result) => result.workloadNamespaces)].sort();
  const notes = named
    .filter((name) => !labelled.has(name))
    .map((name) =>
      optedOut.has(name)
        ? `namespace ${name} is labelled ${OPT_IN_KEY} with another value than enabled: the webhook injects none of its pods`
        : `the webhook injects only in namespaces labelled ${OPT_IN_KEY}=enabled: unless ${name} is, ${labelCommand(name)} (or add the label to its manifest)`,
    );
  const unnamespaced = results.reduce((sum, result) => sum + result.unnamespaced, 0);
  if (unnamespaced > 0) {
    notes.push(`${unnamespaced} pod template(s) name no namespace: the one they are applied to must be labelled ${OPT_IN_KEY}=enabled for the webhook to inject them`);
  }
  return notes;
}
