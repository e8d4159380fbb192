/**
 * downloadToFile against a real node:http server on 127.0.0.1 (port 0): the project rule is that
 * tests talk to real HTTP servers on loopback.
 */
import { createHash } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdir, mkdtemp, readdir, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, type Dispatcher } from 'undici';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { checkDownloadUrl, DownloadError, downloadToFile, type DownloadOptions } from '../../../src/run/files/download.js';
import { isLoopbackHost } from '../../../src/util/loopback-host.js';
import { safeFileName } from '../../../src/run/files/output-names.js';
import { GenpipeError } from '../../../src/api/errors.js';

type Handler = (req: IncomingMessage, res: ServerResponse) => void;

const PNG = Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), Buffer.alloc(4_000, 7)]);
const sha = (data: Buffer): string => createHash('sha256').update(data).digest('hex');

let server: Server;
let base: string;
let port: number;
let routes: Map<string, Handler>;
let hits: string[];
let runDir: string;
let outside: string;
let agent: Agent;
let dispatches: number;
let dispatcher: Dispatcher;

beforeAll(async () => {
  server = createServer((req, res) => {
    hits.push(req.url ?? '');
    const handler = routes.get(req.url ?? '');
    if (handler) handler(req, res);
    else res.writeHead(404, { 'content-type': 'application/json' }).end('{"detail":"nope"}');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  port = (server.address() as AddressInfo).port;
  base = `http://127.0.0.1:${port}`;
  agent = new Agent();
  // Counts every request handed to the network, so a test can prove none was made.
  dispatcher = agent.compose((dispatch) => (opts, handler) => {
    dispatches++;
    return dispatch(opts, handler);
  });
});
afterAll(async () => {
  await agent.close();
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
});
beforeEach(async () => {
  routes = new Map();
  hits = [];
  dispatches = 0;
  runDir = await mkdtemp(join(tmpdir(), 'genpipe-dl-'));
  outside = await mkdtemp(join(tmpdir(), 'genpipe-outside-'));
});
afterEach(async () => {
  await rm(runDir, { recursive: true, force: true });
  await rm(outside, { recursive: true, force: true });
});

function serve(path: string, body: Buffer, headers: Record<string, string> = { 'content-type': 'image/png' }): void {
  routes.set(path, (_req, res) => res.writeHead(200, { 'content-length': String(body.length), ...headers }).end(body));
}

function redirect(from: string, location: string, status = 302): void {
  routes.set(from, (_req, res) => res.writeHead(status, { location }).end());
}

function options(overrides: Partial<DownloadOptions> = {}): DownloadOptions {
  return {
    url: `${base}/a.png`,
    runDir,
    relativePath: 'outputs/a.png',
    maxBytes: 1_000_000,
    allowedContentTypes: ['image/png', 'image/jpeg'],
    dispatcher,
    allowedOrigins: [base],
    ...overrides,
  };
}

/** Every file under the run directory, relative, so a test sees temp files left behind too. */
async function filesUnder(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { recursive: true, withFileTypes: true });
  return entries
    .filter((e) => e.isFile())
    .map((e) => join(e.parentPath, e.name).slice(dir.length + 1))
    .sort();
}

async function refusal(promise: Promise<unknown>): Promise<DownloadError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(DownloadError);
  return error as DownloadError;
}

