/** Which hosts never leave the machine: where plain http may carry credentials or downloads. */
import { isIP } from 'node:net';

/**
 * True for localhost, 127.0.0.0/8 and ::1 (bracketed or not). Give it a URL's `hostname`: the
 * WHATWG parser normalises spellings such as 0x7f.1 or 2130706433 to 127.0.0.1, and [0:0::1] to
 * [::1]. IPv4-mapped addresses (::ffff:127.0.0.1) and 0.0.0.0 do not count.
 */
export function isLoopbackHost(hostname: string): boolean {
  const host = hostname.toLowerCase().replace(/^\[(.*)\]$/, '$1');
  if (host === 'localhost') return true;
  if (isIP(host) === 4) return host.startsWith('127.');
  if (isIP(host) === 6) return host === '::1' || host === '0:0:0:0:0:0:0:1';
  return false;
}
