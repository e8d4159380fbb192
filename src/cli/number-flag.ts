import { GenpipeError } from '../api/errors.js';

/**
 * A plain decimal, as a user types one: `Number` alone would also read an empty value as 0, `0x10`
 * as 16 and `Infinity` as a number.
 */
const DECIMAL = /^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$/;

/**
 * A numeric flag's value, checked (undefined when the flag is absent). A whole number is at most
 * 2^53 - 1 unless `max` says less: above that it is no longer exact, and the run directory that
 * records it could not be read back.
 */
export function numberFlag(
  value: string | undefined,
  flag: string,
  options: { integer?: boolean; min: number; max?: number },
): number | undefined {
  if (value === undefined) return undefined;
  const kind = options.integer ? 'a whole number' : 'a number';
  const n = DECIMAL.test(value) ? Number(value) : Number.NaN;
  if (!Number.isFinite(n) || n < options.min || (options.integer && !Number.isInteger(n))) {
    throw new GenpipeError('invalid_input', `${flag} takes ${kind} of at least ${options.min}, not "${value}".`);
  }
  const max = options.max ?? (options.integer ? Number.MAX_SAFE_INTEGER : undefined);
  if (max !== undefined && n > max) throw new GenpipeError('invalid_input', `${flag} takes ${kind} of at most ${max}, not "${value}".`);
  return n;
}

export const wholeNumber = (value: string | undefined, flag: string, min: number): number | undefined =>
  numberFlag(value, flag, { integer: true, min });
