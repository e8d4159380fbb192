/**
 * The storage sink's invariants over a whole history (history-run.ts, a world with a sink): every
 * run of the history writes one prefix with no `{{ run.id }}`, so later runs meet earlier runs'
 * objects at their keys, and kills land during uploads. After it:
 * - no object is lost: every key a journal says was uploaded (or found there) holds an object;
 * - the object at a key is what the last journaled write put there (or what a replace journaled
 *   just before its PUT put there, killed before its record);
 * - nothing is overwritten without `overwrite`: each write of other bytes than the key held
 *   follows a `sink_overwrite` of the same run for its own earlier object (a re-roll or a retry
 *   made the file again), never another run's, and no `sink_overwrite` says `on_conflict`.
 */
import type { JournalRecord, JournalRecordOf } from '../../src/run/journal/journal-records.js';

type Write = (JournalRecordOf<'sink_uploaded'> | JournalRecordOf<'sink_overwrite'>) & { run: string; order: number };

/** `objects`: the store's objects at the end, key → sha256 of their bytes. */
export function checkSinkInvariants(
  runs: readonly { runDir: string; records: readonly JournalRecord[] }[],
  objects: ReadonlyMap<string, string>,
): string[] {
  const violations: string[] = [];
  const byKey = new Map<string, Write[]>();
  let order = 0;
  for (const { runDir, records } of runs) {
    const run = runDir.split('/').at(-1) as string;
    for (const record of records) {
      if (record.type !== 'sink_uploaded' && record.type !== 'sink_overwrite') continue;
      const list = byKey.get(record.key) ?? [];
      list.push({ ...record, run, order: order++ });
      byKey.set(record.key, list);
      if (record.type === 'sink_overwrite' && record.reason !== 'remade')
        violations.push(`run ${run} replaced ${record.key} as on_conflict: overwrite allows, which the manifest never sets`);
    }
  }
  for (const [key, writes] of byKey) {
    writes.sort((a, b) => (a.at ?? 0) - (b.at ?? 0) || a.order - b.order);
    const uploads = writes.filter((w): w is Write & JournalRecordOf<'sink_uploaded'> => w.type === 'sink_uploaded');
    const stored = objects.get(key);
    if (uploads.length === 0) continue;
    if (stored === undefined) {
      violations.push(`${key}: journaled as uploaded by ${uploads.map((u) => u.run).join(', ')}, and not in the store (lost)`);
      continue;
    }
    const last = uploads.at(-1) as Write;
    const laterReplaces = writes.filter((w) => w.type === 'sink_overwrite' && w.order !== last.order && (w.at ?? 0) >= (last.at ?? 0));
    if (stored !== last.sha256 && !laterReplaces.some((w) => w.sha256 === stored))
      violations.push(
        `${key}: the store holds bytes ${stored.slice(0, 12)}, not what the last journaled write (${last.run}) put there (${last.sha256.slice(0, 12)})`,
      );
    // Each upload of other bytes than the key held before: its own run's journaled replace of its own object.
    for (let i = 1; i < uploads.length; i++) {
      const before = uploads[i - 1] as Write;
      const now = uploads[i] as Write & JournalRecordOf<'sink_uploaded'>;
      if (now.skipped || now.sha256 === before.sha256) continue;
      const replace = writes.find(
        (w) =>
          w.type === 'sink_overwrite' &&
          w.run === now.run &&
          w.sha256 === now.sha256 &&
          w.order < now.order &&
          (w.at ?? 0) <= (now.at ?? 0),
      );
      if (!replace)
        violations.push(`${key}: run ${now.run} wrote over what ${before.run} had put there, with no sink_overwrite journaled first`);
      else if (before.run !== now.run)
        violations.push(`${key}: run ${now.run} replaced run ${before.run}'s object (only its own may be replaced)`);
    }
  }
  return violations;
}