describe('downloadToFile: success', () => {
  it('writes the body, returns its sha256, size and content type, and leaves no temp file', async () => {
    serve('/a.png', PNG, { 'content-type': 'Image/PNG; charset=binary' });
    const result = await downloadToFile(options());
    expect(result).toEqual({
      path: join(runDir, 'outputs/a.png'),
      relativePath: 'outputs/a.png',
      sha256: sha(PNG),
      size: PNG.length,
      contentType: 'image/png',
      alreadyPresent: false,
    });
    expect((await readFile(result.path)).equals(PNG)).toBe(true);
    expect(await filesUnder(runDir)).toEqual(['outputs/a.png']);
  });

  it("tells an image's width and height from its first bytes, also when they come in pieces shorter than the header; nothing for other bytes", async () => {
    // A PNG's signature and IHDR chunk: 640 x 360.
    const ihdr = Buffer.alloc(17);
    ihdr.write('IHDR', 4, 'latin1');
    ihdr.writeUInt32BE(13, 0);
    ihdr.writeUInt32BE(640, 8);
    ihdr.writeUInt32BE(360, 12);
    const png = Buffer.concat([PNG.subarray(0, 8), ihdr, Buffer.alloc(500, 1)]);
    routes.set('/a.png', (_req, res) => {
      res.writeHead(200, { 'content-type': 'image/png' });
      // Five bytes at a time for the first 40, each its own write after a pause.
      let at = 0;
      const next = (): void => {
        if (at >= 40) {
          res.end(png.subarray(at));
          return;
        }
        res.write(png.subarray(at, at + 5));
        at += 5;
        setTimeout(next, 2);
      };
      next();
    });
    const result = await downloadToFile(options());
    expect(result.imageSize).toEqual({ width: 640, height: 360 });
    expect((await readFile(result.path)).equals(png)).toBe(true);
    serve('/b.png', PNG);
    expect((await downloadToFile(options({ url: `${base}/b.png`, relativePath: 'outputs/b.png' }))).imageSize).toBeUndefined();
  });

  it('accepts a chunked body with no Content-Length, and a wildcard type', async () => {
    routes.set('/a.png', (_req, res) => {
      res.writeHead(200, { 'content-type': 'image/webp' });
      for (let i = 0; i < 10; i++) res.write(PNG);
      res.end();
    });
    const result = await downloadToFile(options({ allowedContentTypes: ['image/*'] }));
    expect(result.size).toBe(PNG.length * 10);
    expect(result.sha256).toBe(sha(Buffer.concat(Array.from({ length: 10 }, () => PNG))));
  });

  it('writes a multi-megabyte streamed body (several write batches) byte for byte', async () => {
    // 5 MiB in 64 KiB pieces, each piece a different byte: any reordering or loss shows.
    const pieces = Array.from({ length: 80 }, (_, i) => Buffer.alloc(65_536, i));
    routes.set('/a.png', (_req, res) => {
      res.writeHead(200, { 'content-type': 'image/png' });
      let i = 0;
      const pump = (): void => {
        while (i < pieces.length) if (!res.write(pieces[i++])) return void res.once('drain', pump);
        res.end();
      };
      pump();
    });
    const result = await downloadToFile(options({ maxBytes: 8 * 1024 * 1024 }));
    const expected = Buffer.concat(pieces);
    expect(result.size).toBe(expected.length);
    expect(result.sha256).toBe(sha(expected));
    expect((await readFile(result.path)).equals(expected)).toBe(true);
  });

  it('follows a same-host redirect (relative and absolute)', async () => {
    redirect('/a.png', '/b.png');
    redirect('/b.png', `${base}/c.png`, 307);
    serve('/c.png', PNG);
    const result = await downloadToFile(options());
    expect(result.sha256).toBe(sha(PNG));
    expect(hits).toEqual(['/a.png', '/b.png', '/c.png']);
  });
});

