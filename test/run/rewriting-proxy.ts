// A loopback proxy in front of an emulator that rewrites the `error` of every failed status the
// service sends: the emulator has no knob for the text of a failure, and the hardening tests need
// one that carries escape sequences, or echoes the request's headers (as a careless service
// might). Everything else passes through as it is, with the emulator's address in JSON bodies
// turned into the proxy's, so that status URLs and outputs come back through it too.
import { createServer, request, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface RewritingProxy {
  readonly url: string;
  close(): Promise<void>;
}

/**
 * `rewrite(error, headers)`: the new error text, given the old one and the headers of the request
 * it answers. `transform`, when given, may change any JSON object answer in place (after that).
 */
export async function startRewritingProxy(
  target: string,
  rewrite: (error: string, headers: IncomingHttpHeaders) => string,
  transform?: (json: Record<string, unknown>) => void,
): Promise<RewritingProxy> {
  const upstream = new URL(target);
  let own = '';
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const headers = { ...req.headers, host: upstream.host };
      const out = request({ host: upstream.hostname, port: upstream.port, method: req.method, path: req.url, headers }, (answer) => {
        const body: Buffer[] = [];
        answer.on('data', (c: Buffer) => body.push(c));
        answer.on('end', () => {
          let bytes = Buffer.concat(body);
          const type = String(answer.headers['content-type'] ?? '');
          if (type.includes('json')) {
            let text = bytes.toString('utf8').split(target).join(own);
            try {
              const json = JSON.parse(text) as Record<string, unknown>;
              if (json.status === 'failed' && typeof json.error === 'string') json.error = rewrite(json.error, req.headers);
              transform?.(json);
              text = JSON.stringify(json);
            } catch {
              // not a JSON object: passed on as it is
            }
            bytes = Buffer.from(text, 'utf8');
          }
          const { 'content-length': _length, 'transfer-encoding': _encoding, ...rest } = answer.headers;
          res.writeHead(answer.statusCode ?? 502, { ...rest, 'content-length': String(bytes.length) });
          res.end(bytes);
        });
      });
      out.on('error', () => res.destroy());
      out.end(Buffer.concat(chunks));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  own = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url: own,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
