/** US$ with cents, or more digits when a price has them (US$0.005). */
export function formatUsd(value: number): string {
  const cents = Math.round(value * 100) / 100;
  return Math.abs(cents - value) < 1e-9 ? `US$${cents.toFixed(2)}` : `US$${value.toFixed(4).replace(/0+$/, '')}`;
}
