/**
 * Option tables more than one command takes, defined once: every command that talks to a service
 * or to Redis takes CONNECTION, so `--config`, `--base-url` and `--credentials` mean the same
 * thing everywhere and appear once in the reference.
 */
import type { OptionGroup } from './options.js';

export const CONNECTION = {
  title: 'Connection options',
  options: {
    config: {
      type: 'string',
      value: 'FILE',
      env: 'GENPIPE_CONFIG',
      help: 'config file (YAML or JSON); without it, ${XDG_CONFIG_HOME:-~/.config}/genpipe/config.yaml, then /etc/genpipe/config.yaml, if one exists (genpipe config shows which)',
    },
    'base-url': { type: 'string', value: 'URL', env: 'GENPIPE_BASE_URL', help: 'main API address' },
    'platform-url': {
      type: 'string',
      value: 'URL',
      env: 'GENPIPE_PLATFORM_URL',
      defaultText: 'the --base-url',
      help: 'platform address (legacy job sets, status and cancel)',
    },
    'cdn-url': { type: 'string', value: 'URL', env: 'GENPIPE_CDN_URL', defaultText: 'the --base-url', help: 'agent media address' },
    vendor: {
      type: 'string',
      value: 'NAME',
      env: 'GENPIPE_VENDOR',
      defaultText: 'vendor',
      help: 'vendor path segment of some model paths',
    },
    credentials: {
      type: 'string',
      value: 'FILE',
      help: 'key_id:key_secret file (mode 600); or set HF_KEY, HF_CREDENTIALS, or HF_API_KEY with HF_API_SECRET',
    },
    'allow-insecure-http': {
      type: 'boolean',
      env: 'GENPIPE_ALLOW_INSECURE_HTTP=1',
      help: 'accept plain http:// to a host that is not loopback (credentials then travel unencrypted)',
    },
  },
} as const satisfies OptionGroup;

/** `--emulator`: only for commands that run in one process; a fleet's workers and schedules never take it. */
export const EMULATOR = {
  emulator: { type: 'boolean', help: 'start the local emulator in-process and use it (no credentials needed)' },
} as const satisfies OptionGroup['options'];

/** The fleet's Redis and queue, for worker, queue and schedule (run takes them among its own). */
export const REDIS = {
  redis: {
    type: 'string',
    value: 'URL',
    env: 'GENPIPE_REDIS_URL',
    help: 'redis://[user:password@]host[:port][/db]; else redis_url in the config file',
  },
  queue: { type: 'string', value: 'NAME', defaultText: 'genpipe', help: 'the fleet queue' },
} as const satisfies OptionGroup['options'];
