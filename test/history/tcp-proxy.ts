/**
 * A loopback TCP proxy in front of a redis-server, for partitions between one process and Redis:
 * `drop` closes every connection through it and refuses new ones until `heal`; `stall` keeps the
 * connections open and forwards nothing (bytes wait in the proxy) until `heal`, as a link that
 * stops carrying packets and comes back. No vitest import: the soak bundles it (processes.ts).
 */
import { createServer, connect, type Server, type Socket } from 'node:net';

export type PartitionMode = 'drop' | 'stall';

export interface TcpProxy {
  readonly port: number;
  readonly url: string;
  cut(mode: PartitionMode): void;
  heal(): void;
  close(): Promise<void>;
}

interface Pair {
  client: Socket;
  upstream: Socket | undefined;
  /** Bytes held while stalled, each way. */
  held: { toUpstream: Buffer[]; toClient: Buffer[] };
}

export async function startTcpProxy(upstreamPort: number): Promise<TcpProxy> {
  let mode: PartitionMode | undefined;
  const pairs = new Set<Pair>();
  const end = (pair: Pair): void => {
    pairs.delete(pair);
    pair.client.destroy();
    pair.upstream?.destroy();
  };
  const open = (pair: Pair): void => {
    const upstream = connect(upstreamPort, '127.0.0.1');
    pair.upstream = upstream;
    upstream.on('data', (chunk: Buffer) => (mode === 'stall' ? pair.held.toClient.push(chunk) : pair.client.write(chunk)));
    upstream.on('error', () => end(pair));
    upstream.on('close', () => end(pair));
    for (const chunk of pair.held.toUpstream.splice(0)) upstream.write(chunk);
  };
  const server: Server = createServer((client) => {
    if (mode === 'drop') {
      client.destroy();
      return;
    }
    const pair: Pair = { client, upstream: undefined, held: { toUpstream: [], toClient: [] } };
    pairs.add(pair);
    client.on('data', (chunk: Buffer) =>
      mode === 'stall' || !pair.upstream ? pair.held.toUpstream.push(chunk) : pair.upstream.write(chunk),
    );
    client.on('error', () => end(pair));
    client.on('close', () => end(pair));
    // A connection made during a stall reaches Redis only once healed.
    if (mode !== 'stall') open(pair);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    cut: (next) => {
      mode = next;
      if (next === 'drop') for (const pair of [...pairs]) end(pair);
    },
    heal: () => {
      mode = undefined;
      for (const pair of [...pairs]) {
        if (!pair.upstream) open(pair);
        else for (const chunk of pair.held.toUpstream.splice(0)) pair.upstream.write(chunk);
        for (const chunk of pair.held.toClient.splice(0)) pair.client.write(chunk);
      }
    },
    close: async () => {
      for (const pair of [...pairs]) end(pair);
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
