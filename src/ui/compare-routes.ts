/**
 * Two runs side by side in `genpipe ui`: `GET /compare` picks them, `GET /compare/view?a=KEY&b=KEY`
 * is `genpipe diff`'s page of the two (src/diff: the same data and the same page), with its images
 * served from each run's gallery routes (`/run/<key>/gallery/outputs/...`).
 */
import { runFile } from '../run/files/run-layout.js';
import type { ConfigFlags } from '../api/config.js';
import { diffData, type DiffRun } from '../diff/diff-data.js';
import { diffHtml } from '../diff/diff-page.js';
import { runInputs } from '../diff/run-inputs.js';
import { pageHeaders } from '../review/page-policy.js';
import { send } from '../review/review-server.js';
import { readPlanFile } from '../run/files/run-dir.js';
import { replayFile } from '../run/journal/run-state.js';
import { planSources } from '../session/plan-sources.js';
import { redactEveryForm } from '../util/redact.js';
import { UI_STYLE } from './ui-style.js';
import type { UiRun } from './run-watch.js';
import type { UiRoute } from './ui-types.js';

const TEXT = 'text/plain; charset=utf-8';
/** Where the page's links are worked out from: the view's URL folder, with each run at its gallery's URL. */
const VIRTUAL = '/virtual';

const esc = (text: string): string => text.replace(/[&<>"]/g, (c) => `&#${c.charCodeAt(0)};`);

function pickPage(runs: readonly UiRun[]): string {
  const options = runs
    .filter((r) => !r.status.startsWith('skipped') && !r.status.startsWith('refused'))
    .map((r) => `<option value="${esc(r.key)}">${esc(r.pipeline)} ${esc(r.runId)} (${esc(r.status)})</option>`)
    .join('');
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,"><title>genpipe ui: compare</title><style>${UI_STYLE}</style></head>
<body><header><h1>Compare two runs</h1><nav><a href="/">runs</a></nav></header>
<form method="get" action="/compare/view"><label>A <select name="a" id="a">${options}</select></label> <label>B <select name="b" id="b">${options}</select></label> <button type="submit">Compare</button></form>
<p class="note">The page of genpipe diff: the instances both runs share, their inputs that differ, status, cost and both images.</p></body></html>`;
}

export function compareRoutes(options: { flags: ConfigFlags; env: NodeJS.ProcessEnv }): UiRoute {
  return async (req, res, url, context) => {
    if (req.method !== 'GET') return false;
    if (url.pathname === '/compare') {
      const html = pickPage(await context.watch.runs());
      // The form sends to this server: the policy's form-action says so.
      const headers = pageHeaders(html);
      headers['content-security-policy'] = (headers['content-security-policy'] ?? '').replace("form-action 'none'", "form-action 'self'");
      send(res, 200, 'text/html; charset=utf-8', html, headers);
      return true;
    }
    if (url.pathname !== '/compare/view') return false;
    const [a, b] = await Promise.all([
      context.watch.run(url.searchParams.get('a') ?? ''),
      context.watch.run(url.searchParams.get('b') ?? ''),
    ]);
    if (a === undefined || b === undefined) {
      send(res, 404, TEXT, 'compare takes two runs the ui lists: ?a=KEY&b=KEY');
      return true;
    }
    const abort = new AbortController();
    const sources = planSources(options.flags, { env: options.env, signal: abort.signal });
    try {
      const side = async (run: UiRun): Promise<DiffRun> => {
        const plan = await readPlanFile(run.dir);
        return {
          plan,
          // Not read from: the page's links to the run's files are made from it.
          runDir: `${VIRTUAL}/run/${run.key}/gallery`,
          state: await replayFile(runFile(run.dir, 'journal')),
          inputs: await runInputs(run.dir, plan, { catalog: sources.options.catalog, presets: sources.options.presets, env: options.env }),
        };
      };
      const html = redactEveryForm(diffHtml(diffData(await side(a), await side(b)), `${VIRTUAL}/compare/view`));
      send(res, 200, 'text/html; charset=utf-8', html, pageHeaders(html));
    } finally {
      abort.abort();
      await sources.close();
    }
    return true;
  };
}
