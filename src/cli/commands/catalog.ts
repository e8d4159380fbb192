import { GenpipeError } from '../../api/errors.js';
import { TIERS, type Tier } from '../../api/wire.js';
import { connectionFlags, didYouMean, noExtraPositionals, parse, positional } from '../args.js';
import { defineCommand, tableOf } from '../options.js';
import { CONNECTION, EMULATOR } from '../shared-options.js';
import { EXIT } from '../../session/exit-codes.js';
import { openCommandClient } from '../../session/embedded-emulator.js';
import { oneLine } from '../../util/terminal-text.js';

const GROUPS = [
  {
    title: 'Options',
    options: {
      tier: { type: 'string', value: 'TIER', help: `with options, only the categories and options of one tier: ${TIERS.join(', ')}` },
      json: { type: 'boolean', help: 'print the catalog as JSON' },
      ...EMULATOR,
    },
  },
  CONNECTION,
] as const;

export const catalogCommand = defineCommand({
  name: 'catalog',
  usage: `Usage:
  genpipe catalog options [--tier TIER] [--json] [--emulator]   character-sheet options (no credentials needed)
  genpipe catalog presets [--json] [--emulator]                 every visible marketing preset, all pages`,
  groups: GROUPS,
  async run(argv, io) {
    const { values, positionals } = parse(argv, tableOf(GROUPS), 'catalog');
    const what = positional(positionals, 0, 'what to show: options or presets', 'catalog');
    noExtraPositionals(positionals, 1, 'catalog');
    if (what === 'options') {
      const tier = values.tier;
      if (tier !== undefined && !(TIERS as readonly string[]).includes(tier)) {
        throw new GenpipeError('invalid_input', `Unknown tier "${tier}"; tiers are ${TIERS.join(', ')}.`);
      }
      const { client, close } = await openCommandClient(connectionFlags(values), io, {
        emulator: values.emulator === true,
        requireCredentials: false,
      });
      try {
        const catalog = await client.options.fetch({ signal: io.signal });
        const categories = tier ? catalog.categories.filter((c) => c.tiers.includes(tier as Tier)) : catalog.categories;
        if (values.json) {
          io.out(JSON.stringify({ config_revision: catalog.config_revision, categories }, null, 2));
          return EXIT.ok;
        }
        io.out(`config_revision ${String(catalog.config_revision)}${tier ? `, tier ${tier}` : ''}: ${categories.length} categories`);
        for (const category of categories) {
          io.out('');
          io.out(`${oneLine(category.key)} (${oneLine(category.label)}): up to ${category.max}; tiers ${category.tiers.join(', ')}`);
          for (const option of category.options) {
            if (tier && option.tiers !== null && !option.tiers.includes(tier)) continue;
            const notes = [
              option.slot ? `slot ${option.slot}` : '',
              option.exclusive ? 'exclusive' : '',
              option.tiers ? `only ${option.tiers.join(', ')}` : '',
              option.color ?? '',
            ]
              .filter(Boolean)
              .join('; ');
            io.out(`  ${oneLine(option.key)}  ${oneLine(option.label)}${notes ? `  [${oneLine(notes)}]` : ''}`);
          }
        }
        return EXIT.ok;
      } finally {
        await close();
      }
    }
    if (what === 'presets') {
      if (values.tier !== undefined) throw new GenpipeError('invalid_input', '--tier applies to genpipe catalog options only.');
      const { client, close } = await openCommandClient(connectionFlags(values), io, { emulator: values.emulator === true });
      try {
        const presets = [];
        for await (const preset of client.marketingImage.presets({ signal: io.signal })) presets.push(preset);
        if (values.json) io.out(JSON.stringify(presets, null, 2));
        else {
          io.out(`${presets.length} presets`);
          for (const preset of presets) io.out(`${preset.id}  ${oneLine(preset.name)}`);
        }
        return EXIT.ok;
      } finally {
        await close();
      }
    }
    throw new GenpipeError(
      'invalid_input',
      `Unknown catalog "${what}"${didYouMean(what, ['options', 'presets']) || '; use options or presets.'}`,
    );
  },
});
