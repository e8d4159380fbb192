/**
 * Debian's Chromium, driven headless by playwright-core, for the gallery and review tests. The
 * README's test command installs Chromium when it is missing (scripts/ensure-test-deps.mjs); a test
 * that still finds none fails with one sentence, it is never skipped.
 */
import { existsSync } from 'node:fs';
import { chromium, type Browser, type Page } from 'playwright-core';

export const CHROMIUM = process.env.GENPIPE_CHROMIUM ?? '/usr/bin/chromium';

/** `extraArgs`: more Chromium switches, such as `--host-resolver-rules=MAP evil.test 127.0.0.1`. */
export async function launchChromium(extraArgs: readonly string[] = []): Promise<Browser> {
  if (!existsSync(CHROMIUM))
    throw new Error(`${CHROMIUM} is missing: run \`npm test\` (it installs Debian's chromium package) or set GENPIPE_CHROMIUM.`);
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking', ...extraArgs],
  });
}

/** What a page did that a self-contained page must not: console errors, page errors, requests beyond file: and data:. */
export function watchPage(page: Page, allowedOrigin?: string): string[] {
  const problems: string[] = [];
  page.on('console', (message) => {
    if (message.type() === 'error') problems.push(`console: ${message.text()}`);
  });
  page.on('pageerror', (error) => problems.push(`page error: ${String(error)}`));
  page.on('request', (request) => {
    const url = request.url();
    if (url.startsWith('file:') || url.startsWith('data:') || (allowedOrigin !== undefined && url.startsWith(allowedOrigin))) return;
    problems.push(`request: ${url}`);
  });
  return problems;
}
