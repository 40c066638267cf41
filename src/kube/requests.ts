/**
 * What every caller of the generated Kubernetes client needs around a request: its AbortSignal (the client
 * reads it from the request context), and the Status message of an error answer. Shared by the self-managed
 * certificate store (client.ts) and `check` (src/check/read.ts).
 */
import { Observable, type ObservableMiddleware } from '@kubernetes/client-node';

/** A middleware that gives the request its AbortSignal. */
export function withSignal(signal: AbortSignal): ObservableMiddleware {
  return {
    pre: (context) => {
      context.setSignal(signal);
      return new Observable(Promise.resolve(context));
    },
    post: (response) => new Observable(Promise.resolve(response)),
  };
}

/** The Status object of an error answer: its message is the most precise thing the API server says. */
export function statusOf(body: unknown): { message?: string; reason?: string } {
  let parsed = body;
  if (typeof body === 'string') {
    try {
      parsed = JSON.parse(body);
    } catch {
      return body.trim() === '' ? {} : { message: body.trim().slice(0, 300) };
    }
  }
  if (typeof parsed !== 'object' || parsed === null) return {};
  const { message, reason } = parsed as { message?: unknown; reason?: unknown };
  return {
    ...(typeof message === 'string' ? { message } : {}),
    ...(typeof reason === 'string' ? { reason } : {}),
  };
}
