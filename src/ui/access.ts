/**
 * Who may talk to `genpipe ui`, decided for every request before anything is read.
 *
 * - Host: on loopback, a request must name the server in its Host header (`127.0.0.1:PORT`,
 *   `localhost:PORT`, `[::1]:PORT`), else 421. A page of another site whose name its DNS points at
 *   127.0.0.1 (DNS rebinding) is of that site's origin and could read the answers; its requests
 *   carry that name as Host, and that is what gives them away (the review server's rule).
 * - Writes (every method but GET and HEAD) must come from the page itself: an Origin of the
 *   server's, and the per-start token the page carries, in the `x-genpipe-token` header. Another
 *   site open in the same browser can send a form, never that header with the right value.
 * - On an address other than loopback, anyone on the network can reach the server: the token is
 *   then required on every request, reads included (a `Bearer` authorization, the cookie the
 *   server sets, or `?token=` once in the address, which sets the cookie). The Host header cannot
 *   be known in advance there (every name of the machine), so it is not checked: the token is.
 * - Framing is refused on every answer (page-policy.ts).
 */
import { randomBytes, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { allowedHosts } from '../review/review-server.js';
import { isLoopbackHost } from '../util/loopback-host.js';

export const TOKEN_HEADER = 'x-genpipe-token';
export const TOKEN_COOKIE = 'genpipe_ui_token';

/**
 * Why a change without this start's token is refused. Each start of `genpipe ui` has its own token,
 * so a page opened before a restart carries one the server no longer knows: its reader is told to
 * reload it, not only that a header is missing.
 */
export const STALE_TOKEN = `a change needs the token of this start of genpipe ui, which its pages carry in the ${TOKEN_HEADER} header: reload a page opened before genpipe ui restarted, then try again`;

/** Why a request is refused: its status and one sentence. */
export interface Refusal {
  status: 401 | 403 | 421;
  message: string;
}

export interface AccessRules {
  /** The token of this start: random, 32 bytes, never written to disk. */
  readonly token: string;
  /** True when every request must carry the token (a non-loopback address). */
  readonly everyRequest: boolean;
  /** Once the server listens: the names it answers to. */
  listening(address: AddressInfo): void;
  /** Undefined when the request may go on, else why not. */
  check(req: IncomingMessage, url: URL): Refusal | undefined;
  /** True when the request carried the token in `?token=` (the server then sets the cookie and sends the page without it). */
  tokenInQuery(url: URL): boolean;
}

const READS = new Set(['GET', 'HEAD']);

function sameToken(given: string | undefined, token: string): boolean {
  if (given === undefined) return false;
  const a = Buffer.from(given);
  const b = Buffer.from(token);
  return a.length === b.length && timingSafeEqual(a, b);
}

function cookieToken(req: IncomingMessage): string | undefined {
  for (const part of (req.headers.cookie ?? '').split(';')) {
    const [name, ...value] = part.trim().split('=');
    if (name === TOKEN_COOKIE) return value.join('=');
  }
  return undefined;
}

function bearerToken(req: IncomingMessage): string | undefined {
  const match = /^Bearer\s+(\S+)$/i.exec(req.headers.authorization ?? '');
  return match?.[1];
}

/** The rules of a server asked to listen on `host`; `token` fixes the token (tests), else a random one. */
export function accessRules(host: string, token: string = randomBytes(32).toString('base64url')): AccessRules {
  const everyRequest = !isLoopbackHost(host);
  let hosts: ReadonlySet<string> = new Set();
  const carries = (req: IncomingMessage, url: URL): boolean =>
    [req.headers[TOKEN_HEADER] as string | undefined, bearerToken(req), cookieToken(req), url.searchParams.get('token') ?? undefined].some(
      (given) => sameToken(given, token),
    );
  return {
    token,
    everyRequest,
    listening(address) {
      hosts = allowedHosts(address, host);
    },
    check(req, url) {
      const named = req.headers.host?.toLowerCase();
      if (!everyRequest && (named === undefined || !hosts.has(named)))
        return { status: 421, message: `this server answers only to ${[...hosts].join(', ')}` };
      if (everyRequest && !carries(req, url))
        return {
          status: 401,
          message: 'this server needs the token genpipe ui printed when it started (?token=..., or Authorization: Bearer ...)',
        };
      if (READS.has(req.method ?? 'GET')) return undefined;
      // A write: from the page itself, with the token it carries.
      const origin = req.headers.origin?.toLowerCase();
      if (origin === undefined || named === undefined || origin !== `http://${named}`)
        return { status: 403, message: 'changes are taken from the page of this server only' };
      if (!sameToken(req.headers[TOKEN_HEADER] as string | undefined, token)) return { status: 403, message: STALE_TOKEN };
      return undefined;
    },
    tokenInQuery(url) {
      return sameToken(url.searchParams.get('token') ?? undefined, token);
    },
  };
}
