/**
 * `genpipe run` of a big plan with no budget: asked on a terminal, refused elsewhere (cron, CI),
 * before the lock, the run directory or any request.
 */
import { GenpipeError } from '../api/errors.js';
import { describeSpend, type BigSpend } from '../plan/guards.js';
import { formatUsd } from '../util/format-usd.js';

/** Resolves when the person at the terminal says yes; throws invalid input (exit 2) otherwise. */
export async function confirmSpend(spend: BigSpend, io: { prompt?: ((question: string) => Promise<string>) | undefined }): Promise<void> {
  const what = describeSpend(spend);
  if (io.prompt === undefined) {
    throw new GenpipeError(
      'invalid_input',
      `${what}, over the --confirm-over limit of ${formatUsd(spend.confirmOverUsd)}, and there is no terminal to confirm it on: ` +
        'pass --yes to run it anyway, or set a budget (budget_usd in the manifest, or --budget USD) to cap what it spends.' +
        (spend.reuseHint ? ` ${spend.reuseHint}` : ''),
    );
  }
  // A repeat: the question says what --reuse would not pay for again.
  const reuse = spend.reuseHint ? ` ${spend.reuseHint}` : '';
  const answer = await io.prompt(`${what}.${reuse} Continue? [y/N]`);
  if (!/^\s*y(es)?\s*$/i.test(answer)) {
    throw new GenpipeError(
      'invalid_input',
      'Not confirmed, so nothing was sent; --yes skips the question, and a budget (budget_usd or --budget) replaces it.',
    );
  }
}
