import { GenpipeError } from '../api/errors.js';

/** A numeric flag's value, checked (undefined when the flag is absent). */
export function numberFlag(value: string | undefined, flag: string, options: { integer?: boolean; min: number }): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isFinite(n) || n < options.min || (options.integer && !Number.isInteger(n))) {
    throw new GenpipeError(
      'invalid_input',
      `${flag} takes ${options.integer ? 'a whole number' : 'a number'} of at least ${options.min}, not "${value}".`,
    );
  }
  return n;
}

export const wholeNumber = (value: string | undefined, flag: string, min: number): number | undefined =>
  numberFlag(value, flag, { integer: true, min });
