// Download addresses at connect time, so a hostile service cannot reach the local network: a host name that resolves to a loopback,
// link-local (cloud metadata), private or otherwise internal address is refused when the
// connection is made, unless its origin is one of the service's. Names are resolved by an injected
// resolver, so nothing here leaves 127.0.0.1: names that must be refused resolve to addresses no
// connection is ever opened to, and names that must pass resolve to 127.0.0.1.
import type { LookupAddress } from 'node:dns';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { readdirSync, writeFileSync } from 'node:fs';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GenerationClient } from '../../src/api/client.js';
import { resolveConfig } from '../../src/api/config.js';
import { createGuardedAgent, guardedLookup, type Resolver } from '../../src/api/connect-guard.js';
import { InternalAddressError } from '../../src/api/errors.js';
import { recordServiceOrigins } from '../../src/api/service-origins.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { loadManifestFile } from '../../src/manifest/load.js';
import { buildPlan } from '../../src/plan/plan.js';
import { DownloadError, downloadToFile } from '../../src/run/files/download.js';
import type { RunEvent } from '../../src/run/events.js';
import { createRunDir, planHash } from '../../src/run/files/run-dir.js';
import { runPlan } from '../../src/run/runner.js';
import { isInternalAddress } from '../../src/util/internal-address.js';
import { startRewritingProxy } from '../run/rewriting-proxy.js';
import { cleanTemps, HF_KEY, journalOf, tempDir } from '../run/runner-helpers.js';

/** A resolver from a fixed table; it records every name it is asked for. */
function tableResolver(table: Record<string, string[]>): Resolver & { asked: string[] } {
  const asked: string[] = [];
  const resolve = async (hostname: string): Promise<LookupAddress[]> => {
    asked.push(hostname);
    const addresses = table[hostname];
    if (!addresses) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND' });
    return addresses.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }));
  };
  return Object.assign(resolve, { asked });
}

/** Calls a lookup function as net.connect does and returns what it answered. */
function lookupOnce(
  lookup: ReturnType<typeof guardedLookup>,
  hostname: string,
  all: boolean,
): Promise<{ error: Error | null; address: unknown }> {
  return new Promise((resolve) => lookup(hostname, { all }, (error, address) => resolve({ error, address })));
}

let listener: Server;
let port: number;
let hits: string[] = [];

beforeAll(async () => {
  // A local service that genpipe must reach only when its origin is the service's.
  listener = createServer((req, res) => {
    hits.push(`${req.headers.host ?? ''}${req.url ?? ''}`);
    res.writeHead(200, { 'content-type': 'image/png' }).end(Buffer.from([0x89, 0x50, 0x4e, 0x47]));
  });
  await new Promise<void>((resolve) => listener.listen(0, '127.0.0.1', resolve));
  port = (listener.address() as AddressInfo).port;
});
afterAll(async () => {
  listener.closeAllConnections();
  await new Promise<void>((resolve) => listener.close(() => resolve()));
  cleanTemps();
});

describe('which resolved addresses are internal', () => {
  it('loopback, private, link-local and metadata, unique-local, and IPv4 carried in IPv6; public ones are not', () => {
    const internal = [
      '127.0.0.1',
      '10.0.0.5',
      '172.20.1.1',
      '192.168.0.10',
      '169.254.169.254',
      '100.64.1.1',
      '0.0.0.0',
      '224.0.0.1',
      '255.255.255.255',
      '198.18.0.1',
      '::1',
      '::',
      'fd00::1',
      'fd00:ec2::254',
      'fc00::5',
      'fe80::1',
      'fe80::1%eth0',
      'fec0::1',
      'ff02::1',
      '::ffff:10.1.2.3',
      '::ffff:a01:203',
      '::ffff:127.0.0.1',
      '::ffff:169.254.169.254',
      '::10.0.0.1',
      '64:ff9b::a00:1',
      '64:ff9b::127.0.0.1',
      '2002:a00:1::1',
      '2002:7f00:1::',
    ];
    for (const address of internal) expect(isInternalAddress(address), address).toBe(true);
    const external = [
      '8.8.8.8',
      '1.1.1.1',
      '172.32.0.1',
      '192.169.0.1',
      '100.128.0.1',
      '2001:4860:4860::8888',
      '::ffff:8.8.8.8',
      '64:ff9b::808:808',
      '2002:808:808::1',
      'not-an-address',
      '',
    ];
    for (const address of external) expect(isInternalAddress(address), address).toBe(false);
  });
});

