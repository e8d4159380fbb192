/** Natural order: numbers by value, text case-insensitively, so `row=2` sorts before `row=11`; ties by code unit. */
const collator = new Intl.Collator('en', { numeric: true, sensitivity: 'base' });

export const naturalCompare = (a: string, b: string): number => collator.compare(a, b) || (a < b ? -1 : a > b ? 1 : 0);
