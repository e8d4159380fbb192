/** The shapes routes of `genpipe ui` share (ui-server.ts mounts them). */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AccessRules } from './access.js';
import type { EventStreams } from './event-stream.js';
import type { RunWatch } from './run-watch.js';

/** A handler mounted beside the ui's routes: true when it answered the request. */
export type ExtraRoute = (req: IncomingMessage, res: ServerResponse, url: URL) => boolean | Promise<boolean>;

/** The ui's own routes beyond the runs list (a run's page, compare, fleet), added by later modules. */
export type UiRoute = (req: IncomingMessage, res: ServerResponse, url: URL, context: UiContext) => boolean | Promise<boolean>;

export interface UiContext {
  readonly watch: RunWatch;
  readonly roots: readonly string[];
  readonly access: AccessRules;
  /** The server's event streams, one cap over every page's (event-stream.ts). */
  readonly streams: EventStreams;
}
