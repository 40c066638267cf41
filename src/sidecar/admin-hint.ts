/** How to fix an Envoy admin API that cannot be reached: the one sentence the probe and the drain both log. */
import { ANNOTATIONS } from '../config/annotation-names.js';

/** The pod annotation that sets the sidecar's --admin-port (Envoy Gateway's admin is 19000, Istio's 15000). */
export const ADMIN_PORT_ANNOTATION = ANNOTATIONS.envoyAdminPort;

export function adminPortHint(address: string): string {
  return `is Envoy's admin API really at ${address}? Set the pod annotation ${ADMIN_PORT_ANNOTATION} (flag --admin-port) to the port of Envoy's admin listener`;
}
