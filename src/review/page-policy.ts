/**
 * The headers that keep a served page to itself. Any site open in the reviewer's browser could
 * frame the review page under a bait and turn one click into a decision (a reject that a later
 * `--retry rejected` pays for): the page refuses every frame (`X-Frame-Options` for browsers that
 * predate `frame-ancestors`). Its policy runs only its own inline blocks, by their sha256, and
 * scripts, images and media of its own origin (images also from the sinks' public origins), so
 * that text a cell carries can never add a script, a style or a beacon to another host.
 */
import { createHash } from 'node:crypto';

/** Framing refused: on every answer of a server genpipe runs, page or not. */
export const FRAMING_REFUSED: Readonly<Record<string, string>> = {
  'x-frame-options': 'DENY',
  'content-security-policy': "frame-ancestors 'none'",
};

const INLINE_BLOCK = /<(script|style)(\s[^>]*)?>([\s\S]*?)<\/\1>/gi;

/** The `'sha256-…'` source of each inline script and style of `html`; a data block (JSON) runs nothing and needs none. */
export function inlineHashes(html: string): { scripts: string[]; styles: string[] } {
  const scripts = new Set<string>();
  const styles = new Set<string>();
  for (const [, tag, attributes = '', body = ''] of html.matchAll(INLINE_BLOCK)) {
    const source = `'sha256-${createHash('sha256').update(body, 'utf8').digest('base64')}'`;
    if (tag?.toLowerCase() === 'style') styles.add(source);
    else if (!/\bsrc\s*=/i.test(attributes) && !/\btype\s*=\s*["']?application\/json/i.test(attributes)) scripts.add(source);
  }
  return { scripts: [...scripts], styles: [...styles] };
}

/** The origins of http(s) URLs (the sinks' `public_base_url`s), each once; anything else is dropped. */
export function originsOf(urls: Iterable<string>): string[] {
  const out = new Set<string>();
  for (const url of urls) {
    try {
      const parsed = new URL(url);
      if (parsed.protocol === 'https:' || parsed.protocol === 'http:') out.add(parsed.origin);
    } catch {
      // Not a URL: no origin to allow.
    }
  }
  return [...out];
}

/** The headers of a served HTML page: framing refused, and a policy that allows only the page's own blocks and origin. */
export function pageHeaders(html: string, imageOrigins: readonly string[] = []): Record<string, string> {
  const { scripts, styles } = inlineHashes(html);
  const policy = [
    "default-src 'none'",
    `script-src 'self' ${scripts.join(' ')}`.trim(),
    `style-src ${styles.join(' ') || "'none'"}`,
    // data: for the page's empty icon (`<link rel=icon href="data:,">`): an inline image reaches no host.
    `img-src 'self' data: ${imageOrigins.join(' ')}`.trim(),
    "media-src 'self'",
    "connect-src 'self'",
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
  ].join('; ');
  return { ...FRAMING_REFUSED, 'content-security-policy': policy };
}
