/**
 * A run's page of `genpipe ui`: progress by step with the ETA, the retries and the time waited on
 * throttling, spend over time (uPlot, from the journal's record times), the cost report's tables,
 * the CSV rows set aside, a link to the gallery with its review controls, and the remake of
 * rejected or failed instances, which shows its estimate and starts only once confirmed. The
 * state comes from the page's event stream (`api/events`), sent again as the run's journal
 * changes. Money arrives formatted by the server; the chart's axis, which uPlot labels in the
 * browser, uses the browser copy of the same formatter (util/page-money.ts). Text from the run is
 * only set as textContent.
 */
import { UI_STYLE } from './ui-style.js';
import { PAGE_MONEY } from '../util/page-money.js';
import { LIVE_LINE, PAGE_LIVE } from './page-live.js';

const SCRIPT = String.raw`
(() => {
  'use strict';
  const token = document.querySelector('meta[name=genpipe-token]').getAttribute('content');
  const $ = (id) => document.getElementById(id);
  const el = (tag, text, attrs) => {
    const node = document.createElement(tag);
    if (text !== undefined) node.textContent = text;
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    return node;
  };
  const STATUSES = ['completed', 'reused', 'failed', 'nsfw', 'canceled', 'unknown', 'in_flight', 'not_started'];
  let chart;
${PAGE_MONEY}
${PAGE_LIVE}
  // axis:begin. The chart's money axis, in the words of every other figure of money: US$, 2 decimals, grouped.
  const axisUsd = (u, ticks) => ticks.map((v) => formatMoney(v, 'total', 'usd'));
  // axis:end
  function table(target, heads, rows) {
    const t = el('table');
    const head = el('tr');
    for (const h of heads) head.appendChild(el('th', h));
    t.appendChild(head);
    for (const r of rows) {
      const tr = el('tr');
      for (const v of r) tr.appendChild(el('td', String(v)));
      t.appendChild(tr);
    }
    $(target).replaceChildren(t);
  }
  const statusText = (counts) => STATUSES.filter((s) => counts[s] > 0).map((s) => counts[s] + ' ' + s.replace('_', ' ')).join(', ');
  const lastOf = (list) => (list.length === 0 ? 0 : list[list.length - 1]);
  function drawChart(state) {
    const s = state.series;
    const budget = state.budgetUsd;
    const data = [s.t, s.committed, s.charged, s.net];
    if (budget !== null) data.push(s.t.map(() => budget));
    const box = $('chart');
    box.dataset.points = String(s.t.length);
    box.dataset.first = String(s.t.length === 0 ? 0 : s.t[0]);
    box.dataset.last = String(lastOf(s.committed));
    box.dataset.lastCharged = String(lastOf(s.charged));
    box.dataset.lastNet = String(lastOf(s.net));
    if (typeof uPlot === 'undefined' || s.t.length === 0) return;
    if (!chart) {
      // Spend moves by steps, at the records' times: each line holds its value until the next.
      const paths = uPlot.paths.stepped({ align: 1 });
      const series = [{}, { label: 'committed', stroke: '#c60', paths }, { label: 'charged', stroke: '#06c', paths }, { label: 'net', stroke: '#393', paths }];
      if (budget !== null) series.push({ label: 'budget', stroke: '#b00', dash: [6, 4] });
      chart = new uPlot({ width: 720, height: 260, series, axes: [{}, { values: axisUsd }] }, data, box);
    } else chart.setData(data);
  }
  function drawActivity(state) {
    const eta = state.eta;
    $('eta').textContent = eta === null ? '' : 'ETA ' + eta.text + ': ' + eta.ended + '/' + eta.total + ' ended' + (eta.perMinute === null ? '' : ', ' + eta.perMinute + ' a minute') + '.';
    $('eta').dataset.eta = eta === null ? '' : eta.text;
    $('throttling').textContent = state.throttling === null ? (state.run.running ? 'Time waited on throttling: in the report, once this start ends.' : '') : state.throttling.text;
    $('throttling').dataset.ms = state.throttling === null ? '' : String(state.throttling.ms);
    $('retries').textContent = 'Retries: ' + state.retries.text + '.';
    for (const k of ['rerolls', 'retried', 'resubmitted', 'rounds']) $('retries').dataset[k] = String(state.retries[k]);
  }
  function draw(state) {
    const r = state.run;
    document.documentElement.dataset.status = r.status;
    $('title').textContent = r.pipeline + ' ' + r.runId;
    $('status').textContent = r.status + (r.host ? ' on ' + r.host : '');
    // The money of the same summary as the tables below, so the header and the tables agree.
    const t = state.tables.total;
    $('money').textContent = 'committed ' + t.committed + (state.budgetUsd === null ? '' : ' of ' + r.text.budget + ' budget') + '; charged ' + t.charged + ', net ' + t.net + ', unknown ' + t.unknown + ', unpriced ' + t.unpriced + (r.text.duration ? '; ' + r.text.duration : '');
    $('source').textContent = 'figures from ' + state.source;
    const progress = [];
    for (const step of state.steps) {
      const ended = step.count - (step.counts.in_flight || 0) - (step.counts.not_started || 0);
      const done = (step.counts.completed || 0) + (step.counts.reused || 0);
      const line = el('div', undefined, { 'data-step': step.id, 'data-done': String(done), 'data-ended': String(ended) });
      line.appendChild(el('strong', step.id + ' (' + step.model + ') '));
      const bar = el('span', undefined, { class: 'bar' });
      const fill = el('span');
      fill.style.width = (step.count === 0 ? 0 : Math.round((100 * done) / step.count)) + '%';
      bar.appendChild(fill);
      line.appendChild(bar);
      line.appendChild(el('span', ' ' + done + '/' + step.count + ' done' + (statusText(step.counts) ? ': ' + statusText(step.counts) : '')));
      progress.push(line);
    }
    $('progress').replaceChildren(...progress);
    drawChart(state);
    drawActivity(state);
    const money = (t) => [t.name, statusText(t.counts), t.charged, t.refunded, t.net, t.unknown, t.unpriced];
    const heads = ['name', 'statuses', 'charged', 'refunded', 'net', 'unknown', 'unpriced'];
    table('steps', heads, [...state.tables.steps.map(money), money(state.tables.total)]);
    table('models', heads, state.tables.models.map(money));
    if (state.skippedRows.length === 0) $('skipped').textContent = 'none';
    else table('skipped', ['step', 'file', 'row', 'key', 'column', 'why'], state.skippedRows.map((s) => [s.step, s.file, s.row, s.key, s.column, s.reason]));
    document.documentElement.dataset.ready = 'true';
  }
  let asked;
  async function ask(selection) {
    const answer = await fetch('api/estimate?selection=' + selection, { cache: 'no-store' });
    const estimate = await answer.json();
    asked = estimate;
    $('estimate').textContent = 'Remake ' + estimate.selection.join(' and ') + ': ' + estimate.text + '. This spends credits.';
    $('confirm').hidden = estimate.instances.length === 0;
    $('cancel').hidden = false;
  }
  async function confirm() {
    $('confirm').hidden = true;
    const answer = await fetch('api/remake', { method: 'POST', headers: { 'content-type': 'application/json', 'x-genpipe-token': token }, body: JSON.stringify({ selection: asked.selection, confirm: true }) });
    // A refusal before the remake's route (the access rules) is a sentence in plain text.
    const body = await answer.text();
    let result;
    try {
      result = JSON.parse(body);
    } catch {
      result = { why: body || 'the server said ' + answer.status };
    }
    $('remake-result').textContent = result.started ? 'Started genpipe resume (pid ' + result.pid + '); its output goes to ' + result.log + '.' : 'Not started: ' + result.why + '.';
    $('remake-result').dataset.started = String(result.started === true);
  }
  $('remake-rejected').addEventListener('click', () => ask('rejected'));
  $('remake-failed').addEventListener('click', () => ask('failed'));
  $('confirm').addEventListener('click', confirm);
  $('cancel').addEventListener('click', () => {
    $('estimate').textContent = '';
    $('confirm').hidden = true;
    $('cancel').hidden = true;
  });
  const events = followLive('api/events');
  events.addEventListener('state', (e) => draw(JSON.parse(e.data)));
})();
`;

