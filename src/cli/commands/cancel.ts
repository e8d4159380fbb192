import { CONNECTION_HELP, CONNECTION_OPTIONS, connectionFlags, noExtraPositionals, parse, positional } from '../args.js';
import type { Command } from '../command.js';
import { EXIT } from '../../session/exit-codes.js';
import { EMULATOR_FLAG_HELP, openCommandClient } from '../../session/embedded-emulator.js';

export const cancelCommand: Command = {
  name: 'cancel',
  help: `Usage: genpipe cancel <request_id> [--emulator]

Only a queued request can be canceled; once it runs, the service refuses (exit 1).

${EMULATOR_FLAG_HELP}
${CONNECTION_HELP}`,
  async run(argv, io) {
    const { values, positionals } = parse(argv, { ...CONNECTION_OPTIONS, emulator: { type: 'boolean' } }, 'cancel');
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
};
