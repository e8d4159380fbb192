/**
 * Identity, not behaviour: request, job-set, session, message and media ids come from the system's
 * randomness, never from `--seed`. Two emulator processes with the same seed (or one restarted over
 * its `--state`) then never hand out the same id, so a client that kept an id from one of them can
 * never take another job's result for its own. The seed still drives every duration, outcome and
 * fault. Preset ids stay seeded: they are a catalog, stable across restarts as a real one is.
 */
import { randomBytes, randomUUID } from 'node:crypto';

/** A version-4 UUID. */
export const newUuid = (): string => randomUUID();

/** `bytes` random bytes as lowercase hex. */
export const newHex = (bytes: number): string => randomBytes(bytes).toString('hex');
