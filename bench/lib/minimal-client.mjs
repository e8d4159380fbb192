// The least a client can do for one character sheet, as a baseline for the throughput benchmark:
// submit, wait the same 10 ms before each status look, poll until done, download, hash, and write
// the file the way genpipe does (temp file, fdatasync, link into place). No journal, no validation,
// no retries, no resume, no report: what it is faster by is what genpipe's guarantees cost.
// Talks only to the base URL it is given (an emulator on 127.0.0.1); bounded by `instances`.
// With `journal: true` it also keeps genpipe's durability of a run's record, so the
// two compare at the same durability: a line per step appended to a journal, the intent synced before the spending POST,
// with the least machinery that does it (one write and one fdatasync per batch of waiting lines).
import { createHash } from 'node:crypto';
import { link, mkdir, open, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { Agent, request } from 'undici';

/** Runs `instances` character sheets at `concurrency`; resolves with the wall time in ms. */
export async function minimalClientRun({ baseUrl, authorization, dir, instances, concurrency, journal = false }) {
  await mkdir(dir, { recursive: true });
  const log = journal ? groupCommit(await open(join(dir, 'journal.jsonl'), 'a')) : async () => {};
  const dispatcher = new Agent({ connections: 128 });
  const headers = { authorization, 'content-type': 'application/json' };
  const pause = () => new Promise((resolve) => setTimeout(resolve, 10));
  let next = 0;
  const started = performance.now();
  try {
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (next < instances) {
          const i = next++;
          await log(`{"type":"intent","instance":${i}}\n`, true);
          const submit = await request(`${baseUrl}/vendor/ai-influencer`, {
            method: 'POST',
            headers: { ...headers, 'idempotency-key': `minimal-${started}-${i}` },
            body: JSON.stringify({ tier: 'cats', seed: 1 + (i % 1000), variation_index: i }),
            dispatcher,
          });
          const { request_id: id } = await submit.body.json();
          await log(`{"type":"submitted","instance":${i},"id":"${id}"}\n`, false);
          let status;
          // Bounded: at zero latency a request is done at the first look; 1,000 looks is 10 s.
          for (let look = 0; look < 1_000; look++) {
            await pause();
            const res = await request(`${baseUrl}/requests/${id}/status`, { headers, dispatcher });
            status = await res.body.json();
            if (status.status === 'completed') break;
          }
          if (status?.status !== 'completed') throw new Error(`request ${id} did not complete`);
          await log(`{"type":"status","instance":${i},"url":"${status.images[0].url}"}\n`, false);
          const res = await request(status.images[0].url, { dispatcher });
          const bytes = Buffer.from(await res.body.arrayBuffer());
          createHash('sha256').update(bytes).digest('hex');
          const temp = join(dir, `.part-${i}`);
          const file = await open(temp, 'wx');
          await file.write(bytes);
          await file.datasync();
          await file.close();
          await link(temp, join(dir, `sheet-${i}.png`));
          await unlink(temp);
          await log(`{"type":"downloaded","instance":${i}}\n`, false);
        }
      }),
    );
    return performance.now() - started;
  } finally {
    await dispatcher.close();
  }
}

/** Appends lines in batches: one write per batch, and one fdatasync when a line of it must be durable. */
function groupCommit(handle) {
  let waiting = [];
  let writing;
  const drain = async () => {
    // Bounded: each turn takes every waiting line.
    while (waiting.length > 0) {
      const batch = waiting;
      waiting = [];
      await handle.write(batch.map((b) => b.line).join(''));
      if (batch.some((b) => b.durable)) await handle.datasync();
      for (const b of batch) b.resolve();
    }
    writing = undefined;
  };
  return (line, durable) =>
    new Promise((resolve) => {
      waiting.push({ line, durable, resolve });
      writing ??= drain();
    });
}
