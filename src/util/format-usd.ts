/**
 * Money and counts for people: `US$250,000.00`, `5,000,000`. Grouped by hand, on purpose:
 * toLocaleString and Intl load ICU data at start-up (about 8 MB of RSS) for three commas.
 */

/** Inserts a comma every three digits from the right of a run of digits: `1234567` → `1,234,567`. */
function groupDigits(digits: string): string {
  let out = '';
  for (let i = 0; i < digits.length; i++) {
    if (i > 0 && (digits.length - i) % 3 === 0) out += ',';
    out += digits[i];
  }
  return out;
}

/** Groups the integer part of a number written by toFixed (`-1234.5` → `-1,234.5`); anything else is returned as is. */
function groupFixed(text: string): string {
  const match = /^(-?)(\d+)(\.\d+)?$/.exec(text);
  if (!match) return text; // 1e21 and beyond: toFixed writes an exponent.
  return `${match[1] ?? ''}${groupDigits(match[2] ?? '')}${match[3] ?? ''}`;
}

/** A whole count with thousands separators: `5,000,000`. */
export function formatCount(value: number): string {
  return groupFixed(Math.round(value).toFixed(0));
}

/** US$ with cents and thousands separators (`US$250,000.00`), or more digits when a price has them (US$0.005). */
export function formatUsd(value: number): string {
  const cents = Math.round(value * 100) / 100;
  return Math.abs(cents - value) < 1e-9 ? `US$${groupFixed(cents.toFixed(2))}` : `US$${groupFixed(value.toFixed(4).replace(/0+$/, ''))}`;
}

/**
 * What a run cost, for people, the same everywhere (report, summary, `genpipe runs`, notify): the net,
 * an unknown amount apart ("+ up to US$0.09 unknown"), and unpriced instances named, never counted
 * as US$0.00 (issue 26, item 4).
 */
export function formatSpend(money: { netUsd: number; unknownUsd?: number | undefined; unpricedInstances?: number | undefined }): string {
  const unpriced = money.unpricedInstances ?? 0;
  const unknown = money.unknownUsd ?? 0;
  const parts = [
    unpriced > 0 && money.netUsd === 0
      ? `unpriced (${formatCount(unpriced)} instance${unpriced === 1 ? '' : 's'})`
      : formatUsd(money.netUsd),
  ];
  if (unpriced > 0 && money.netUsd !== 0) parts.push(`${formatCount(unpriced)} unpriced`);
  if (unknown > 0) parts.push(`up to ${formatUsd(unknown)} unknown`);
  return parts.join(' + ');
}
