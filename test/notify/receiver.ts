// A webhook receiver on 127.0.0.1 for notification tests: records every POST's path, JSON body and
// content type, and answers as told (a status, or never).
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';

export interface Received {
  path: string;
  body: unknown;
  contentType: string | undefined;
}

/** A webhook receiver on 127.0.0.1 that answers with `answer(n)` (n: the request's 1-based number). */
export async function receiver(
  answer: (n: number) => number | 'hang' = () => 200,
): Promise<{ url: string; received: Received[]; close: () => Promise<void> }> {
  const received: Received[] = [];
  const hanging: ServerResponse[] = [];
  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    let text = '';
    req.on('data', (c: Buffer) => (text += c.toString()));
    req.on('end', () => {
      received.push({ path: req.url ?? '', body: JSON.parse(text), contentType: req.headers['content-type'] });
      const status = answer(received.length);
      if (status === 'hang') {
        hanging.push(res);
        return;
      }
      res.writeHead(status, { 'content-type': 'text/plain' });
      res.end(status < 300 ? 'ok' : 'no');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}`,
    received,
    close: async () => {
      for (const res of hanging) res.destroy();
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    },
  };
}
