import { loadManifestFile } from '../../manifest/load.js';
import { buildPlan } from '../../plan/plan.js';
import { resolveNotifyTargets } from '../../notify/notify-targets.js';
import { CONNECTION_HELP, CONNECTION_OPTIONS, connectionFlags, noExtraPositionals, parse, positional } from '../args.js';
import type { Command } from '../command.js';
import { EXIT } from '../exit-codes.js';
import { EMULATOR_FLAG_HELP, startEmbeddedEmulator } from '../embedded-emulator.js';
import { planSources } from '../plan-sources.js';
import { formatCount, formatUsd } from '../../util/format-usd.js';
import { assertPricedUnderBudget, budgetOf, overBudgetWarning } from '../../plan/guards.js';

export const validateCommand: Command = {
  name: 'validate',
  help: `Usage: genpipe validate <manifest> [--emulator]

Exits 0 when the manifest and every instance are valid, or 2 listing every problem with its
file:line:col. Selections are checked against the live options catalog and preset axes are
resolved from the preset catalog, which needs the service address (nothing is spent).
It refuses what genpipe run refuses: with budget_usd, every step needs a price. An estimate over
budget_usd is a warning (the run stops submitting there), not a refusal.

${EMULATOR_FLAG_HELP}
${CONNECTION_HELP}`,
  async run(argv, io) {
    const { values, positionals } = parse(argv, { ...CONNECTION_OPTIONS, emulator: { type: 'boolean' } }, 'validate');
    const file = positional(positionals, 0, 'a manifest file', 'validate');
    noExtraPositionals(positionals, 1, 'validate');
    const loaded = loadManifestFile(file);
    resolveNotifyTargets(loaded, [], io.env, { allowUnsetEnv: true });
    const embedded = values.emulator ? await startEmbeddedEmulator() : undefined;
    const sources = planSources(connectionFlags(values), io, embedded);
    try {
      const plan = await buildPlan(loaded, sources.options);
      const budget = budgetOf(plan);
      assertPricedUnderBudget(plan, budget);
      const estimate = plan.estimate();
      io.out(
        `${file}: valid; ${plan.steps.length} step(s), ${formatCount(plan.totalInstances)} instance(s), estimated ${formatUsd(estimate.knownUsd)}` +
          (estimate.unknownInstances > 0 ? ` plus ${formatCount(estimate.unknownInstances)} instance(s) of unknown price` : ''),
      );
      const warning = overBudgetWarning(plan, budget);
      if (warning) io.out(warning);
      return EXIT.ok;
    } finally {
      await sources.close();
      await embedded?.close();
    }
  },
};