describe('downloadToFile: content type wildcards', () => {
  it('accepts any media type with */* (what the runner passes for an output without an accept list)', async () => {
    serve('/a.png', PNG, { 'content-type': 'image/png' });
    serve('/b.bin', PNG, { 'content-type': 'application/octet-stream' });
    const png = await downloadToFile(options({ allowedContentTypes: ['*/*'] }));
    expect(png).toMatchObject({ contentType: 'image/png', sha256: sha(PNG), alreadyPresent: false });
    const bin = await downloadToFile(options({ url: `${base}/b.bin`, relativePath: 'outputs/b.bin', allowedContentTypes: ['*/*'] }));
    expect(bin.contentType).toBe('application/octet-stream');
    expect(await filesUnder(runDir)).toEqual(['outputs/a.png', 'outputs/b.bin']);
  });

  it('with image/*, accepts image/png and refuses text/html', async () => {
    serve('/a.png', PNG, { 'content-type': 'image/png' });
    serve('/page', Buffer.from('<html>'), { 'content-type': 'text/html; charset=utf-8' });
    expect((await downloadToFile(options({ allowedContentTypes: ['image/*'] }))).contentType).toBe('image/png');
    const error = await refusal(
      downloadToFile(options({ url: `${base}/page`, relativePath: 'outputs/page.png', allowedContentTypes: ['image/*'] })),
    );
    expect(error.reason).toBe('content_type');
    expect(await filesUnder(runDir)).toEqual(['outputs/a.png']);
  });

  it('a type wildcard matches the whole type only, and */* still needs a media type', async () => {
    serve('/a.png', PNG, { 'content-type': 'imagex/png' });
    routes.set('/none', (_req, res) => {
      res.removeHeader('content-type');
      res.writeHead(200).end(PNG);
    });
    expect((await refusal(downloadToFile(options({ allowedContentTypes: ['image/*'] })))).reason).toBe('content_type');
    expect((await refusal(downloadToFile(options({ url: `${base}/none`, allowedContentTypes: ['*/*'] })))).reason).toBe('content_type');
    expect(await filesUnder(runDir)).toEqual([]);
  });
});

describe('downloadToFile: refusals', () => {
  it('refuses a body over the cap announced by Content-Length, and leaves nothing', async () => {
    serve('/a.png', Buffer.alloc(2_000, 1));
    const error = await refusal(downloadToFile(options({ maxBytes: 1_000 })));
    expect(error.reason).toBe('too_large');
    expect(await filesUnder(runDir)).toEqual([]);
  });

  it('aborts a streamed body once it passes the cap, deletes the temp file and leaves nothing', async () => {
    let sent = 0;
    routes.set('/a.png', (_req, res) => {
      res.writeHead(200, { 'content-type': 'image/png' });
      // 64 chunks of 64 KiB, more than the cap; the client must stop on its own.
      const pump = (): void => {
        while (sent < 64) {
          sent++;
          if (!res.write(Buffer.alloc(65_536, 3))) return void res.once('drain', pump);
        }
        res.end();
      };
      res.on('error', () => undefined);
      pump();
    });
    const error = await refusal(downloadToFile(options({ maxBytes: 100_000 })));
    expect(error.reason).toBe('too_large');
    expect(await filesUnder(runDir)).toEqual([]);
  });

  it('refuses a content type off the allow-list, and a missing one', async () => {
    serve('/a.png', Buffer.from('<html>'), { 'content-type': 'text/html' });
    serve('/b.png', PNG, {});
    routes.set('/b.png', (_req, res) => {
      res.removeHeader('content-type');
      res.writeHead(200).end(PNG);
    });
    expect((await refusal(downloadToFile(options()))).reason).toBe('content_type');
    expect((await refusal(downloadToFile(options({ url: `${base}/b.png` })))).reason).toBe('content_type');
    expect(await filesUnder(runDir)).toEqual([]);
  });

  it('refuses a redirect to another host (127.0.0.2 is another host) without requesting it', async () => {
    redirect('/a.png', `http://127.0.0.2:${port}/a.png`);
    const error = await refusal(downloadToFile(options()));
    expect(error.reason).toBe('cross_origin_redirect');
    expect(dispatches).toBe(1);
    expect(hits).toEqual(['/a.png']);
  });

  it('refuses a redirect to localhost, to another port, or to https on the same host', async () => {
    redirect('/a.png', `http://localhost:${port}/x.png`);
    redirect('/b.png', `http://127.0.0.1:${port + 1 === 65_536 ? 1 : port + 1}/x.png`);
    redirect('/c.png', `https://127.0.0.1:${port}/x.png`);
    for (const path of ['/a.png', '/b.png', '/c.png']) {
      expect((await refusal(downloadToFile(options({ url: `${base}${path}` })))).reason).toBe('cross_origin_redirect');
    }
    expect(dispatches).toBe(3);
  });

  it('refuses a redirect to a non-loopback http URL as insecure', async () => {
    redirect('/a.png', 'http://example.test/a.png');
    expect((await refusal(downloadToFile(options()))).reason).toBe('insecure_url');
    expect(dispatches).toBe(1);
  });

  it('stops after maxRedirects', async () => {
    redirect('/a.png', '/a.png');
    const error = await refusal(downloadToFile(options({ maxRedirects: 2 })));
    expect(error.reason).toBe('too_many_redirects');
    expect(hits).toEqual(['/a.png', '/a.png', '/a.png']);
  });

  it('refuses plain http to a non-loopback host before connecting, and non-http schemes', async () => {
    for (const url of ['http://example.test/x', 'http://10.0.0.1/x', 'http://[::2]/x', 'ftp://127.0.0.1/x', 'file:///etc/passwd']) {
      const error = await refusal(downloadToFile(options({ url })));
      expect(error.reason).toBe('insecure_url');
    }
    expect(dispatches).toBe(0);
    expect(await filesUnder(runDir)).toEqual([]);
  });

  it('maps an error status to a typed error and writes nothing', async () => {
    const error = await downloadToFile(options({ url: `${base}/missing.png` })).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(GenpipeError);
    expect((error as GenpipeError).code).toBe('not_found');
    expect(await filesUnder(runDir)).toEqual([]);
  });

  it('stops when the signal fires mid-body, with an aborted error and no temp file left', async () => {
    const controller = new AbortController();
    routes.set('/a.png', (_req, res) => {
      res.writeHead(200, { 'content-type': 'image/png' });
      // Send part of the body, then stall until the client gives up.
      res.write(PNG, () => controller.abort());
    });
    const error = await downloadToFile(options({ signal: controller.signal })).catch((e: unknown) => e);
    expect((error as GenpipeError).code).toBe('aborted');
    expect(await filesUnder(runDir)).toEqual([]);
  });
});

