/**
 * What outputs.csv needs of each instance besides its journal state (its step and sweep values),
 * kept from the moment the driver takes the instance until its rows are set aside, then dropped,
 * so memory stays flat however many instances finish.
 */
import type { PlannedInstance, StepPlan } from '../../plan/plan.js';
import type { InstanceState } from '../journal/run-state.js';
import { outputRows, type InstanceFacts, type OutputRow } from './output-rows.js';
import type { OutputsCsv } from './outputs-csv.js';

type StepSink = InstanceFacts['sink'];

export class InstanceRows {
  readonly #outputs: OutputsCsv;
  readonly #sinkOf: (stepId: string) => StepSink;
  readonly #facts = new Map<string, Omit<InstanceFacts, 'sink'> & { step: StepPlan }>();

  /** `outputs`: outputs.csv; `sinkOf`: each step's storage sink, for the public URL of an uploaded file. */
  constructor(outputs: OutputsCsv, sinkOf: (stepId: string) => StepSink) {
    this.#outputs = outputs;
    this.#sinkOf = sinkOf;
  }

  /** The driver takes an instance of `step`. */
  taken(step: StepPlan, planned: PlannedInstance): void {
    this.#facts.set(planned.id, { step, values: planned.values, upstreamValues: planned.upstreamValues });
  }

  /** A finished instance's rows go to outputs.csv at once (spilled to disk), and its facts are dropped. */
  setAside(id: string, entry: InstanceState): void {
    this.#outputs.add(id, this.#rows(id, entry));
    this.#facts.delete(id);
  }

  /** outputs.csv, with the rows of the instances that did not finish (they are still in the state). */
  async write(unfinished: Iterable<[string, InstanceState]>): Promise<void> {
    await this.#outputs.write([...unfinished].map(([id, entry]): [string, OutputRow[]] => [id, this.#rows(id, entry)]));
  }

  /** An instance's outputs.csv rows: one per downloaded file, or one without a file. */
  #rows(id: string, entry: InstanceState): OutputRow[] {
    const facts = this.#facts.get(id);
    return outputRows(id, entry, facts && { ...facts, sink: this.#sinkOf(facts.step.id) });
  }
}
