#!/usr/bin/env node
// The store alone, as a baseline for the sink benchmark: uploads every .png under DIR to an S3
// store with the AWS SDK v3, as genpipe's sink does for each output (the file read, its SHA-256
// computed, one PutObject with the checksum, the content type and the sha256 metadata), at
// CONCURRENCY, and nothing else: no generation service, no journal. A process of its own, timed by
// the benchmark from spawn to exit, as genpipe is. Arguments: ENDPOINT BUCKET PREFIX CONCURRENCY DIR;
// credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY. Its CPU time (user and system,
// every thread) goes to stderr as a __measure__ line, as lib/measure-cli.mjs reports genpipe's.
// Talks only to ENDPOINT (s3rver on 127.0.0.1); bounded by the files found.
import { createHash } from 'node:crypto';
import { readdirSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { writeMeasure } from './measure-line.mjs';

const [endpoint, bucket, prefix, concurrency, dir] = process.argv.slice(2);
const files = readdirSync(dir, { recursive: true })
  .map(String)
  .filter((f) => f.endsWith('.png'))
  .map((f) => join(dir, f));
const client = new S3Client({ endpoint, forcePathStyle: true, region: 'us-east-1' });
let next = 0;
await Promise.all(
  Array.from({ length: Number(concurrency) }, async () => {
    while (next < files.length) {
      const i = next++;
      const file = files[i];
      const bytes = await readFile(file);
      const sha256 = createHash('sha256').update(bytes).digest();
      await client.send(
        new PutObjectCommand({
          Bucket: bucket,
          Key: `${prefix}/${i}.png`,
          Body: bytes,
          ContentLength: bytes.length,
          ContentType: 'image/png',
          ChecksumSHA256: sha256.toString('base64'),
          Metadata: { sha256: sha256.toString('hex') },
        }),
      );
    }
  }),
);
client.destroy();
writeMeasure({ files: files.length });
