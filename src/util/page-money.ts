/**
 * The browser copy of the one formatter of money (format-usd.ts formatMoney and formatSpend), for
 * the scripts genpipe inlines into its pages: the gallery's (gallery/page-script.ts) and the run
 * page of `genpipe ui` (ui/run-page.ts). A page runs in a browser, with no import, so it gets this
 * text; test/gallery/page-money.test.ts holds it to the server's output, amount by amount.
 */
export const PAGE_MONEY = String.raw`
  // money:begin. A copy of util/format-usd.ts formatMoney, the one formatter of money (the
  // page runs in a browser, with no import): page-money.test.ts holds the two to the same output.
  const groupDigits = (text) => text.replace(/^(-?)(\d+)/, (m, sign, digits) => sign + digits.replace(/\B(?=(\d{3})+(?!\d))/g, ','));
  const formatMoney = (value, kind, unit) => {
    const digits = kind === 'total' ? 2 : 4;
    const scale = Math.pow(10, digits);
    let rounded = Math.round(value * scale) / scale;
    if (rounded === 0) rounded = 0;
    let text = rounded.toFixed(digits);
    if (kind === 'each') text = text.replace(/(\.\d\d\d*?)0+$/, '$1');
    const grouped = /^-?\d+(\.\d+)?$/.test(text) ? groupDigits(text) : text;
    return unit === 'credits' ? grouped + ' credits' : 'US$' + grouped;
  };
  // A copy of util/format-usd.ts formatSpend, in US$: a sum with unpriced instances is never US$0.00.
  const formatSpend = (money) => {
    const unpriced = money.unpricedInstances || 0;
    const unknown = money.unknownUsd || 0;
    const count = (n) => groupDigits(String(Math.round(n)));
    const parts = [unpriced > 0 && money.netUsd === 0 ? 'unpriced (' + count(unpriced) + ' instance' + (unpriced === 1 ? '' : 's') + ')' : formatMoney(money.netUsd, 'total', 'usd')];
    if (unpriced > 0 && money.netUsd !== 0) parts.push(count(unpriced) + ' unpriced');
    if (unknown > 0) parts.push('up to ' + formatMoney(unknown, 'total', 'usd') + ' unknown');
    return parts.join(' + ') + (money.provisional ? ' (provisional)' : '');
  };
  // money:end
`;
