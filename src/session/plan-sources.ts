/**
 * Where `validate`, `plan` and `run` read the live catalogs from: the configured service, or the
 * embedded emulator with `--emulator`. The client is opened only when a manifest needs a catalog,
 * so a manifest without selections or preset axes validates offline.
 */
import type { GenerationClient } from '../api/client.js';
import { resolveConfig, type ConfigFlags } from '../api/config.js';
import { GenpipeError } from '../api/errors.js';
import type { Preset } from '../api/wire.js';
import type { PlanOptions } from '../plan/plan.js';
import { embeddedConfig, type EmbeddedEmulator } from './embedded-emulator.js';

export interface PlanSources {
  options: PlanOptions;
  close(): Promise<void>;
}

/** With `shared`, catalogs are read through that client (the caller closes it); otherwise one is opened on demand. */
export function planSources(
  flags: ConfigFlags,
  io: { env: NodeJS.ProcessEnv; signal: AbortSignal },
  embedded?: EmbeddedEmulator,
  shared?: GenerationClient,
): PlanSources {
  let client: GenerationClient | undefined = shared;
  // The client (and undici under it) is loaded only when a manifest needs a catalog.
  const open = async (requireCredentials: boolean): Promise<GenerationClient> => {
    if (client === undefined) {
      const { GenerationClient } = await import('../api/client.js');
      client = new GenerationClient(
        embedded ? embeddedConfig(flags, embedded) : resolveConfig({ flags, env: io.env, requireCredentials: false }),
      );
    }
    if (requireCredentials && !client.config.credentials) {
      throw new GenpipeError(
        'credentials',
        'Reading the preset catalog needs credentials: set HF_KEY=key_id:key_secret (or HF_API_KEY and HF_API_SECRET), or pass --credentials FILE.',
      );
    }
    return client;
  };
  return {
    options: {
      env: io.env,
      catalog: async () => (await open(false)).options.fetch({ signal: io.signal }),
      presets: async () => {
        const presets: Preset[] = [];
        for await (const preset of (await open(true)).marketingImage.presets({ signal: io.signal })) presets.push(preset);
        return presets;
      },
    },
    close: async () => {
      if (client !== shared) await client?.close();
    },
  };
}
