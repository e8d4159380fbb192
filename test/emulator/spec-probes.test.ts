/**
 * Probes written from the service spec's sentences where the emulator once departed from them:
 * each quotes its sentence and checks the accepted case and the refused (or contrasting) one.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Emulator } from '../../src/emulator/start-emulator.js';
import { AUTH, http, LEGACY_AUTH, netCents, start, until } from './helpers.js';

let emu: Emulator;
beforeAll(async () => {
  emu = await start({ timeScale: 0.001 });
});
afterAll(() => emu.close());

const sheetSubmit = (body: unknown) => http(emu, 'POST', '/vendor/ai-influencer', { headers: AUTH, json: body });

/** The sheet's bytes, once its request completed. */
async function sheetBytes(body: unknown): Promise<Buffer> {
  const r = await sheetSubmit(body);
  expect(r.status).toBe(200);
  const done = await until(async () => {
    const s = (await http(emu, 'GET', `/requests/${r.json.request_id}/status`, { headers: AUTH })).json;
    return s.status === 'completed' ? s : undefined;
  });
  return (await http(emu, 'GET', new URL(done.images[0].url).pathname)).bytes;
}

describe('§7 "502 | agent | the message is refunded; retry with backoff"', () => {
  async function session(): Promise<string> {
    return (await http(emu, 'POST', '/v1/agent/sessions', { headers: AUTH, json: {} })).json.session_id;
  }
  const send = (id: string, content: string) =>
    http(emu, 'POST', `/v1/agent/sessions/${id}/messages`, { headers: AUTH, json: { content } });
  const list = (id: string) => http(emu, 'GET', `/v1/agent/sessions/${id}/messages`, { headers: AUTH });

  it('a 502 drawn after processing on POST messages refunds the message and starts no turn: the retry is accepted', async () => {
    const id = await session();
    const before = netCents(emu);
    emu.forceFaults('agent', 'error_502_after');
    const lost = await send(id, 'hello there');
    expect(lost.status).toBe(502);
    const after = await list(id);
    expect(after.json.status).toBe('idle');
    expect(after.json.messages).toHaveLength(0);
    expect(netCents(emu)).toBe(before);
    const retry = await send(id, 'hello there');
    expect(retry.status).toBe(202);
    await until(async () => ((await list(id)).json.status === 'idle' ? true : undefined));
  });

  it('a 504 after processing stays after processing: the turn has started and a second message is session_busy', async () => {
    const id = await session();
    emu.forceFaults('agent', 'error_504_after');
    expect((await send(id, 'wait #hold')).status).toBe(504);
    expect((await list(id)).json.status).toBe('processing');
    const busy = await send(id, 'again');
    expect(busy.status).toBe(409);
    expect(busy.json.detail).toContain('session_busy');
    await http(emu, 'POST', `/v1/agent/sessions/${id}/interrupt`, { headers: AUTH });
  });
});

describe('§4.2 "Explicit selections and overrides can constrain variation"', () => {
  const species = async (body: Record<string, unknown>): Promise<string[]> => {
    const out: string[] = [];
    for (let v = 0; v < 5; v++) {
      const r = await sheetSubmit({ ...body, variation_index: v });
      expect(r.status).toBe(200);
      out.push(String(emu.requests.get(r.json.request_id)?.details.species));
    }
    return out;
  };

  it('a selected species stays fixed over variation_index 0 to 4; without it the species cycle', async () => {
    expect(await species({ tier: 'cats', seed: 4243, selection: { species: ['an_tabby'] } })).toEqual(Array(5).fill('tabby'));
    expect(new Set(await species({ tier: 'cats', seed: 4243 })).size).toBe(5);
  });

  it('the other appearance components still vary: two indices with the species fixed draw different sheets', async () => {
    const body = { tier: 'cats', seed: 4243, selection: { species: ['an_tabby'] } };
    const a = await sheetBytes({ ...body, variation_index: 0 });
    const b = await sheetBytes({ ...body, variation_index: 1 });
    expect(a.equals(b)).toBe(false);
  });

  it('a species of another tier is refused', async () => {
    const r = await sheetSubmit({ tier: 'cats', seed: 4243, selection: { species: ['an_shiba'] } });
    expect(r.status).toBe(422);
    expect(r.json.detail).toMatch(/^selection\.species/);
  });
});

