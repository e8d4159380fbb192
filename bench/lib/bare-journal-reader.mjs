#!/usr/bin/env node
// The least a reader of a run's journal can do, as the baseline of the report benchmark (its
// target: the report of a million <= 1.2x a bare streaming reader of the same journal): stream
// the file, split it into lines, parse each record (after its checksum prefix) and count them by
// type. No checks, no states, no report. Prints the counts; reports its peak RSS on stderr as
// measure-cli.mjs does for genpipe. Argument: the journal's path.
import { createReadStream } from 'node:fs';
import { writeMeasure } from './measure-line.mjs';

const counts = {};
let rest = '';
const take = (line) => {
  if (line === '') return;
  const record = JSON.parse(line.slice(line.indexOf(' ') + 1));
  counts[record.type] = (counts[record.type] ?? 0) + 1;
};
for await (const chunk of createReadStream(process.argv[2], { encoding: 'utf8', highWaterMark: 1 << 20 })) {
  const lines = (rest + chunk).split('\n');
  rest = lines.pop();
  for (const line of lines) take(line);
}
take(rest);
process.stdout.write(`${JSON.stringify(counts)}\n`);
writeMeasure();
