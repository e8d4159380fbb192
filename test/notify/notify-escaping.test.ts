// Chat text is shown as text: a CSV key value written as Slack markup (a mention of everyone and a
// link under a bait label) reaches each target escaped for it, as the literal characters, with no
// mention parsed and no link label of its own; the JSON target carries it as data, unchanged.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { chatText } from '../../src/notify/notify-message.js';
import { receiver, type Received } from './receiver.js';
import { cleanTemps, HF_KEY, tempDir } from '../run/runner-helpers.js';

const HOSTILE = '<!channel> <https://evil.example/login|Sign in again>';

let emu: Emulator;
let hook: Awaited<ReturnType<typeof receiver>>;
let byPath: Map<string, Received>;

beforeAll(async () => {
  emu = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
  hook = await receiver();
  const dir = tempDir();
  // The hostile value is the row's key, so it is in the instance id the stop message names.
  writeFileSync(join(dir, 'rows.csv'), `sku,prompt\n"${HOSTILE}",A poster [emulator:fail]\n`);
  const manifest = join(dir, 'hostile.yaml');
  writeFileSync(
    manifest,
    `version: 1
name: hostile
notify:
  - { url: "${hook.url}/slack", format: slack }
  - { url: "${hook.url}/discord", format: discord }
  - { url: "${hook.url}/json", format: json }
steps:
  ads:
    model: marketing-image
    on_failure: stop
    matrix:
      row: { csv: rows.csv, key: sku }
    input: { prompt: "{{ row.prompt }}", resolution: 1k, quality: low }
`,
  );
  let err = '';
  const io: CliIO = {
    out: () => {},
    write: async () => {},
    err: (t) => (err += `${t}\n`),
    env: { GENPIPE_BASE_URL: emu.url, HF_KEY },
    signal: new AbortController().signal,
  };
  expect(await main(['run', manifest, '--out', tempDir(), '--quiet'], io), err).toBe(1);
  byPath = new Map(hook.received.map((r) => [r.path, r]));
}, 30_000);

afterAll(async () => {
  await hook?.close();
  await emu?.close();
  cleanTemps();
});

describe('a hostile CSV value in a notification', () => {
  it('the JSON target gets it as data: the stop message names the instance with the value as written', () => {
    const body = byPath.get('/json')?.body as { message: string; event: string };
    expect(body.event).toBe('failure');
    expect(body.message).toContain(HOSTILE);
  });

  it("Slack: &, < and > are entities, so there is no <!channel> mention and no link under the bait's label", () => {
    const body = byPath.get('/slack')?.body as { text: string; link_names: boolean };
    expect(body.link_names).toBe(false);
    expect(body.text).toContain('&lt;!channel&gt; &lt;https://evil.example/login|Sign in again&gt;');
    // Nothing in the text opens a Slack control sequence (<!…>, <@…>, <url|label>).
    expect(body.text).not.toMatch(/[<>]/);
    expect(body.text).not.toMatch(/&(?!amp;|lt;|gt;)/);
  });

  it('Discord: markup characters are escaped, the URL is left whole, and no mention may notify anyone', () => {
    const body = byPath.get('/discord')?.body as { content: string; allowed_mentions: { parse: unknown[] } };
    expect(body.allowed_mentions).toEqual({ parse: [] });
    expect(body.content).toContain('\\<!channel\\> \\<https://evil.example/login\\|Sign in again\\>');
    // Every markup character outside a URL is escaped: none is bare.
    const outsideUrls = body.content.replace(/https?:\/\/[^\s<>[\]()|`\\]+/g, '');
    expect(outsideUrls.replace(/\\[\\*_~`|[\]()<>#@]/g, '')).not.toMatch(/[\\*_~`|[\]()<>#@]/);
  });

  it('a masked link written for Discord, and @everyone, stay text there; in Slack, & is escaped first', () => {
    const text = '[Sign in again](https://evil.example/login) @everyone &lt;';
    expect(chatText('discord', text)).toBe('\\[Sign in again\\]\\(https://evil.example/login\\) \\@everyone &lt;');
    expect(chatText('slack', text)).toBe('[Sign in again](https://evil.example/login) @everyone &amp;lt;');
  });
});
