/**
 * Text printed for a person, made harmless for a terminal. Text from the service (an error), a
 * manifest or a CSV can hold escape sequences (clear the screen, set the window title) or a CR or
 * newline that forges a log line of its own (`fails[seed=9]: completed OK`). Each such character
 * is written as its JSON escape (`\u001b`, `\r`, `\n`): visible, and, inside a JSON line (the
 * `--json-logs` output), the very same JSON value, so those lines stay exact.
 */

/** C0 controls but tab and newline, DEL, C1 controls (CSI 0x9b included), and the line and paragraph separators. */
const CONTROL = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u2028\u2029]/g;
/** The same, newline included: for one message, which must stay on one line. */
const CONTROL_OR_NEWLINE = /[\u0000-\u0008\u000a-\u001f\u007f-\u009f\u2028\u2029]/g;

const NAMED: Readonly<Record<string, string>> = { '\b': '\\b', '\f': '\\f', '\n': '\\n', '\r': '\\r' };
const escape = (c: string): string => NAMED[c] ?? `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`;

/** A line (or lines) for the terminal: every control character visible, tabs and newlines kept. */
export function terminalSafe(text: string): string {
  return text.replace(CONTROL, escape);
}

/** One message on one line: its newlines visible too. */
export function oneLine(text: string): string {
  return text.replace(CONTROL_OR_NEWLINE, escape);
}
