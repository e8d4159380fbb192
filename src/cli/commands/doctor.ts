import { GenpipeError } from '../../api/errors.js';
import { parseRedisUrl, redisUrlOf } from '../../fleet/redis.js';
import { loadManifestFile } from '../../manifest/load.js';
import { checkLine, runDoctor, type DoctorInput } from '../../session/doctor.js';
import { EXIT } from '../../session/exit-codes.js';
import { connectionFlags, noExtraPositionals, parse } from '../args.js';
import { numberFlag } from '../number-flag.js';
import { defineCommand, tableOf, type OptionTable } from '../options.js';
import { CONNECTION, REDIS } from '../shared-options.js';

const DOCTOR_OPTIONS = {
  json: { type: 'boolean', help: 'print {ok, checks: [{name, status, message, durationMs}]} as JSON, for scripts' },
  'send-test': {
    type: 'boolean',
    help: 'deliver one test message to each notify target (marked as a test; no run happens); without it, a target is only checked for a valid URL whose host resolves',
  },
  notify: {
    type: 'string',
    value: 'URL',
    multiple: true,
    help: "a notify target to check, besides the manifest's notify: block",
  },
  timeout: {
    type: 'string',
    value: 'S',
    unit: 'seconds',
    defaultText: '5',
    help: 'how long each check may take before it fails',
  },
  redis: REDIS.redis,
} as const satisfies OptionTable;

const GROUPS = [{ title: 'Options', options: DOCTOR_OPTIONS }, CONNECTION] as const;

export const doctorCommand = defineCommand({
  name: 'doctor',
  usage: `Usage: genpipe doctor [MANIFEST] [--redis URL] [--send-test] [--json] [connection options]

Checks a setup before the night, all at once, each within --timeout, spending nothing: the
main-API credentials (the status of a random request id: 404 means they were accepted, 401
refused), that each service address answers, the catalogs the manifest reads, Redis (PING) with
--redis, each storage sink (its preflight writes a probe object under the prefix and removes
it), and each notify target. Legacy-platform credentials cannot be checked without spending:
it says so. One line per check: ok, failed (and why), or note.
Exit codes: 0 every check passed, 1 a check failed, 2 invalid flags.`,
  groups: GROUPS,
  async run(argv, io) {
    const { values, positionals } = parse(argv, tableOf(GROUPS), 'doctor');
    noExtraPositionals(positionals, 1, 'doctor');
    const seconds = numberFlag(values.timeout, '--timeout', { min: 0.1, max: 600 }) ?? 5;
    const redisUrl = redisUrlOf(values.redis, io.env, values.config);
    const input: DoctorInput = {
      flags: connectionFlags(values),
      env: io.env,
      manifest: manifestOf(positionals[0]),
      redis: redisUrl === undefined ? undefined : parseRedisUrl(redisUrl),
      notify: values.notify ?? [],
      sendTest: values['send-test'] === true,
      timeoutMs: seconds * 1000,
      signal: io.signal,
    };
    const checks = await runDoctor(input);
    if (io.signal.aborted) throw new GenpipeError('aborted', 'Interrupted while checking the setup; nothing was changed.');
    const ok = checks.every((c) => c.status !== 'failed');
    if (values.json) io.out(JSON.stringify({ ok, checks }, null, 2));
    else {
      for (const check of checks) io.out(checkLine(check));
      const failed = checks.filter((c) => c.status === 'failed').length;
      io.out(ok ? 'Every check passed.' : `${failed} check${failed === 1 ? '' : 's'} failed.`);
    }
    return ok ? EXIT.ok : EXIT.failed;
  },
});

/** The manifest, or the one sentence why it cannot be read (a failed check, not a refusal). */
function manifestOf(path: string | undefined): DoctorInput['manifest'] {
  if (path === undefined) return undefined;
  try {
    return { loaded: loadManifestFile(path) };
  } catch (error) {
    if (!(error instanceof GenpipeError)) throw error;
    return { problem: error.message.split('\n')[0] ?? error.message };
  }
}
