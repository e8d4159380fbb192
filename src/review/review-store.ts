/**
 * `review.json` in a run directory: the decisions a reviewer made in `genpipe review`, by instance
 * id: `{"<id>": {"decision": "approved" | "rejected", "starred": bool, "at": ISO time}}` (a cell
 * neither approved nor rejected has no `decision`).
 *
 * Each decision is saved at once and atomically (a temp file, synced, renamed over the old one),
 * and decisions are applied one at a time on the file as it is on disk, merged per instance: two
 * browser tabs deciding on two cells at the same moment both keep their decision.
 */
import { open, readFile, rename, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import * as z from 'zod';
import { GenpipeError } from '../api/errors.js';
import { outputsDigest, replayFile } from '../run/journal/run-state.js';
import { RUN_FILES, runFile } from '../run/files/run-layout.js';

export const REVIEW_FILE = RUN_FILES.review;

export const Decision = z.enum(['approved', 'rejected']);
export type Decision = z.infer<typeof Decision>;

export const ReviewEntry = z.strictObject({
  decision: Decision.optional(),
  starred: z.boolean(),
  at: z.iso.datetime(),
  /**
   * The output the decision judged (run-state.ts outputsDigest): `--retry rejected` remakes an
   * instance only while this is still its output, so a repeat with no new decision sends nothing.
   * Absent in files written by older versions of genpipe, and for a cell with no output yet.
   */
  sha256: z
    .string()
    .regex(/^[0-9a-f]{64}$/)
    .optional(),
});
export type ReviewEntry = z.infer<typeof ReviewEntry>;

export const ReviewFile = z.record(z.string(), ReviewEntry);
export type ReviewFile = z.infer<typeof ReviewFile>;

/** A change one click makes: a decision (null clears it), a star, or both. */
export const DecisionChange = z.strictObject({
  instance: z.string().min(1).max(10_000),
  decision: Decision.nullable().optional(),
  starred: z.boolean().optional(),
});
export type DecisionChange = z.infer<typeof DecisionChange>;

/** The decisions of a run; an absent file is no decision yet. A damaged file is refused with its path. */
export async function readReview(runDir: string): Promise<ReviewFile> {
  const path = join(runDir, REVIEW_FILE);
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return {};
    throw new GenpipeError('invalid_file', `Cannot read ${path}: ${(error as NodeJS.ErrnoException).code ?? 'unknown error'}.`);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new GenpipeError('invalid_file', `${path} is not valid JSON; fix or remove it.`);
  }
  const parsed = ReviewFile.safeParse(json);
  if (!parsed.success)
    throw new GenpipeError('invalid_file', `${path} is not a review file (instance id -> {decision, starred, at}); fix or remove it.`);
  return parsed.data;
}

/** The ids a review decided so: `approved` or `rejected`. */
export async function decidedIds(runDir: string, decision: Decision): Promise<Set<string>> {
  return new Set((await decisions(runDir, decision)).keys());
}

/** The instances a review decided so, each with the output it judged (undefined: not recorded). */
export async function decisions(runDir: string, decision: Decision): Promise<Map<string, string | undefined>> {
  const review = await readReview(runDir);
  return new Map(Object.entries(review).flatMap(([id, entry]) => (entry.decision === decision ? [[id, entry.sha256] as const] : [])));
}

/** Applies decisions one at a time, each read-merge-write on the file as it is on disk. */
export class ReviewStore {
  #queue: Promise<unknown> = Promise.resolve();
  /** Each instance's current output (outputsDigest), from the journal, read again when an instance is not in it. */
  #digests: Map<string, string | undefined> | undefined;

  constructor(
    readonly runDir: string,
    private readonly now: () => Date = () => new Date(),
  ) {}

  apply(change: DecisionChange): Promise<ReviewEntry> {
    const next = this.#queue.then(() => this.#apply(change));
    this.#queue = next.catch(() => undefined);
    return next;
  }

  async #digestOf(instance: string): Promise<string | undefined> {
    if (this.#digests?.get(instance) === undefined) this.#digests = await currentDigests(this.runDir);
    return this.#digests.get(instance);
  }

  async #apply(change: DecisionChange): Promise<ReviewEntry> {
    const review = await readReview(this.runDir);
    const before = review[change.instance];
    const entry: ReviewEntry = { starred: change.starred ?? before?.starred ?? false, at: this.now().toISOString() };
    const decision = change.decision === undefined ? before?.decision : (change.decision ?? undefined);
    if (decision !== undefined) entry.decision = decision;
    // A new decision judges the output the instance has now; a star alone keeps what was judged.
    const sha256 =
      change.decision === undefined ? before?.sha256 : decision === undefined ? undefined : await this.#digestOf(change.instance);
    if (sha256 !== undefined) entry.sha256 = sha256;
    review[change.instance] = entry;
    await writeAtomically(join(this.runDir, REVIEW_FILE), `${JSON.stringify(review, null, 2)}\n`);
    return entry;
  }
}

/** Reads the instances' current outputs from the run's journal (a run may still be adding to it). */
async function currentDigests(runDir: string): Promise<Map<string, string | undefined>> {
  const path = runFile(runDir, 'journal');
  const state = await replayFile(path).catch((error: unknown) => {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw error;
  });
  return new Map([...(state?.instances ?? [])].map(([id, entry]) => [id, outputsDigest(entry)]));
}

async function writeAtomically(path: string, text: string): Promise<void> {
  const temp = `${path}.${process.pid}.tmp`;
  const handle = await open(temp, 'w', 0o644);
  try {
    await handle.writeFile(text);
    await handle.sync();
  } catch (error) {
    await handle.close();
    await unlink(temp).catch(() => undefined);
    throw error;
  }
  await handle.close();
  await rename(temp, path);
}
