/**
 * The worker's intent write, atomic with the job's lock: one Lua script that writes the intent into
 * the job only while the job's BullMQ lock still holds this worker's token, no coordinator withdrew
 * it, and no other holder wrote an intent since this worker read the job. A worker that lost its
 * job (paused or cut off past its lock lease, the job taken by another worker) so writes nothing
 * and sends nothing, even when its client re-sends the write after reconnecting.
 */
import type { Job, Queue } from 'bullmq';
import type { InstanceJobData, InstanceJobResult } from './instance-job.js';
import { withdrawnKey } from './instance-job.js';

const COMMAND = 'genpipeWriteIntent';

/**
 * KEYS[1] the job's hash, KEYS[2] its lock, KEYS[3] its withdrawal mark.
 * ARGV[1] this worker's lock token, ARGV[2] the intentAt this worker read ('' for none),
 * ARGV[3] the intentAt it writes, ARGV[4] the job's new data.
 * Answers 1 written (or already written by this very call, re-sent), 0 the lock is not this
 * worker's, -1 withdrawn, -2 another holder wrote an intent meanwhile, -3 the job is gone.
 */
const LUA = `
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
if redis.call('EXISTS', KEYS[3]) == 1 then return -1 end
local raw = redis.call('HGET', KEYS[1], 'data')
if not raw then return -3 end
local current = cjson.decode(raw).intentAt
if current == cjson.null then current = nil end
if current ~= nil and current == tonumber(ARGV[3]) then return 1 end
if current ~= tonumber(ARGV[2]) then return -2 end
redis.call('HSET', KEYS[1], 'data', ARGV[4])
return 1
`;

export type IntentWrite = 'written' | 'lock_lost' | 'withdrawn' | 'intent_changed' | 'gone';

const ANSWERS: Record<number, IntentWrite> = { 1: 'written', 0: 'lock_lost', [-1]: 'withdrawn', [-2]: 'intent_changed', [-3]: 'gone' };

const defined = new WeakSet<object>();

/** Writes `intentAt` into the job's data if, and only if, this worker (`token`) still holds it. */
export async function writeIntent(
  queue: Queue<InstanceJobData, InstanceJobResult>,
  job: Job<InstanceJobData, InstanceJobResult>,
  token: string,
  intentAt: number,
): Promise<IntentWrite> {
  const client = await queue.getBackend().client;
  if (!defined.has(client)) {
    client.defineCommand(COMMAND, { numberOfKeys: 3, lua: LUA });
    defined.add(client);
  }
  const id = job.id ?? '';
  const jobKey = queue.toKey(id);
  const read = job.data.intentAt;
  const answer = (await client.runCommand(COMMAND, [
    jobKey,
    `${jobKey}:lock`,
    withdrawnKey(queue, id),
    token,
    read === undefined ? '' : String(read),
    String(intentAt),
    JSON.stringify({ ...job.data, intentAt }),
  ])) as number;
  const outcome = ANSWERS[Number(answer)];
  if (outcome === undefined) throw new Error(`the intent script answered ${String(answer)}`);
  if (outcome === 'written') job.data = { ...job.data, intentAt };
  return outcome;
}

/**
 * For the lock test only: with `GENPIPE_FLEET_PAUSE_AT=before_intent`, a worker process stops
 * itself (SIGSTOP) just before its first intent write, as a host paused past its lock lease would.
 * Unset, one comparison.
 */
export function pauseBeforeIntent(): void {
  if (process.env.GENPIPE_FLEET_PAUSE_AT !== 'before_intent' || paused) return;
  paused = true;
  process.kill(process.pid, 'SIGSTOP');
}
let paused = false;
