/**
 * Which service a run talks to, recorded in its plan.json so that `genpipe resume DIR` finds the
 * requests it sent with no flag: a flag, the environment or the config file still wins (with a
 * warning when it differs), and a run made against the embedded emulator says that its requests
 * ended with that process.
 */
import { configFilePath, readConfigFile, type ClientConfig, type ConfigFlags } from '../api/config.js';
import { GenpipeError } from '../api/errors.js';
import type { PlanFile, RunService } from '../run/files/run-dir.js';

/** What plan.json records: addresses only, never credentials. */
export function serviceRecord(config: ClientConfig, embedded: boolean): RunService {
  return {
    base_url: config.baseUrl,
    platform_url: config.platformUrl,
    cdn_url: config.cdnUrl,
    vendor: config.vendor,
    embedded_emulator: embedded,
  };
}

/** The sentence a resume of an embedded-emulator run prints (or refuses with, without --emulator). */
export function embeddedRunSentence(runDir: string): string {
  return `This run was made against the embedded emulator (--emulator), so the requests it had in flight ended with that process; genpipe resume ${runDir} --emulator --retry unknown resends them.`;
}

/**
 * The connection flags of a resume: the given ones, with the run's recorded addresses filling in
 * whatever no flag, environment variable or config file sets. Runs recorded before plan.json held
 * a service, and resumes with `--emulator`, use the flags as given.
 */
export function resumeFlags(
  previous: PlanFile,
  runDir: string,
  flags: ConfigFlags,
  env: NodeJS.ProcessEnv,
  emulator: boolean,
): ConfigFlags {
  const recorded = previous.service;
  if (recorded === undefined || emulator) return flags;
  // Its address was a loopback port of a process that has exited; what listens there now is not that service.
  if (recorded.embedded_emulator) throw new GenpipeError('invalid_input', embeddedRunSentence(runDir));
  const configPath = configFilePath(flags, env);
  const file = configPath ? readConfigFile(configPath) : {};
  const pick = (flag: string | undefined, envName: string, fileValue: string | undefined): string | undefined =>
    flag ?? (env[envName] || undefined) ?? fileValue;
  const base = pick(flags.baseUrl, 'GENPIPE_BASE_URL', file.base_url);
  // A configured main address moves the whole run: the other addresses then default from it, as for a run.
  if (base !== undefined) return flags;
  return {
    ...flags,
    baseUrl: recorded.base_url,
    platformUrl: pick(flags.platformUrl, 'GENPIPE_PLATFORM_URL', file.platform_url) ?? recorded.platform_url,
    cdnUrl: pick(flags.cdnUrl, 'GENPIPE_CDN_URL', file.cdn_url) ?? recorded.cdn_url,
    vendor: pick(flags.vendor, 'GENPIPE_VENDOR', file.vendor) ?? recorded.vendor,
  };
}

/** One warning line when a resume talks to another service than the run recorded, naming each difference. */
export function movedServiceWarning(recorded: RunService | undefined, config: ClientConfig, embedded: boolean): string | undefined {
  if (recorded === undefined || recorded.embedded_emulator) return undefined;
  if (embedded)
    return `warning: resuming against the embedded emulator, not ${recorded.base_url} where the run was made; the requests the run sent are known only there.`;
  const now = serviceRecord(config, false);
  const keys = ['base_url', 'platform_url', 'cdn_url', 'vendor'] as const;
  const moved = keys.filter((k) => now[k] !== recorded[k]).map((k) => `${k} ${now[k]} (the run recorded ${recorded[k]})`);
  if (moved.length === 0) return undefined;
  return `warning: resuming with ${moved.join(', ')}, as a flag, the environment or the config file says; the requests the run sent are known only to the service it recorded.`;
}
