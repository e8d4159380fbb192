import { eachPrice, priceLine, stepCostUsd } from '../../plan/price.js';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GenpipeError } from '../../api/errors.js';
import { copyText } from '../../util/copy-text.js';
import { loadManifestFile } from '../../manifest/load.js';
import { buildPlan, type Plan, type StepPlan } from '../../plan/plan.js';
import { InstanceSpool } from '../../plan/instance-spool.js';
import { parallelPlanHelper } from '../../plan/parallel-plan.js';
import type { Preset } from '../../api/wire.js';
import { existsSync } from 'node:fs';
import { connectionFlags, noExtraPositionals, parse, positional } from '../args.js';
import { defineCommand, tableOf } from '../options.js';
import { CONNECTION, EMULATOR } from '../shared-options.js';
import { EXIT } from '../../session/exit-codes.js';
import { writeBytes, type CliIO } from '../io.js';
import { startEmbeddedEmulator } from '../../session/embedded-emulator.js';
import { planSources } from '../../session/plan-sources.js';
import { formatUsd, jsonUsd } from '../../util/format-usd.js';
import { assertPricedUnderBudget, budgetOf, overBudgetWarning } from '../../plan/guards.js';
import { sinkPrefixWarnings } from '../../sink/sink-config.js';
import { oneLine } from '../../util/terminal-text.js';
import { skippedRowsLines } from '../../plan/skipped-rows.js';

const GROUPS = [
  {
    title: 'Options',
    options: {
      json: { type: 'boolean', help: 'stream the full plan as one JSON document: steps, estimate and every instance' },
      limit: {
        type: 'string',
        value: 'N',
        help: 'instances per step to show (default 3), or to stream with --json (default all)',
      },
      ...EMULATOR,
    },
  },
  CONNECTION,
] as const;

export const planCommand = defineCommand({
  name: 'plan',
  usage: `Usage: genpipe plan <manifest> [--json] [--limit N] [--emulator]

Shows the steps (model, instance count, dependencies), sample instances and the estimated cost by
step and in total. Every instance is validated first (exit 2 with every problem otherwise), and
the plan refuses what genpipe run refuses: with budget_usd, every step needs a price (exit 2).`,
  groups: GROUPS,
  async run(argv, io) {
    const { values, positionals } = parse(argv, tableOf(GROUPS), 'plan');
    const file = positional(positionals, 0, 'a manifest file', 'plan');
    noExtraPositionals(positionals, 1, 'plan');
    let limit: number | undefined;
    if (values.limit !== undefined) {
      if (!/^\d+$/.test(values.limit)) throw new GenpipeError('invalid_input', `--limit takes a whole number, not "${values.limit}".`);
      limit = Number(values.limit);
    }
    const loaded = loadManifestFile(file);
    const embedded = values.emulator ? await startEmbeddedEmulator() : undefined;
    const sources = planSources(connectionFlags(values), io, embedded);
    try {
      if (values.json) {
        // Rendered and checked once: each valid instance's JSON is spooled as the plan is checked,
        // and printed only once the whole plan is valid. A big plan is checked by two threads.
        const dir = await mkdtemp(join(tmpdir(), 'genpipe-plan-'));
        let spool: InstanceSpool | undefined;
        try {
          spool = new InstanceSpool(join(dir, 'instances.jsonl'), { limit });
          const own = spool;
          let presets: readonly Preset[] | undefined;
          const readPresets = sources.options.presets;
          const run = { id: 'preview', startedAt: new Date() };
          const helper = parallelPlanHelper({
            manifest: file,
            spool: join(dir, 'instances-2.jsonl'),
            env: io.env,
            run,
            presets: () => presets,
            signal: io.signal,
            minInstances: parallelMin(io.env),
          });
          const plan = await buildPlan(loaded, {
            ...sources.options,
            run,
            ...(readPresets ? { presets: async () => (presets = await readPresets()) } : {}),
            onInstance: (instance) => own.add(instance),
            // With --limit few instances are spooled: one thread does.
            helper: limit === undefined ? helper : undefined,
          });
          // A run would refuse it: say so before showing a plan that cannot run.
          assertPricedUnderBudget(plan, budgetOf(plan));
          spool.close();
          const parts = [spool.path, ...(existsSync(join(dir, 'instances-2.jsonl')) ? [join(dir, 'instances-2.jsonl')] : [])];
          await streamJson(plan, io, parts);
        } finally {
          spool?.close();
          await rm(dir, { recursive: true, force: true });
        }
        return EXIT.ok;
      }
      const plan = await buildPlan(loaded, sources.options);
      assertPricedUnderBudget(plan, budgetOf(plan));
      printSummary(plan, io, limit ?? 3);
      return EXIT.ok;
    } finally {
      await sources.close();
      await embedded?.close();
    }
  },
});