describe('the lookup a connection uses', () => {
  it('answers a name with public addresses, in the shape net.connect asked for', async () => {
    const lookup = guardedLookup(tableResolver({ 'cdn.example.test': ['93.184.216.34', '2606:2800:220:1::1'] }));
    expect(await lookupOnce(lookup, 'cdn.example.test', false)).toEqual({ error: null, address: '93.184.216.34' });
    const all = await lookupOnce(lookup, 'cdn.example.test', true);
    expect(all.error).toBeNull();
    expect(all.address).toEqual([
      { address: '93.184.216.34', family: 4 },
      { address: '2606:2800:220:1::1', family: 6 },
    ]);
  });

  it('refuses a name that resolves to an internal address, with one sentence naming both', async () => {
    for (const address of ['10.0.0.7', '169.254.169.254', '127.0.0.1', 'fd00::1', '::ffff:10.0.0.1', 'fe80::1']) {
      const lookup = guardedLookup(tableResolver({ 'evil.example.test': [address] }));
      for (const all of [false, true]) {
        const { error } = await lookupOnce(lookup, 'evil.example.test', all);
        expect(error, address).toBeInstanceOf(InternalAddressError);
        expect(error?.message).toBe(
          `Refusing to connect to evil.example.test: it resolves to ${address}, a local or private address, and it is not one of the service's addresses (base_url, platform_url or cdn_url); nothing was sent there.`,
        );
      }
    }
  });

  it('refuses a name that answers with a public and a private address (the connection could take either)', async () => {
    const lookup = guardedLookup(tableResolver({ 'mixed.example.test': ['93.184.216.34', '192.168.1.20'] }));
    const { error } = await lookupOnce(lookup, 'mixed.example.test', true);
    expect(error).toBeInstanceOf(InternalAddressError);
    expect((error as InternalAddressError).address).toBe('192.168.1.20');
  });

  it('unguarded (a service origin), it answers internal addresses; a resolver failure passes through as it is', async () => {
    const resolver = tableResolver({ 'emu.test': ['127.0.0.1'] });
    expect(await lookupOnce(guardedLookup(resolver, false), 'emu.test', false)).toEqual({ error: null, address: '127.0.0.1' });
    const failed = await lookupOnce(guardedLookup(resolver, true), 'nowhere.test', false);
    expect((failed.error as NodeJS.ErrnoException).code).toBe('ENOTFOUND');
    const empty = await lookupOnce(
      guardedLookup(async () => [], true),
      'empty.test',
      false,
    );
    expect((empty.error as NodeJS.ErrnoException).code).toBe('ENOTFOUND');
  });
});

describe('the guarded agent against a real listener on 127.0.0.1', () => {
  const names = { 'svc.test': ['127.0.0.1'], 'other.test': ['127.0.0.1'], 'metadata.test': ['169.254.169.254'] };

  it("a name that resolves to loopback is refused unless its origin is the service's: the listener sees only the allowed request", async () => {
    hits = [];
    const resolver = tableResolver(names);
    const agent = createGuardedAgent({ connectTimeoutMs: 5_000, resolve: resolver });
    try {
      // Nothing recorded yet: every internal address is refused.
      await expect(request(`http://svc.test:${port}/a`, { dispatcher: agent })).rejects.toBeInstanceOf(InternalAddressError);
      recordServiceOrigins(agent, [`http://svc.test:${port}`]);
      const allowed = await request(`http://svc.test:${port}/b`, { dispatcher: agent });
      expect(allowed.statusCode).toBe(200);
      await allowed.body.dump();
      // The same address and port under another name is another origin: refused.
      await expect(request(`http://other.test:${port}/admin`, { dispatcher: agent })).rejects.toThrow(
        /^Refusing to connect to other\.test: it resolves to 127\.0\.0\.1/,
      );
      // A literal address is never looked up: it is checked all the same.
      await expect(request(`http://127.0.0.1:${port}/admin`, { dispatcher: agent })).rejects.toBeInstanceOf(InternalAddressError);
      await expect(request(`http://[::1]:${port}/admin`, { dispatcher: agent })).rejects.toBeInstanceOf(InternalAddressError);
      expect(hits).toEqual([`svc.test:${port}/b`]);
      expect(resolver.asked).toEqual(['svc.test', 'svc.test', 'other.test']);
    } finally {
      await agent.close();
    }
  });

  it("a client's default dispatcher is guarded: another local port is refused, the service's own origin answers", async () => {
    hits = [];
    const client = new GenerationClient(resolveConfig({ flags: { baseUrl: `http://127.0.0.1:${port}` }, env: { HF_KEY } }));
    const other = createServer((_req, res) => res.writeHead(200).end());
    await new Promise<void>((resolve) => other.listen(0, '127.0.0.1', resolve));
    let otherHits = 0;
    other.on('request', () => otherHits++);
    try {
      const dispatcher = client.transport.dispatcher;
      await expect(
        request(`http://127.0.0.1:${(other.address() as AddressInfo).port}/internal/admin`, { dispatcher }),
      ).rejects.toBeInstanceOf(InternalAddressError);
      const own = await request(`http://127.0.0.1:${port}/cdn/x.png`, { dispatcher });
      await own.body.dump();
      expect(own.statusCode).toBe(200);
      expect(otherHits).toBe(0);
      expect(hits).toEqual([`127.0.0.1:${port}/cdn/x.png`]);
    } finally {
      await client.close();
      other.closeAllConnections();
      await new Promise<void>((resolve) => other.close(() => resolve()));
    }
  });

  it("a download through a client's dispatcher: a CDN name resolving to the metadata address fails as internal_address, nothing written", async () => {
    const agent = createGuardedAgent({ connectTimeoutMs: 5_000, resolve: tableResolver(names) });
    recordServiceOrigins(agent, [`http://svc.test:${port}`]);
    const runDir = tempDir();
    try {
      const refused = await downloadToFile({
        url: 'https://metadata.test/latest/meta-data/iam',
        runDir,
        relativePath: 'outputs/a.png',
        maxBytes: 1_000,
        allowedContentTypes: ['image/png'],
        dispatcher: agent,
      }).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(DownloadError);
      expect((refused as DownloadError).reason).toBe('internal_address');
      expect((refused as DownloadError).message).toBe(
        "Refusing to download https://metadata.test/latest/meta-data/iam: metadata.test resolves to 169.254.169.254, a local or private address that is not the service's (base_url, platform_url or cdn_url); nothing was requested there.",
      );
      expect(readdirSync(runDir, { recursive: true }).filter((f) => String(f).endsWith('.png'))).toEqual([]);
    } finally {
      await agent.close();
    }
  });
});

