/**
 * Which IP addresses are inside the machine or the local network: loopback, link-local (the cloud
 * metadata address 169.254.169.254 among them), private and shared ranges, unspecified, multicast
 * and reserved. Two checks use it: a URL that names such an address (run/files/download.ts), and the
 * address a host name resolves to when a connection is made (api/connect-guard.ts), so that a name
 * the service hands out cannot point genpipe at a local service either.
 *
 * An IPv6 address that carries an IPv4 one (mapped ::ffff:a.b.c.d, compatible ::a.b.c.d, NAT64
 * 64:ff9b::/96, 6to4 2002::/16) counts as that IPv4 address: each of them can end at it.
 */
import { BlockList, isIP } from 'node:net';

const IPV4 = new BlockList();
for (const [net, prefix] of [
  ['0.0.0.0', 8], // "this network", unspecified
  ['10.0.0.0', 8],
  ['100.64.0.0', 10], // shared address space (carrier-grade NAT)
  ['127.0.0.0', 8],
  ['169.254.0.0', 16], // link-local: cloud metadata services live here
  ['172.16.0.0', 12],
  ['192.0.0.0', 24], // IETF protocol assignments
  ['192.168.0.0', 16],
  ['198.18.0.0', 15], // benchmarking
  ['224.0.0.0', 4], // multicast
  ['240.0.0.0', 4], // reserved, and the broadcast address
] as const) {
  IPV4.addSubnet(net, prefix, 'ipv4');
}

/** True when `address` (an IPv4 or IPv6 address, no brackets) is internal; false for a public address or a non-address. */
export function isInternalAddress(address: string): boolean {
  const plain = address.replace(/%.*$/, ''); // a zone index (fe80::1%eth0) says which link, not which address
  const family = isIP(plain);
  if (family === 4) return IPV4.check(plain, 'ipv4');
  if (family !== 6) return false;
  const groups = ipv6Groups(plain);
  if (!groups) return true; // isIP accepted it but it is unreadable here: refuse rather than guess
  const embedded = embeddedIpv4(groups);
  if (embedded !== undefined) return IPV4.check(embedded, 'ipv4');
  const [first] = groups as [number, ...number[]];
  if (groups.every((g, i) => g === 0 || (i === 7 && g === 1))) return true; // :: and ::1
  if ((first & 0xfe00) === 0xfc00) return true; // fc00::/7 unique local (fd00:ec2::254 is a metadata address)
  if ((first & 0xffc0) === 0xfe80) return true; // fe80::/10 link-local
  if ((first & 0xffc0) === 0xfec0) return true; // fec0::/10 site-local (deprecated, still routed inside some networks)
  if ((first & 0xff00) === 0xff00) return true; // ff00::/8 multicast
  return false;
}

/** The eight 16-bit groups of an IPv6 address (`::` expanded, a dotted IPv4 tail read as two groups). */
function ipv6Groups(address: string): number[] | undefined {
  let text = address.toLowerCase();
  const dotted = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (dotted) {
    const parts = (dotted[1] as string).split('.').map(Number);
    const [a, b, c, d] = parts as [number, number, number, number];
    text = `${text.slice(0, dotted.index)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const halves = text.split('::');
  if (halves.length > 2) return undefined;
  const read = (part: string | undefined): number[] => (part ? part.split(':').map((g) => parseInt(g, 16)) : []);
  const head = read(halves[0]);
  const tail = read(halves[1]);
  const missing = 8 - head.length - tail.length;
  if (halves.length === 1 ? missing !== 0 : missing < 1) return undefined;
  const groups = [...head, ...Array<number>(halves.length === 1 ? 0 : missing).fill(0), ...tail];
  return groups.length === 8 && groups.every((g) => Number.isInteger(g) && g >= 0 && g <= 0xffff) ? groups : undefined;
}

/** The IPv4 address an IPv6 one carries (mapped, compatible, NAT64, 6to4), if any. */
function embeddedIpv4(groups: readonly number[]): string | undefined {
  const quad = (hi: number, lo: number): string => `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`;
  const g = groups as [number, number, number, number, number, number, number, number];
  const zerosUpTo = (n: number): boolean => g.slice(0, n).every((x) => x === 0);
  if (zerosUpTo(5) && g[5] === 0xffff) return quad(g[6], g[7]); // ::ffff:a.b.c.d
  if (zerosUpTo(6) && (g[6] !== 0 || g[7] > 1)) return quad(g[6], g[7]); // ::a.b.c.d (deprecated "compatible")
  if (g[0] === 0x64 && g[1] === 0xff9b && g[2] === 0 && g[3] === 0 && g[4] === 0 && g[5] === 0) return quad(g[6], g[7]); // 64:ff9b::/96
  if (g[0] === 0x2002) return quad(g[1], g[2]); // 6to4
  return undefined;
}
