/**
 * The check at connect time behind the download rules, so that a hostile service cannot point downloads into the local network
 * (reliability.md #17): a
 * connection to an address inside the machine or the local network (loopback, link-local with the
 * cloud metadata address, private ranges; util/internal-address.ts) is made only to one of the
 * service's origins (base, platform and CDN: api/service-origins.ts).
 *
 * download.ts refuses URLs that name such an address. A host name is only known to be one when it
 * is resolved, and it may resolve differently between a check and the connection (DNS rebinding),
 * so the check sits in the resolution the connection itself uses: the `lookup` of the socket. A
 * name at another origin that resolves to an internal address fails the connection with an
 * InternalAddressError, and nothing is sent. An IP address written in the URL never goes through
 * a lookup, so it is checked here too.
 *
 * The client's default dispatcher is one of these agents (transport.ts). `resolve` replaces the
 * system resolver: tests map names to addresses with it, so nothing leaves 127.0.0.1.
 */
import { lookup as systemLookup, type LookupAddress } from 'node:dns';
import { isIP, type LookupFunction } from 'node:net';
import { Agent, buildConnector } from 'undici';
import { InternalAddressError } from './errors.js';
import { serviceOriginsOf } from './service-origins.js';
import { isInternalAddress } from '../util/internal-address.js';

/** Resolves a host name to every address it has (family 0: any). */
export type Resolver = (hostname: string, family: 0 | 4 | 6) => Promise<LookupAddress[]>;

/** The system's resolver (getaddrinfo, /etc/hosts included), as `net.connect` uses it by default. */
export const systemResolver: Resolver = (hostname, family) =>
  new Promise((resolve, reject) => {
    systemLookup(hostname, { all: true, family }, (error, addresses) => (error ? reject(error) : resolve(addresses)));
  });

/**
 * A `lookup` for `net.connect` and `tls.connect` that resolves with `resolve` and, when `guard` is
 * true, refuses a name any of whose addresses is internal: a name that answers with a public and a
 * private address is refused too, since the connection could be made to either.
 */
export function guardedLookup(resolve: Resolver = systemResolver, guard = true): LookupFunction {
  return (hostname, options, callback) => {
    const family = options.family === 4 || options.family === 'IPv4' ? 4 : options.family === 6 || options.family === 'IPv6' ? 6 : 0;
    resolve(hostname, family).then(
      (addresses) => {
        const first = addresses[0];
        const internal = guard ? addresses.find((a) => isInternalAddress(a.address)) : undefined;
        // Called outside the promise chain: an exception in the socket's callback is not a resolver failure.
        process.nextTick(() => {
          if (internal) callback(new InternalAddressError(hostname, internal.address), '', 0);
          else if (!first) callback(Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND', hostname }), '', 0);
          else if (options.all) callback(null, addresses);
          else callback(null, first.address, first.family);
        });
      },
      (error: unknown) => process.nextTick(() => callback(error as NodeJS.ErrnoException, '', 0)),
    );
  };
}

export interface GuardedAgentOptions {
  connectTimeoutMs: number;
  /** How host names are resolved; the system resolver by default. */
  resolve?: Resolver | undefined;
}

/** The origin of a connection undici is about to open (`hostname` comes without IPv6 brackets). */
function originOf(protocol: string, hostname: string, port: string): string | undefined {
  try {
    return new URL(`${protocol}//${isIP(hostname) === 6 ? `[${hostname}]` : hostname}${port ? `:${port}` : ''}`).origin;
  } catch {
    return undefined;
  }
}

/**
 * A keep-alive Agent whose connections follow the rule of the header comment. The service origins
 * are the ones recorded for this agent (a GenerationClient records its own when it is given or
 * creates the agent); until one is, every internal address is refused.
 */
export function createGuardedAgent(options: GuardedAgentOptions): Agent {
  const timeout = options.connectTimeoutMs;
  // The service's origins are reached wherever they resolve: the emulator, a gateway on the local network.
  const open = buildConnector({ timeout, ...(options.resolve ? { lookup: guardedLookup(options.resolve, false) } : {}) });
  const guarded = buildConnector({ timeout, lookup: guardedLookup(options.resolve, true) });
  const agent: Agent = new Agent({
    keepAliveTimeout: 10_000,
    connections: 128,
    connect: (connectOptions, callback) => {
      const { protocol, hostname, port } = connectOptions;
      const origin = originOf(protocol, hostname, port);
      if (origin !== undefined && serviceOriginsOf(agent)?.has(origin)) return open(connectOptions, callback);
      if (isIP(hostname) !== 0 && isInternalAddress(hostname)) {
        // Not an error thrown in here: undici expects the refusal through the callback.
        process.nextTick(() => callback(new InternalAddressError(hostname, hostname), null));
        return;
      }
      guarded(connectOptions, callback);
    },
  });
  return agent;
}
