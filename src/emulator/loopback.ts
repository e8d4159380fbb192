/** Loopback checks: the inspection endpoints and webhook targets are restricted to this machine. */
import { isIP } from 'node:net';

/** True for 127.0.0.0/8, ::1 and IPv4-mapped loopback. */
export function isLoopbackAddress(address: string | undefined): boolean {
  if (!address) return false;
  const a = address.startsWith('::ffff:') ? address.slice(7) : address;
  if (a === '::1') return true;
  return isIP(a) === 4 && a.startsWith('127.');
}

/** True when a URL's host is a loopback name or address. */
export function isLoopbackUrl(url: URL): boolean {
  const host = url.hostname.replace(/^\[|\]$/g, '');
  return host === 'localhost' || isLoopbackAddress(host);
}