export function runPage(token: string, uplotStyle: string): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="genpipe-token" content="${token.replace(/[&<>"]/g, '')}"><link rel="icon" href="data:,">
<title>genpipe ui: a run</title><style>${UI_STYLE}${uplotStyle}</style><script src="assets/uplot.js"></script></head>
<body><header><h1 id="title">run</h1><nav><a href="/">runs</a> <a href="gallery/">gallery and review</a> <a href="/compare">compare</a> <a href="/fleet">fleet</a></nav>
<p><span id="status"></span>. <span id="money"></span> <span class="note" id="source"></span></p>${LIVE_LINE}</header>
<h2>Progress</h2><div id="progress"></div>
<div id="eta"></div><div id="throttling"></div><div id="retries"></div>
<h2>Spend over time</h2><div id="chart"></div>
<h2>Remake</h2>
<p>Start rejected or failed instances again (genpipe resume --retry), after you see what it costs.</p>
<button id="remake-rejected">Remake rejected…</button> <button id="remake-failed">Remake failed…</button>
<p id="estimate"></p><button id="confirm" hidden>Confirm: spend it</button> <button id="cancel" hidden>Cancel</button><p id="remake-result"></p>
<h2>Cost by step</h2><div id="steps"></div>
<h2>Cost by model</h2><div id="models"></div>
<h2>CSV rows set aside</h2><div id="skipped"></div>
<p class="note">The figures are genpipe's own, from the run's journal and report: the service keeps no ledger to read.</p>
<script>${SCRIPT}</script></body></html>`;
}
