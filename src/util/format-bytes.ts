/** A size for people: `812 B`, `4.2 kB`, `12.3 MB`, `1.05 GB` (decimal units, three significant figures). */
export function formatBytes(bytes: number): string {
  if (!Number.isFinite(bytes) || bytes < 1000) return `${Math.max(0, Math.round(Number.isFinite(bytes) ? bytes : 0))} B`;
  const units = ['kB', 'MB', 'GB', 'TB', 'PB'];
  let value = bytes;
  let unit = -1;
  while (value >= 999.5 && unit < units.length - 1) {
    value /= 1000;
    unit++;
  }
  // 1.00 → 1, 1.50 → 1.5, 120 stays 120; past the last unit, whole numbers (no exponent).
  const digits = value >= 1000 ? value.toFixed(0) : value.toPrecision(3);
  return `${digits.includes('.') ? digits.replace(/0+$/, '').replace(/\.$/, '') : digits} ${units[unit]}`;
}
