import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GenpipeError } from '../../api/errors.js';
import { ByteSink } from '../../util/byte-sink.js';
import { copyText } from '../../util/copy-text.js';
import { loadManifestFile } from '../../manifest/load.js';
import { buildPlan, type Plan, type PlannedInstance, type StepPlan } from '../../plan/plan.js';
import { CONNECTION_HELP, CONNECTION_OPTIONS, connectionFlags, noExtraPositionals, parse, positional } from '../args.js';
import type { Command } from '../command.js';
import { EXIT } from '../exit-codes.js';
import type { CliIO } from '../io.js';
import { EMULATOR_FLAG_HELP, startEmbeddedEmulator } from '../embedded-emulator.js';
import { planSources } from '../plan-sources.js';
import { formatUsd } from '../../util/format-usd.js';
import { assertPricedUnderBudget, budgetOf, overBudgetWarning } from '../../plan/guards.js';

export const planCommand: Command = {
  name: 'plan',
  help: `Usage: genpipe plan <manifest> [--json] [--limit N] [--emulator]

Shows the steps (model, instance count, dependencies), sample instances and the estimated cost by
step and in total. Every instance is validated first (exit 2 with every problem otherwise), and
the plan refuses what genpipe run refuses: with budget_usd, every step needs a price (exit 2).

  --json      stream the full plan as one JSON document: steps, estimate and every instance
  --limit N   instances per step to show (default 3), or to stream with --json (default all)

${EMULATOR_FLAG_HELP}
${CONNECTION_HELP}`,
  async run(argv, io) {
    const { values, positionals } = parse(argv, { ...CONNECTION_OPTIONS, emulator: { type: 'boolean' }, json: { type: 'boolean' }, limit: { type: 'string' } }, 'plan');
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
        // and printed only once the whole plan is valid.
        const spool = await InstanceSpool.open(limit);
        try {
          const plan = await buildPlan(loaded, { ...sources.options, onInstance: (instance) => spool.add(instance) });
          // A run would refuse it: say so before showing a plan that cannot run.
          assertPricedUnderBudget(plan, budgetOf(plan));
          await streamJson(plan, io, spool);
        } finally {
          await spool.remove();
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
};

const stepCost = (step: StepPlan): string => (step.priceUsd === undefined ? 'unknown' : formatUsd(step.priceUsd * step.count));

function printSummary(plan: Plan, io: CliIO, samples: number): void {
  io.out(`pipeline ${plan.name}: ${plan.steps.length} step(s), ${plan.totalInstances} instance(s)`);
  for (const step of plan.steps) {
    const deps = [...step.needs.map((n) => `needs ${n}`), ...(step.forEach ? [`for each ${step.forEach}`] : [])];
    const price = step.priceUsd === undefined ? 'price unknown' : `${formatUsd(step.priceUsd)} each`;
    io.out('');
    io.out(`${step.id} (${step.model}): ${step.count} instance(s), ${price}, ${stepCost(step)}${deps.length ? `; ${deps.join(', ')}` : ''}`);
    let shown = 0;
    for (const instance of plan.instances(step.id)) {
      if (shown++ >= samples) break;
      io.out(`  ${instance.id}  ${instance.canonical}`);
    }
    if (step.count > samples && samples > 0) io.out(`  ... and ${step.count - samples} more`);
  }
  const estimate = plan.estimate();
  const unknown = estimate.unknownInstances > 0 ? ` + unknown for ${estimate.unknownInstances} instance(s)` : '';
  io.out('');
  io.out(`estimated total: ${formatUsd(estimate.knownUsd)}${unknown}`);
  const warning = overBudgetWarning(plan, budgetOf(plan));
  if (warning) io.out(warning);
}

/**
 * The instances of a plan as JSON lines in a temporary file, written as the validation pass hands
 * them over (synchronously, a megabyte at a time), at most `limit` per step.
 */
class InstanceSpool {
  #count = 0;
  #perStep = new Map<string, number>();

  private constructor(
    private readonly dir: string,
    private readonly sink: ByteSink,
    private readonly limit: number | undefined,
  ) {}

  static async open(limit: number | undefined): Promise<InstanceSpool> {
    const dir = await mkdtemp(join(tmpdir(), 'genpipe-plan-'));
    return new InstanceSpool(dir, new ByteSink(join(dir, 'instances.jsonl')), limit);
  }

  get path(): string {
    return this.sink.path;
  }

  add(instance: PlannedInstance): void {
    if (this.limit !== undefined) {
      const n = this.#perStep.get(instance.step) ?? 0;
      if (n >= this.limit) return;
      this.#perStep.set(instance.step, n + 1);
    }
    this.sink.add((this.#count++ === 0 ? '\n' : ',\n') + instanceJson(instance));
  }

  flush(): void {
    this.sink.flush();
  }

  async remove(): Promise<void> {
    this.sink.close();
    await rm(this.dir, { recursive: true, force: true });
  }
}

/** One JSON document: the steps and estimate, then the spooled instances, streamed in chunks. */
async function streamJson(plan: Plan, io: CliIO, spool: InstanceSpool): Promise<void> {
  const steps = plan.steps.map((s) => ({
    id: s.id,
    model: s.model,
    count: s.count,
    needs: s.needs,
    for_each: s.forEach ?? null,
    price_usd: s.priceUsd ?? null,
    cost_usd: s.priceUsd === undefined ? null : Math.round(s.priceUsd * s.count * 1e6) / 1e6,
  }));
  const estimate = plan.estimate();
  spool.flush();
  await io.write(`{"name":${JSON.stringify(plan.name)},"steps":${JSON.stringify(steps)},"estimate":{"known_usd":${estimate.knownUsd},"unknown_instances":${estimate.unknownInstances}},"instances":[`);
  await copyText(spool.path, (chunk) => io.write(chunk));
  await io.write('\n]}\n');
}

const instanceJson = (i: PlannedInstance): string => {
  // A key is `gp1-` and hex digits: its JSON is the key in quotes.
  const key = i.key;
  return `{"id":${JSON.stringify(i.id)},"step":${JSON.stringify(i.step)},"values":${JSON.stringify(i.values)},"upstream":${i.upstream === undefined ? 'null' : JSON.stringify(i.upstream)},"key":${key === undefined ? 'null' : `"${key}"`},"body":${i.canonical}}`;
};