describe('a run whose service points one output at a CDN name that resolves to a private address', () => {
  let emu: Emulator;
  beforeAll(async () => {
    emu = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
  });
  afterAll(async () => {
    await emu.close();
  });

  it('that download is refused with one sentence, the other instance completes, and the run reports it', { timeout: 30_000 }, async () => {
    let target: unknown;
    const proxy = await startRewritingProxy(
      emu.url,
      (e) => e,
      (json) => {
        // The first request to complete gets its image on a name of the service's choosing.
        if (json.status !== 'completed' || !Array.isArray(json.images)) return;
        target ??= json.request_id;
        if (json.request_id === target) json.images = [{ url: 'https://cdn.example.test/render/out.png' }];
      },
    );
    const resolver = tableResolver({ 'cdn.example.test': ['10.0.0.7'] });
    const agent = createGuardedAgent({ connectTimeoutMs: 5_000, resolve: resolver });
    const client = new GenerationClient(resolveConfig({ flags: { baseUrl: proxy.url }, env: { HF_KEY } }), { dispatcher: agent });
    try {
      const dir = tempDir();
      const manifest = join(dir, 'rebound.yaml');
      writeFileSync(
        manifest,
        'version: 1\nname: rebound\nsteps:\n  sheets:\n    model: character-sheet\n    matrix:\n      seed: [1, 2]\n    input: { tier: cats, seed: "{{ seed }}", brief: A mascot }\n',
      );
      const plan = await buildPlan(loadManifestFile(manifest));
      const hash = planHash(plan);
      const { runId, dir: runDir } = await createRunDir(tempDir(), plan, manifest, hash);
      const events: RunEvent[] = [];
      const summary = await runPlan({
        plan,
        client,
        runDir,
        runId,
        planHash: hash,
        signal: new AbortController().signal,
        concurrency: 1,
        ratePerSecond: 10_000,
        poll: { floorMs: 1, baseMs: 2, capMs: 20 },
        onEvent: (e) => events.push(e),
      });

      // Both completed at the service (and are counted so, as the report counts them); one lacks its file, said apart.
      expect(summary.counts).toMatchObject({ completed: 2, failed: 0 });
      expect(summary.outcome).toBe('failed');
      expect(summary.message).toMatch(
        /^1 completed instance is missing files that could not be fetched \(Refusing to download https:\/\/cdn\.example\.test/,
      );
      const failures = events.filter((e): e is Extract<RunEvent, { type: 'instance_failed' }> => e.type === 'instance_failed');
      expect(failures.map((f) => f.message)).toEqual([
        "Refusing to download https://cdn.example.test/render/out.png: cdn.example.test resolves to 10.0.0.7, a local or private address that is not the service's (base_url, platform_url or cdn_url); nothing was requested there.",
      ]);
      // Journaled as the instance's failure, once; the other instance's file is there.
      const records = journalOf(runDir).records;
      expect(records.filter((r) => r.type === 'failed').map((r) => (r as { message?: string }).message)).toEqual([failures[0]?.message]);
      expect(records.filter((r) => r.type === 'downloaded')).toHaveLength(1);
      // The name was resolved for that one connection only, and refused: no retry resolved it again.
      expect(resolver.asked).toEqual(['cdn.example.test']);
    } finally {
      await client.close();
      await agent.close();
      await proxy.close();
    }
  });
});