/** GENPIPE_PLAN_PARALLEL_MIN: the plan size from which two threads check it (tests set 1; default parallel-plan.ts). */
function parallelMin(env: NodeJS.ProcessEnv): number | undefined {
  const value = env.GENPIPE_PLAN_PARALLEL_MIN;
  return value !== undefined && /^\d+$/.test(value) ? Number(value) : undefined;
}

const stepCost = (step: StepPlan): string => {
  const usd = stepCostUsd(step);
  return usd === undefined ? 'unknown' : formatUsd(usd);
};

function printSummary(plan: Plan, io: CliIO, samples: number): void {
  io.out(`pipeline ${plan.name}: ${plan.steps.length} step(s), ${plan.totalInstances} instance(s)`);
  for (const step of plan.steps) {
    const deps = [
      ...step.needs.map((n) => `needs ${n}`),
      ...(step.forEach
        ? [`for each ${step.forEach}${step.forEachOnly ? `, only: ${step.forEachOnly} (after \`genpipe review\`)` : ''}`]
        : []),
    ];
    const price = eachPrice(step.price);
    io.out('');
    io.out(
      `${step.id} (${step.model}): ${step.count} instance(s), ${price}, ${stepCost(step)}${deps.length ? `; ${deps.join(', ')}` : ''}`,
    );
    let shown = 0;
    for (const instance of plan.instances(step.id)) {
      if (shown++ >= samples) break;
      io.out(`  ${oneLine(instance.id)}  ${instance.canonical}`);
    }
    if (step.count > samples && samples > 0) io.out(`  ... and ${step.count - samples} more`);
  }
  const estimate = plan.estimate();
  const unknown = estimate.unknownInstances > 0 ? ` + unknown for ${estimate.unknownInstances} instance(s)` : '';
  io.out('');
  // Where each step's price comes from, and which are token-priced (provisional).
  for (const step of plan.steps) io.out(`price of ${priceLine(step.id, step.price)}`);
  io.out(`estimated total: ${formatUsd(estimate.knownUsd)}${unknown}`);
  const warning = overBudgetWarning(plan, budgetOf(plan));
  if (warning) io.out(warning);
  if (plan.skippedRows.length > 0) io.out('');
  for (const line of skippedRowsLines(plan.skippedRows, Number.POSITIVE_INFINITY)) io.out(line);
  for (const line of sinkPrefixWarnings(plan.loaded)) io.out(line);
}

const cost = (step: StepPlan): number | null => {
  const usd = stepCostUsd(step);
  return usd === undefined ? null : Math.round(usd * 1e6) / 1e6;
};

/** One JSON document: the steps and estimate, then the spooled instances (`parts`, in order), streamed in chunks. */
async function streamJson(plan: Plan, io: CliIO, parts: readonly string[]): Promise<void> {
  const steps = plan.steps.map((s) => ({
    id: s.id,
    model: s.model,
    count: s.count,
    needs: s.needs,
    for_each: s.forEach ?? null,
    ...(s.forEachOnly ? { for_each_only: s.forEachOnly } : {}),
    price_usd: s.priceUsd ?? null,
    price_source: s.price.source,
    token_priced: s.price.tokenPriced,
    ...(s.price.of && s.price.instances && s.price.instances.count > 0
      ? { price_range_usd: { min: jsonUsd(s.price.instances.minUsd), max: jsonUsd(s.price.instances.maxUsd) } }
      : {}),
    cost_usd: cost(s),
  }));
  const estimate = plan.estimate();
  await io.write(
    `{"name":${JSON.stringify(plan.name)},"steps":${JSON.stringify(steps)},"estimate":{"known_usd":${estimate.knownUsd},"unknown_instances":${estimate.unknownInstances}},${plan.skippedRows.length > 0 ? `"skipped_rows":${JSON.stringify(plan.skippedRows)},` : ''}"instances":[`,
  );
  for (const part of parts) await copyText(part, (chunk) => writeBytes(io, chunk));
  await io.write('\n]}\n');
}
