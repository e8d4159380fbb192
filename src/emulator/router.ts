/**
 * A small method + path router. Patterns use `:name` segments; the first route that matches wins,
 * so the hot status route is listed first. Each route has a class for fault injection and a
 * name (its pattern) for the per-route counts of `/_emulator/stats`.
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { FaultDecision, RouteClass } from './faults.js';
import type { EmuResponse } from './http-util.js';

export interface RouteInput {
  method: string;
  url: URL;
  params: Record<string, string>;
  headers: IncomingHttpHeaders;
  body: Buffer;
  remoteAddress: string | undefined;
  fault: FaultDecision;
}

export type Handler = (input: RouteInput) => EmuResponse | Promise<EmuResponse>;

export interface Route {
  method: 'GET' | 'POST' | 'PUT';
  pattern: string;
  /** Fault class, or `inspection` (never faulted, loopback only). */
  cls: RouteClass | 'inspection';
  handler: Handler;
  /**
   * The route's answer about another request than the one asked for (the `foreign_status` fault),
   * for routes that echo the id they are asked about; undefined when there is nothing to answer
   * with. It checks the caller as `handler` does.
   */
  foreign?: Handler;
  /** Largest accepted body, bytes. Default 1 MiB. */
  maxBody?: number;
}

interface Compiled {
  route: Route;
  name: string;
  regex: RegExp;
  keys: string[];
}

export interface Match {
  route: Route;
  name: string;
  params: Record<string, string>;
}

const escape = (s: string): string => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

export class Router {
  readonly #compiled: Compiled[];

  constructor(routes: readonly Route[]) {
    this.#compiled = routes.map((route) => {
      const keys: string[] = [];
      const source = route.pattern
        .split('/')
        .map((part) => {
          if (part.startsWith(':')) {
            keys.push(part.slice(1));
            return '([^/]+)';
          }
          return escape(part);
        })
        .join('/');
      return { route, name: `${route.method} ${route.pattern}`, regex: new RegExp(`^${source}$`), keys };
    });
  }

  /** The matching route, or `methods` listing what the path accepts (405), or undefined (404). */
  match(method: string, path: string): Match | { methods: string[] } | undefined {
    const methods: string[] = [];
    for (const c of this.#compiled) {
      const m = c.regex.exec(path);
      if (!m) continue;
      if (c.route.method !== method) {
        methods.push(c.route.method);
        continue;
      }
      const params: Record<string, string> = {};
      for (let i = 0; i < c.keys.length; i++) {
        try {
          params[c.keys[i] ?? ''] = decodeURIComponent(m[i + 1] ?? '');
        } catch {
          params[c.keys[i] ?? ''] = m[i + 1] ?? '';
        }
      }
      return { route: c.route, name: c.name, params };
    }
    return methods.length > 0 ? { methods } : undefined;
  }
}
