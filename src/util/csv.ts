/**
 * CSV as RFC 4180 says (fields with a comma, quote, CR or LF are quoted, quotes doubled, CRLF line
 * ends), and safe to open in a spreadsheet: a text cell that starts with =, +, -, @, tab or CR is
 * prefixed with a single quote so it is never run as a formula.
 */
const FORMULA_START = /^[=+\-@\t\r]/;

export function csvCell(value: unknown): string {
  let text =
    value === undefined || value === null
      ? ''
      : typeof value === 'string'
        ? value
        : typeof value === 'object'
          ? JSON.stringify(value)
          : String(value);
  if (typeof value === 'string' && FORMULA_START.test(text)) text = `'${text}`;
  return /[",\r\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
}

export const csvRow = (values: readonly unknown[]): string => `${values.map(csvCell).join(',')}\r\n`;
