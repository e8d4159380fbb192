import { connectionFlags, noExtraPositionals, parse, positional } from '../args.js';
import { defineCommand, tableOf } from '../options.js';
import { CONNECTION, EMULATOR } from '../shared-options.js';
import { EXIT } from '../../session/exit-codes.js';
import { openCommandClient } from '../../session/embedded-emulator.js';
import { oneLine } from '../../util/terminal-text.js';
import { checkRequestFollow } from '../../models/follow-check.js';

const GROUPS = [
  { title: 'Options', options: { json: { type: 'boolean', help: 'print the status as the service answered it, as JSON' }, ...EMULATOR } },
  CONNECTION,
] as const;

export const statusCommand = defineCommand({
  name: 'status',
  usage: `Usage: genpipe status <request_id> [--json] [--emulator]

Shows the status and outputs of one request.`,
  groups: GROUPS,
  async run(argv, io) {
    const { values, positionals } = parse(argv, tableOf(GROUPS), 'status');
    const requestId = positional(positionals, 0, 'a request id', 'status');
    noExtraPositionals(positionals, 1, 'status');
    const { client, close } = await openCommandClient(connectionFlags(values), io, { emulator: values.emulator === true });
    try {
      const status = await client.requests.status(requestId, { signal: io.signal });
      // An answer about another request is not this one's status: exit 1 with one sentence.
      checkRequestFollow(requestId, status);
      if (values.json) {
        io.out(JSON.stringify(status, null, 2));
        return EXIT.ok;
      }
      io.out(`${status.request_id}: ${status.status}`);
      if (status.error) io.out(`error: ${oneLine(status.error)}`);
      for (const image of status.images ?? []) io.out(`image: ${image.url}`);
      if (status.video) io.out(`video: ${status.video.url}`);
      if (status.audio) io.out(`audio: ${status.audio.url}`);
      for (const audio of status.audios ?? []) io.out(`audio: ${audio.url}`);
      return EXIT.ok;
    } finally {
      await close();
    }
  },
});
