/**
 * A small HTTP front on 127.0.0.1 for the loopback S3 store (s3-server.ts), to play the stores the
 * sink must not trust or must adapt to: one that keeps other bytes than it was sent (and answers
 * its own ETag, or forges the one the sender expects), one whose ETags are not MD5s, one that
 * honours `If-None-Match: *` on a PUT (s3rver ignores it), one that refuses HEAD with 403.
 * s3rver checks no SigV4 signature, so a request changed here still passes.
 */
import { createHash } from 'node:crypto';
import { createServer, request, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface ProxyRules {
  /** Flip one byte in the middle of every object PUT's or part's body (same length). */
  flipByte?: boolean;
  /** With flipByte: answer the MD5 of the bytes as sent (what the sender expects), not the store's. */
  forgeEtag?: boolean;
  /** Answer every ETag as an opaque value that is no MD5 (as some stores and SSE-KMS do). */
  opaqueEtag?: boolean;
  /** Answer a PUT with `If-None-Match: *` by 412 when the key exists, as S3 does. */
  conditional?: boolean;
  /** Refuse every object HEAD with 403 (a key that may write but not read). */
  refuseHead?: boolean;
  /** Hold each part upload this long, one part at a time (a slow link, so a test can kill the sender between parts). */
  partDelayMs?: number;
}

export interface S3Proxy {
  readonly endpoint: string;
  rules: ProxyRules;
  /** Requests seen: method, path with query, headers. */
  readonly seen: { method: string; url: string; headers: IncomingHttpHeaders }[];
  stop(): Promise<void>;
}

export async function startS3Proxy(target: { port: number }, rules: ProxyRules = {}): Promise<S3Proxy> {
  const seen: S3Proxy['seen'] = [];
  const state = { rules };
  let partLine: Promise<void> = Promise.resolve();
  const forward = (
    method: string,
    url: string,
    headers: IncomingHttpHeaders,
    body: Buffer,
  ): Promise<{ status: number; headers: IncomingHttpHeaders; body: Buffer }> =>
    new Promise((resolve, reject) => {
      const out = request({ host: '127.0.0.1', port: target.port, method, path: url, headers }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () => resolve({ status: res.statusCode ?? 502, headers: res.headers, body: Buffer.concat(chunks) }));
        res.on('error', reject);
      });
      out.on('error', reject);
      out.end(body);
    });

  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      void (async () => {
        const method = req.method ?? 'GET';
        const url = req.url ?? '/';
        seen.push({ method, url, headers: req.headers });
        const r = state.rules;
        let body: Buffer = Buffer.concat(chunks);
        const query = new URL(url, 'http://x').searchParams;
        const objectWrite = method === 'PUT' && url.split('?')[0]!.split('/').length > 2 && body.length > 0;
        if (method === 'HEAD' && r.refuseHead && url.split('?')[0]!.split('/').length > 2) {
          res.writeHead(403).end();
          return;
        }
        if (method === 'PUT' && r.conditional && req.headers['if-none-match'] === '*' && !query.has('uploadId')) {
          // Without the condition: s3rver answers a HEAD with If-None-Match: * by 304.
          const { 'if-none-match': _condition, ...headers } = req.headers;
          const head = await forward('HEAD', url.split('?')[0]!, { ...headers, 'content-length': '0' }, Buffer.alloc(0));
          if (head.status === 200) {
            const xml =
              '<?xml version="1.0" encoding="UTF-8"?><Error><Code>PreconditionFailed</Code><Message>At least one of the pre-conditions you specified did not hold</Message></Error>';
            res.writeHead(412, { 'content-type': 'application/xml', 'content-length': Buffer.byteLength(xml) }).end(xml);
            return;
          }
        }
        if (r.partDelayMs !== undefined && method === 'PUT' && query.has('partNumber')) {
          const delay = r.partDelayMs;
          const turn = partLine.then(() => new Promise<void>((resolve) => setTimeout(resolve, delay)));
          partLine = turn;
          await turn;
        }
        const sentMd5 = createHash('md5').update(body).digest('hex');
        if (objectWrite && r.flipByte) {
          body = Buffer.from(body);
          const at = Math.floor(body.length / 2);
          body[at] = (body[at] as number) ^ 0xff;
        }
        const answer = await forward(method, url, req.headers, body);
        const headers = { ...answer.headers };
        if (objectWrite && r.flipByte && r.forgeEtag && headers.etag !== undefined) headers.etag = `"${sentMd5}"`;
        let answerBody = answer.body;
        if (r.opaqueEtag) {
          if (headers.etag !== undefined) headers.etag = `"opaque-${String(headers.etag).replace(/"/g, '').slice(0, 8)}"`;
          // CompleteMultipartUpload answers its ETag in the XML body (an object's body is left alone).
          if (method === 'POST')
            answerBody = Buffer.from(
              answerBody
                .toString('utf8')
                .replace(/<ETag>&quot;([0-9a-f]{8})[0-9a-f]{24}&quot;<\/ETag>/g, '<ETag>&quot;opaque-$1&quot;</ETag>'),
            );
          if (headers['content-length'] !== undefined) headers['content-length'] = String(answerBody.length);
        }
        res.writeHead(answer.status, headers).end(method === 'HEAD' ? undefined : answerBody);
      })().catch(() => {
        res.destroy();
      });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    endpoint: `http://127.0.0.1:${port}`,
    get rules() {
      return state.rules;
    },
    set rules(next: ProxyRules) {
      state.rules = next;
    },
    seen,
    stop: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
