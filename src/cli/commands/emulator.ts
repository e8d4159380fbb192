import { GenpipeError } from '../../api/errors.js';
import {
  accountFromPair,
  accountsFromFile,
  DEFAULT_ACCOUNT,
  loadFaultProfile,
  startEmulator,
  type AccountSpec,
  type Emulator,
} from '../../emulator/index.js';
import { noExtraPositionals, parse } from '../args.js';
import type { Command } from '../command.js';
import { EXIT } from '../../session/exit-codes.js';

const OPTIONS = {
  port: { type: 'string' },
  host: { type: 'string' },
  'time-scale': { type: 'string' },
  seed: { type: 'string' },
  faults: { type: 'string' },
  accounts: { type: 'string' },
  account: { type: 'string', multiple: true },
  'webhook-secret': { type: 'string' },
  vendor: { type: 'string' },
  'credits-per-usd': { type: 'string' },
  'failure-rate': { type: 'string' },
  'nsfw-rate': { type: 'string' },
  state: { type: 'string' },
  'strict-image-urls': { type: 'boolean' },
  'true-sizes': { type: 'boolean' },
} as const;

function number(value: string | undefined, flag: string, check: (n: number) => boolean, what: string): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n) || !check(n))
    throw new GenpipeError('invalid_input', `--${flag} must be ${what}, got ${JSON.stringify(value)}.`);
  return n;
}

export const emulatorCommand: Command = {
  name: 'emulator',
  help: `Usage: genpipe emulator [options]

Runs a faithful local Generation Service until Ctrl-C. The first line printed is
"listening on http://HOST:PORT"; the second gives the default credentials.

Options:
  --port N                port to listen on (default 4010; 0 picks a free one)
  --host ADDR             address to bind (default 127.0.0.1)
  --time-scale X          multiplies every service duration (default 1; 0 = instant)
  --seed N                seed of durations, outcomes and faults (default 1); ids are
                          random, never repeated across emulator processes
  --faults PROFILE|FILE   none, flaky, hostile, or a YAML/JSON fault file (default none);
                          a file's error_502_after / error_504_after answer 502 / 504 after
                          processing (the request is made and charged), reset_after drops
                          the connection after processing, status: foreign_status answers a
                          status or job-set GET about another request
  --accounts FILE         YAML/JSON accounts file (key_id, secret, credits, agent_enabled, models)
  --account ID:SECRET     add an account with default credits (repeatable)
  --webhook-secret S      sent as X-Webhook-Secret-Key on hf_webhook deliveries
  --vendor NAME           vendor path segment (default "vendor")
  --credits-per-usd N     credit rate (default 100)
  --failure-rate P        share of generations that fail (default 0)
  --nsfw-rate P           share of generations that end nsfw (default 0)
  --state DIR             keep requests, job sets, the ledger and Idempotency-Key records in
                          DIR across restarts (created if missing; one emulator at a time)
  --true-sizes            serve outputs at their true sizes (2K sheets, marketing images by
                          resolution, 20 MB videos); default: small drawings
  --strict-image-urls     refuse reference image URLs the emulator cannot reach (by default
                          they are accepted offline; loopback and its own URLs are always
                          fetched, decoded and checked)

Inspection (loopback only): /_emulator/ledger, /_emulator/requests, /_emulator/stats,
/_emulator/webhooks. See docs/emulator.md.`,
  async run(argv, io) {
    const { values, positionals } = parse(argv, OPTIONS, 'emulator');
    noExtraPositionals(positionals, 0, 'emulator');
    const port = number(values.port, 'port', (n) => Number.isInteger(n) && n >= 0 && n <= 65_535, 'an integer from 0 to 65535') ?? 4010;
    const timeScale = number(values['time-scale'], 'time-scale', (n) => n >= 0, 'a number >= 0');
    const seed = number(values.seed, 'seed', (n) => Number.isInteger(n) && n >= 0 && n <= 4_294_967_295, 'an integer from 0 to 4294967295');
    const creditsPerUsd = number(values['credits-per-usd'], 'credits-per-usd', (n) => n > 0, 'a positive number');
    const failureRate = number(values['failure-rate'], 'failure-rate', (n) => n >= 0 && n <= 1, 'a number from 0 to 1');
    const nsfwRate = number(values['nsfw-rate'], 'nsfw-rate', (n) => n >= 0 && n <= 1, 'a number from 0 to 1');
    if (values.vendor !== undefined && !/^[A-Za-z0-9_-]+$/.test(values.vendor))
      throw new GenpipeError('invalid_input', '--vendor must be one path segment of letters, digits, - or _.');
    if (values['webhook-secret'] === '') throw new GenpipeError('invalid_input', '--webhook-secret must not be empty.');
    if (values.state === '') throw new GenpipeError('invalid_input', '--state must name a directory.');
    const faults = loadFaultProfile(values.faults ?? 'none');
    const accounts: AccountSpec[] = values.accounts !== undefined ? accountsFromFile(values.accounts) : [DEFAULT_ACCOUNT];
    for (const pair of values.account ?? []) {
      const extra = accountFromPair(pair);
      const i = accounts.findIndex((a) => a.keyId === extra.keyId);
      if (i >= 0) accounts[i] = extra;
      else accounts.push(extra);
    }

    let emu: Emulator;
    try {
      emu = await startEmulator({
        port,
        host: values.host ?? '127.0.0.1',
        faults,
        accounts,
        ...(timeScale !== undefined ? { timeScale } : {}),
        ...(seed !== undefined ? { seed } : {}),
        ...(creditsPerUsd !== undefined ? { creditsPerUsd } : {}),
        ...(failureRate !== undefined ? { failureRate } : {}),
        ...(nsfwRate !== undefined ? { nsfwRate } : {}),
        ...(values.vendor !== undefined ? { vendor: values.vendor } : {}),
        ...(values['webhook-secret'] !== undefined ? { webhookSecret: values['webhook-secret'] } : {}),
        ...(values.state !== undefined ? { stateDir: values.state } : {}),
        ...(values['strict-image-urls'] === true ? { strictImageUrls: true } : {}),
        ...(values['true-sizes'] === true ? { trueSizes: true } : {}),
        log: (line) => io.err(line),
      });
    } catch (error) {
      // A refused --state directory says so itself (exit 2).
      if (error instanceof GenpipeError) throw error;
      const code = (error as NodeJS.ErrnoException).code ?? (error instanceof Error ? error.message : String(error));
      throw new GenpipeError('config', `Cannot listen on ${values.host ?? '127.0.0.1'}:${port}: ${code}.`, { cause: error });
    }
    io.out(`listening on ${emu.url}`);
    const first = accounts[0];
    io.out(
      first === undefined
        ? 'no accounts'
        : `credentials: HF_KEY=${first.keyId}:${first.secret}` +
            (accounts.length > 1 ? ` (and ${accounts.length - 1} more account(s))` : ''),
    );
    const state = emu.state
      ? `; state in ${emu.state.dir} (${emu.state.requests} request(s), ${emu.state.ledgerEntries} ledger entries restored)`
      : '';
    io.out(
      `seed ${emu.seed}, time scale ${emu.timeScale}, faults ${faults.name}${state}; inspection at ${emu.url}/_emulator/ledger; Ctrl-C stops`,
    );
    await new Promise<void>((resolve) => {
      if (io.signal.aborted) resolve();
      else io.signal.addEventListener('abort', () => resolve(), { once: true });
    });
    await emu.close();
    return EXIT.ok;
  },
};
