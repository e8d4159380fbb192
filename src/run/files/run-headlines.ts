/**
 * `headlines.json` in a run directory: each instance's headline text (models/headline-fields.ts:
 * a marketing image's prompt, an agent's question), written once when the run starts, so the
 * gallery can show what each cell is about without the request bodies, which the journal does not
 * keep. A view's input: made only for runs a gallery shows in full, and never fatal to the run.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { headlineOf } from '../../models/headline-fields.js';
import { PlannedInstance, type Plan } from '../../plan/plan.js';
import { redact } from '../../util/redact.js';
import { RUN_FILES } from './run-layout.js';

export const HEADLINES_FILE = RUN_FILES.headlines;

/** Largest plan whose headlines are written (the gallery's own cap on cells). */
export const MAX_HEADLINE_INSTANCES = 100_000;

/** Writes headlines.json for `plan` (nothing for a bigger plan); false when it could not be made. */
export async function saveHeadlines(dir: string, plan: Plan): Promise<boolean> {
  if (plan.totalInstances > MAX_HEADLINE_INSTANCES) return false;
  const headlines: Record<string, string> = {};
  try {
    for (const step of plan.steps) {
      // Without the options catalog: an instance that needs it to be built has no headline here.
      for (const entry of plan.entries(step.id)) {
        if (!(entry instanceof PlannedInstance)) continue;
        const text = headlineOf(step.model, entry.body);
        if (text !== undefined) headlines[entry.id] = redact(text);
      }
    }
    await writeFile(join(dir, HEADLINES_FILE), `${JSON.stringify(headlines)}\n`, { flag: 'wx' });
    return true;
  } catch {
    return false;
  }
}

/** The headlines of a run by instance id; empty when it has none (or they cannot be read). */
export async function readHeadlines(runDir: string): Promise<Map<string, string>> {
  try {
    const json = JSON.parse(await readFile(join(runDir, HEADLINES_FILE), 'utf8')) as unknown;
    if (json === null || typeof json !== 'object' || Array.isArray(json)) return new Map();
    return new Map(Object.entries(json as Record<string, unknown>).filter((e): e is [string, string] => typeof e[1] === 'string'));
  } catch {
    return new Map();
  }
}
