/** Placeholder video outputs. */
/**
 * A tiny MP4 placeholder: an `ftyp` box and a `free` box carrying the seed text. Not playable,
 * but it has the right signature and content type (video outputs may be placeholders).
 */
export function placeholderMp4(seedText: string): Buffer {
  const ftyp = Buffer.alloc(24);
  ftyp.writeUInt32BE(24, 0);
  ftyp.write('ftypisom', 4, 'ascii');
  ftyp.writeUInt32BE(0x200, 12);
  ftyp.write('isommp41', 16, 'ascii');
  const note = Buffer.from(`genpipe emulator placeholder ${seedText}`, 'utf8');
  const free = Buffer.alloc(8 + note.length);
  free.writeUInt32BE(free.length, 0);
  free.write('free', 4, 'ascii');
  note.copy(free, 8);
  return Buffer.concat([ftyp, free]);
}
