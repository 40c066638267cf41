/**
 * Container image references as Kubernetes takes them: `[registry[:port]/]path[:tag][@algorithm:digest]`.
 * A release pins the image by digest, keeping the tag for people to read (`repo:0.1.0@sha256:…`); the runtime
 * pulls by the digest and ignores the tag. Anything that reads a tag or a repository out of an image string
 * reads it here, so that a digest's own `:` or a registry's port is never taken for a tag.
 */
export interface ImageReference {
  /** Everything before the tag and digest: registry, port and path (`localhost:5000/envoy`). */
  readonly repository: string;
  readonly tag: string | undefined;
  /** `sha256:<hex>`, when the reference is pinned. */
  readonly digest: string | undefined;
}

export function parseImageReference(reference: string): ImageReference {
  const at = reference.indexOf('@');
  const name = at === -1 ? reference : reference.slice(0, at);
  const digest = at === -1 ? undefined : reference.slice(at + 1);
  // A tag's colon comes after the last slash; a colon before it is a registry's port.
  const colon = name.lastIndexOf(':');
  const hasTag = colon > name.lastIndexOf('/');
  return { repository: hasTag ? name.slice(0, colon) : name, tag: hasTag ? name.slice(colon + 1) : undefined, digest };
}

/**
 * Whether two references certainly name the same image: the same repository and, when both are pinned, the same
 * digest (whatever their tags say); when neither is, the same tag (none meaning `latest`, as the runtime reads it).
 * A pinned reference and a tag-only one are not the same: the tag may have been pushed again since.
 */
export function sameImage(a: string, b: string): boolean {
  const [left, right] = [parseImageReference(a), parseImageReference(b)];
  if (left.repository !== right.repository) return false;
  if (left.digest !== undefined || right.digest !== undefined) return left.digest === right.digest;
  return (left.tag ?? 'latest') === (right.tag ?? 'latest');
}