describe('downloadToFile: existing files', () => {
  it('never overwrites a different existing file', async () => {
    serve('/a.png', PNG);
    await mkdir(join(runDir, 'outputs'));
    await writeFile(join(runDir, 'outputs/a.png'), 'precious');
    const error = await refusal(downloadToFile(options()));
    expect(error.reason).toBe('exists');
    expect(await readFile(join(runDir, 'outputs/a.png'), 'utf8')).toBe('precious');
    expect(await filesUnder(runDir)).toEqual(['outputs/a.png']);
  });

  it('treats an existing file with the same sha256 as already done (a resumed run)', async () => {
    serve('/a.png', PNG);
    const first = await downloadToFile(options());
    const second = await downloadToFile(options());
    expect(second).toEqual({ ...first, alreadyPresent: true });
    expect(await filesUnder(runDir)).toEqual(['outputs/a.png']);
  });
});

describe('downloadToFile: paths', () => {
  it('refuses relative paths that escape the run directory, before any request', async () => {
    serve('/a.png', PNG);
    for (const relativePath of ['../escape.png', 'outputs/../../escape.png', '/etc/passwd', 'a\0b.png', '', '.']) {
      expect((await refusal(downloadToFile(options({ relativePath })))).reason).toBe('unsafe_path');
    }
    expect(dispatches).toBe(0);
    expect(await filesUnder(outside)).toEqual([]);
  });

  it('refuses a folder that is a symlink leading outside the run directory', async () => {
    serve('/a.png', PNG);
    await symlink(outside, join(runDir, 'outputs'));
    expect((await refusal(downloadToFile(options()))).reason).toBe('unsafe_path');
    expect(await filesUnder(outside)).toEqual([]);
  });

  it('refuses a symlinked outputs/ leading outside before creating anything there', async () => {
    serve('/a.png', PNG);
    await symlink(outside, join(runDir, 'outputs'));
    // The step folder does not exist yet: creating it first would create it in `outside`.
    const error = await refusal(downloadToFile(options({ relativePath: 'outputs/step/a.png' })));
    expect(await readdir(outside)).toEqual([]);
    expect(error.reason).toBe('unsafe_path');
    expect(error.message).toMatch(/outputs.*outside the run directory/);
    expect(dispatches).toBe(0);
  });

  it('refuses a dangling outputs/ symlink without creating its target', async () => {
    serve('/a.png', PNG);
    const target = join(outside, 'missing');
    await symlink(target, join(runDir, 'outputs'));
    const error = await refusal(downloadToFile(options({ relativePath: 'outputs/step/a.png' })));
    expect(error.reason).toBe('unsafe_path');
    expect(await readdir(outside)).toEqual([]);
    expect(dispatches).toBe(0);
  });

  it('refuses a symlinked step folder leading outside, creating nothing below it', async () => {
    serve('/a.png', PNG);
    await mkdir(join(runDir, 'outputs'));
    await symlink(outside, join(runDir, 'outputs/step'));
    const error = await refusal(downloadToFile(options({ relativePath: 'outputs/step/deeper/a.png' })));
    expect(error.reason).toBe('unsafe_path');
    expect(await readdir(outside)).toEqual([]);
  });

  it('still creates missing folders inside the run directory, following a symlink that stays inside', async () => {
    serve('/a.png', PNG);
    await mkdir(join(runDir, 'real-outputs'));
    await symlink(join(runDir, 'real-outputs'), join(runDir, 'outputs'));
    const result = await downloadToFile(options({ relativePath: 'outputs/step/deep/a.png' }));
    expect(result.relativePath).toBe('outputs/step/deep/a.png');
    expect(await filesUnder(join(runDir, 'real-outputs'))).toEqual(['step/deep/a.png']);
  });

  it('checks a folder once, and recreates it when it was deleted between two downloads', async () => {
    serve('/a.png', PNG);
    await downloadToFile(options({ relativePath: 'outputs/step/one.png' }));
    await rm(join(runDir, 'outputs'), { recursive: true });
    const second = await downloadToFile(options({ relativePath: 'outputs/step/two.png' }));
    expect(second.sha256).toBe(sha(PNG));
    expect(await filesUnder(runDir)).toEqual(['outputs/step/two.png']);
  });

  it('stores outputs of hostile instance ids inside the run directory, each under its own name', async () => {
    serve('/a.png', PNG);
    const ids = [
      '../../etc/passwd',
      '/abs/path',
      'nul\0byte',
      'x'.repeat(10_000),
      'sheets[tier=猫,seed=3]',
      'sheets[tier=犬,seed=3]',
      '..',
      '.',
      'CON',
      '\u202egnp.exe',
    ];
    const names = new Set<string>();
    for (const id of ids) {
      const relativePath = `outputs/${safeFileName(id, 'png')}`;
      const result = await downloadToFile(options({ relativePath }));
      expect(result.relativePath).toBe(relativePath);
      names.add(relativePath);
    }
    expect(names.size).toBe(ids.length);
    expect(await filesUnder(runDir)).toEqual([...names].sort());
    expect(await filesUnder(outside)).toEqual([]);
  });
});

