/** How to fix an Envoy admin API that cannot be reached: the one sentence the probe and the drain both log. */
import { ANNOTATIONS } from '../config/annotation-names.js';
import { UNIX_ADDRESS_PREFIX } from '../config/values.js';

/** The pod annotation that sets the sidecar's --admin-port (Envoy Gateway's admin is 19000, Istio's 15000). */
export const ADMIN_PORT_ANNOTATION = ANNOTATIONS.envoyAdminPort;

/** `address`: the client's, `host:port` or `unix:/path`. */
export function adminPortHint(address: string): string {
  if (address.startsWith(UNIX_ADDRESS_PREFIX)) {
    return `is Envoy's admin API really on the socket ${address}? Set the pod annotation ${ANNOTATIONS.envoyAdminAddress} (flag --admin-address) to Envoy's admin.address.pipe.path, and mount the volume that holds it in this container`;
  }
  return `is Envoy's admin API really at ${address}? Set the pod annotation ${ADMIN_PORT_ANNOTATION} (flag --admin-port) to the port of Envoy's admin listener, and ${ANNOTATIONS.envoyAdminAddress} if it does not listen on 127.0.0.1`;
}
