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
import { defineCommand, tableOf, type OptionTable } from '../options.js';
import { EXIT } from '../../session/exit-codes.js';

const OPTIONS = {
  port: { type: 'string', value: 'N', defaultText: '4010', help: 'port to listen on; 0 picks a free one' },
  host: { type: 'string', value: 'ADDR', defaultText: '127.0.0.1', help: 'address to bind' },
  'time-scale': { type: 'string', value: 'X', defaultText: '1', help: 'multiplies every service duration; 0 = instant' },
  seed: {
    type: 'string',
    value: 'N',
    defaultText: '1',
    help: 'seed of durations, outcomes and faults; ids are random, never repeated across emulator processes',
  },
  faults: {
    type: 'string',
    value: 'PROFILE|FILE',
    defaultText: 'none',
    help: "none, flaky, hostile, or a YAML/JSON fault file; a file's error_502_after / error_504_after answer 502 / 504 after processing (the request is made and charged), reset_after drops the connection after processing, status: foreign_status answers a status or job-set GET about another request",
  },
  accounts: { type: 'string', value: 'FILE', help: 'YAML/JSON accounts file (key_id, secret, credits, agent_enabled, models)' },
  account: { type: 'string', value: 'ID:SECRET', multiple: true, help: 'add an account with default credits' },
  'webhook-secret': { type: 'string', value: 'S', help: 'sent as X-Webhook-Secret-Key on hf_webhook deliveries' },
  vendor: { type: 'string', value: 'NAME', defaultText: 'vendor', help: 'vendor path segment' },
  'credits-per-usd': { type: 'string', value: 'N', defaultText: '100', help: 'credit rate' },
  'failure-rate': { type: 'string', value: 'P', defaultText: '0', help: 'share of generations that fail' },
  'nsfw-rate': { type: 'string', value: 'P', defaultText: '0', help: 'share of generations that end nsfw' },
  state: {
    type: 'string',
    value: 'DIR',
    help: 'keep requests, job sets, the ledger and Idempotency-Key records in DIR across restarts (created if missing; one emulator at a time)',
  },
  'strict-image-urls': {
    type: 'boolean',
    help: 'refuse reference image URLs the emulator cannot reach from this machine, as unreachable (default: accepted, as an offline stand-in)',
  },
  'true-sizes': {
    type: 'boolean',
    help: 'serve outputs at their true sizes: sheets at 2K 16:9, marketing images by resolution and aspect ratio, videos of 20 MiB',
  },
} as const satisfies OptionTable;
const GROUPS = [{ title: 'Options', options: OPTIONS }] as const;

function number(value: string | undefined, flag: string, check: (n: number) => boolean, what: string): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n) || !check(n))
    throw new GenpipeError('invalid_input', `--${flag} must be ${what}, got ${JSON.stringify(value)}.`);
  return n;
}

export const emulatorCommand = defineCommand({
  name: 'emulator',
  usage: `Usage: genpipe emulator [options]

Runs a faithful local Generation Service until Ctrl-C. The first line printed is
"listening on http://HOST:PORT"; the second gives the default credentials.`,
  groups: GROUPS,
  footer: `Inspection (loopback only): /_emulator/ledger, /_emulator/requests, /_emulator/stats,
/_emulator/webhooks. See docs/emulator.md.`,
  async run(argv, io) {
    const { values, positionals } = parse(argv, tableOf(GROUPS), 'emulator');
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
});