describe('URL rules', () => {
  it('knows loopback hosts', () => {
    for (const host of ['127.0.0.1', '127.255.0.9', 'localhost', 'LOCALHOST', '[::1]', '::1']) expect(isLoopbackHost(host)).toBe(true);
    for (const host of ['128.0.0.1', '10.0.0.1', 'example.test', 'localhost.example.test', '127.0.0.1.example.test', '[::2]', '0.0.0.0'])
      expect(isLoopbackHost(host)).toBe(false);
  });

  it('allows https anywhere and http only to loopback', () => {
    expect(() => checkDownloadUrl(new URL('https://cdn.gen.test/a.png'))).not.toThrow();
    expect(() => checkDownloadUrl(new URL('http://127.1/a.png'))).not.toThrow();
    expect(() => checkDownloadUrl(new URL('http://[::1]:8080/a.png'))).not.toThrow();
    expect(() => checkDownloadUrl(new URL('http://cdn.gen.test/a.png'))).toThrow(DownloadError);
  });

  it('keeps query strings (signed tokens) out of error messages', () => {
    let message = '';
    try {
      checkDownloadUrl(new URL('http://cdn.gen.test/a.png?token=s3cr3t-signature'));
    } catch (error) {
      message = (error as Error).message;
    }
    expect(message).toContain('http://cdn.gen.test/a.png');
    expect(message).not.toContain('s3cr3t');
  });
});