describe('§4.2 trait_variants: choices and animal_choices are overrides of the sheet', () => {
  const horns = (variant: string | undefined) => ({
    tier: 'freak',
    seed: 77,
    selection: { transformations: ['pr_horns'] },
    ...(variant === undefined ? {} : { trait_variants: { version: 'appearance-v2', choices: { pr_horns: variant } } }),
  });

  it('pr_horns at v5 and at original, same seed, give different sheets; original is the unspecified variant', async () => {
    const v5 = await sheetBytes(horns('v5'));
    const original = await sheetBytes(horns('original'));
    expect(v5.equals(original)).toBe(false);
    // "Unspecified eligible traits use the original variant when an override object is supplied."
    const unspecified = await sheetBytes({ ...horns(undefined), trait_variants: { version: 'appearance-v2', choices: {} } });
    expect(unspecified.equals(original)).toBe(true);
  });

  it('animal_choices change the sheet: index 0 and 3 of a selected option differ', async () => {
    const body = (i: number) => ({
      tier: 'cats',
      seed: 5,
      selection: { species: ['an_tabby'] },
      trait_variants: { version: 'appearance-v2', animal_choices: { an_tabby: i } },
    });
    expect((await sheetBytes(body(0))).equals(await sheetBytes(body(3)))).toBe(false);
  });

  it('a variant the trait catalog lacks, and an animal choice out of 0 to 4, are refused', async () => {
    const r = await sheetSubmit(horns('v6'));
    expect(r.status).toBe(422);
    expect(r.json.detail).toMatch(/^trait_variants\.choices\.pr_horns: /);
    const out = await sheetSubmit({
      tier: 'cats',
      selection: { species: ['an_tabby'] },
      trait_variants: { version: 'appearance-v2', animal_choices: { an_tabby: 5 } },
    });
    expect(out.status).toBe(422);
    expect(out.json.detail).toMatch(/^trait_variants\.animal_choices/);
  });
});

describe('§2.7 Job: "results with members min and raw, each {type, url}"', () => {
  it('a queued job has results with min and raw; its URLs answer once the job completed', async () => {
    const slow = await start({ timeScale: 1, durations: { soul: { queuedMs: [600_000, 600_000] } } });
    try {
      const set = await http(slow, 'POST', '/v1/text2image/soul', { headers: LEGACY_AUTH, json: { params: { prompt: 'a cat' } } });
      expect(set.status).toBe(200);
      const job = set.json.jobs[0];
      expect(job.status).toBe('queued');
      for (const member of ['min', 'raw']) {
        expect(typeof job.results[member].type).toBe('string');
        expect(job.results[member].url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\//);
      }
      // Not yet there: the output is served only once the job completed.
      expect((await http(slow, 'GET', new URL(job.results.raw.url).pathname)).status).toBe(404);
      const polled = await http(slow, 'GET', `/v1/job-sets/${set.json.id}`, { headers: LEGACY_AUTH });
      expect(polled.json.jobs[0].results.min.type).toBe('image');
    } finally {
      await slow.close();
    }
    const set = await http(emu, 'POST', '/v1/text2image/soul', { headers: LEGACY_AUTH, json: { params: { prompt: 'a cat' } } });
    const done = await until(async () => {
      const s = (await http(emu, 'GET', `/v1/job-sets/${set.json.id}`, { headers: LEGACY_AUTH })).json;
      return s.jobs[0].status === 'completed' ? s : undefined;
    });
    expect(done.jobs[0].results.raw.url).toBe(set.json.jobs[0].results.raw.url);
    expect((await http(emu, 'GET', new URL(done.jobs[0].results.raw.url).pathname)).status).toBe(200);
  });
});
