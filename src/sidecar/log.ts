/** The structured logger the sidecar's parts report to: pino's shape, so that tests can pass a small fake. */
export interface SidecarLog {
  info(fields: object, message: string): void;
  warn(fields: object, message: string): void;
  error(fields: object, message: string): void;
}
