/** Placeholder video outputs. */
import { hash32 } from './prng.js';

/**
 * A tiny MP4 placeholder: an `ftyp` box and a `free` box carrying the seed text. Not playable,
 * but it has the right signature and content type (video outputs may be placeholders).
 */
export function placeholderMp4(seedText: string, totalBytes = 0): Buffer {
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
  if (totalBytes <= ftyp.length + free.length + 8) return Buffer.concat([ftyp, free]);
  // A realistic size (true sizes): an mdat box of seeded bytes fills it, so two videos differ.
  const mdat = Buffer.allocUnsafe(totalBytes - ftyp.length - free.length);
  mdat.writeUInt32BE(mdat.length, 0);
  mdat.write('mdat', 4, 'ascii');
  // A seeded 64 KiB block, repeated: the bytes differ by seed, and 20 MB cost one fill.
  const block = Buffer.alloc(64 * 1024);
  let x = hash32(seedText) || 1;
  for (let i = 0; i < block.length; i += 4) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    block.writeInt32LE(x | 0, i);
  }
  mdat.fill(block, 8);
  return Buffer.concat([ftyp, free, mdat]);
}
