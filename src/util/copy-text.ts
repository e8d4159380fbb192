import { createReadStream } from 'node:fs';

/** Streams a UTF-8 text file into `write`, in the chunks it is read in (a character is never split). */
export async function copyText(path: string, write: (chunk: string) => Promise<unknown>): Promise<void> {
  const stream = createReadStream(path, { encoding: 'utf8', highWaterMark: 256 * 1024 });
  for await (const chunk of stream) await write(chunk as string);
}
