/**
 * True when `work` settles within `ms` (its rejection is rethrown); false when the time ran out
 * first. The work goes on (a promise cannot be stopped): the caller decides what to drop.
 */
export async function within(work: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), ms)));
  try {
    return await Promise.race([work.then(() => true as const), late]);
  } finally {
    clearTimeout(timer);
  }
}
