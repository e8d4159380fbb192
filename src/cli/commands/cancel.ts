import { connectionFlags, noExtraPositionals, parse, positional } from '../args.js';
import { defineCommand, tableOf } from '../options.js';
import { CONNECTION, EMULATOR } from '../shared-options.js';
import { EXIT } from '../../session/exit-codes.js';
import { openCommandClient } from '../../session/embedded-emulator.js';

const GROUPS = [{ title: 'Options', options: EMULATOR }, CONNECTION] as const;

export const cancelCommand = defineCommand({
  name: 'cancel',
  usage: `Usage: genpipe cancel <request_id> [--emulator]

Only a queued request can be canceled; once it runs, the service refuses (exit 1).`,
  groups: GROUPS,
  async run(argv, io) {
    const { values, positionals } = parse(argv, tableOf(GROUPS), 'cancel');
    const requestId = positional(positionals, 0, 'a request id', 'cancel');
    noExtraPositionals(positionals, 1, 'cancel');
    const { client, close } = await openCommandClient(connectionFlags(values), io, { emulator: values.emulator === true });
    try {
      if (await client.requests.cancel(requestId, { signal: io.signal })) {
        io.out(`${requestId}: cancel accepted`);
        return EXIT.ok;
      }
      io.err(`genpipe: ${requestId} is no longer queued, so it cannot be canceled.`);
      return EXIT.failed;
    } finally {
      await close();
    }
  },
});
