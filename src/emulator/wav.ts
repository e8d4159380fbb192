/** A valid PCM WAV (RIFF, mono, 16-bit): a short tone whose pitch depends on a seed. */
import { hash32 } from './prng.js';

export function encodeWav(samples: Int16Array, sampleRate: number): Buffer {
  const data = samples.length * 2;
  const out = Buffer.alloc(44 + data);
  out.write('RIFF', 0, 'ascii');
  out.writeUInt32LE(36 + data, 4);
  out.write('WAVE', 8, 'ascii');
  out.write('fmt ', 12, 'ascii');
  out.writeUInt32LE(16, 16); // fmt chunk size
  out.writeUInt16LE(1, 20); // PCM
  out.writeUInt16LE(1, 22); // mono
  out.writeUInt32LE(sampleRate, 24);
  out.writeUInt32LE(sampleRate * 2, 28); // byte rate
  out.writeUInt16LE(2, 32); // block align
  out.writeUInt16LE(16, 34); // bits per sample
  out.write('data', 36, 'ascii');
  out.writeUInt32LE(data, 40);
  for (let i = 0; i < samples.length; i++) out.writeInt16LE(samples[i] ?? 0, 44 + i * 2);
  return out;
}

/** Half a second at 8 kHz; the tone is 220–880 Hz depending on `seedText`. */
export function toneWav(seedText: string, seconds = 0.5, sampleRate = 8_000): Buffer {
  const freq = 220 + (hash32(seedText) % 660);
  const n = Math.round(seconds * sampleRate);
  const samples = new Int16Array(n);
  for (let i = 0; i < n; i++) samples[i] = Math.round(8_000 * Math.sin((2 * Math.PI * freq * i) / sampleRate));
  return encodeWav(samples, sampleRate);
}
