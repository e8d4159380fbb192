/**
 * The origins (scheme, host and port) of the service a dispatcher talks to: its base, platform and
 * CDN addresses. A download may reach an address inside the machine or the local network only at
 * one of these (download.ts): an output URL is the service's word, and a service, or whoever
 * controls one of its answers, must not be able to point genpipe at another local port.
 *
 * Recorded by the client that owns the dispatcher, so that code handed only the dispatcher (the
 * driver's downloads) knows them too. A dispatcher shared by clients of several services gets
 * the origins of each.
 */
import type { Dispatcher } from 'undici';

const byDispatcher = new WeakMap<Dispatcher, Set<string>>();

export function recordServiceOrigins(dispatcher: Dispatcher, urls: readonly string[]): void {
  let origins = byDispatcher.get(dispatcher);
  if (!origins) byDispatcher.set(dispatcher, (origins = new Set()));
  for (const url of urls) {
    try {
      origins.add(new URL(url).origin);
    } catch {
      // not a URL: config.ts refuses those before a client exists
    }
  }
}

/** The service origins recorded for `dispatcher`, or undefined when no client recorded any. */
export function serviceOriginsOf(dispatcher: Dispatcher): ReadonlySet<string> | undefined {
  return byDispatcher.get(dispatcher);
}
