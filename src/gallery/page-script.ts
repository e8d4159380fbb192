/**
 * The contact sheet's script, inlined into gallery.html: it renders the embedded data as one grid
 * per step (rows × columns, a page per combination of the other axes, rows and columns paged), with status and
 * text filters, a compare strip of 2 to 4 cells, and, when `genpipe review` serves the page,
 * approve / reject / star controls saved through the review server. Plain ES2020, no network
 * request of its own when opened from file://, and text from the run (errors, answers, labels)
 * only ever set as textContent.
 */
export const PAGE_SCRIPT = String.raw`
(() => {
  'use strict';
  const data = JSON.parse(document.getElementById('gallery-data').textContent);
  const reviewing = document.documentElement.dataset.review === 'on';
  const ROWS_PER_PAGE = 25;
  const COLS_PER_PAGE = 20;
  const decisions = {};
  const compare = [];
  const views = {};
  const el = (tag, props, children) => {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === undefined || v === null) continue;
      if (k === 'text') node.textContent = v;
      else if (k === 'className') node.className = v;
      else if (k.startsWith('on')) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v);
    }
    for (const child of children || []) if (child) node.appendChild(child);
    return node;
  };
  // Money as everywhere else in genpipe (util/format-usd.ts formatUsd): cents and thousands separators, more digits only when a price has them.
  const group = (text) => text.replace(/^(-?)(\d+)/, (m, sign, digits) => sign + digits.replace(/\B(?=(\d{3})+(?!\d))/g, ','));
  const usd = (n) => {
    if (n === undefined) return '';
    const cents = Math.round(n * 100) / 100;
    return Math.abs(cents - n) < 1e-9 ? 'US$' + group(cents.toFixed(2)) : 'US$' + group(n.toFixed(4).replace(/0+$/, ''));
  };
  const spendOf = (cells) => Math.round(cells.reduce((sum, c) => sum + (c.costUsd || 0), 0) * 1e6) / 1e6;
  const collator = new Intl.Collator('en', { numeric: true, sensitivity: 'base' });

  function viewOf(step) {
    if (!views[step.id]) views[step.id] = { rows: step.layout.rows, cols: step.layout.cols, page: {}, status: 'all', text: '', rowPage: 0, colPage: 0 };
    return views[step.id];
  }

  function pageAxes(step, view) {
    return step.axes.map((a) => a.name).filter((n) => n !== view.rows && n !== view.cols);
  }

  /** The header's review counts: approved, rejected, starred and unreviewed of the page's cells. */
  function renderReviewCounts() {
    const line = document.getElementById('review-counts');
    if (!line) return;
    let total = 0, approved = 0, rejected = 0, starred = 0;
    for (const step of data.steps) {
      for (const c of step.cells) {
        total++;
        const d = decisions[c.id];
        if (d && d.decision === 'approved') approved++;
        else if (d && d.decision === 'rejected') rejected++;
        if (d && d.starred) starred++;
      }
    }
    const unreviewed = total - approved - rejected;
    Object.assign(line.dataset, { approved: approved, rejected: rejected, starred: starred, unreviewed: unreviewed, total: total });
    line.textContent = approved + ' approved, ' + rejected + ' rejected, ' + starred + ' starred, ' + unreviewed + ' unreviewed of ' + total;
  }

  /** The run's spend in the header: what its cells cost (refunds and reuse at US$0). */
  function renderSpend() {
    const line = document.getElementById('spend');
    const cells = data.steps.flatMap((step) => step.cells);
    const spent = spendOf(cells);
    line.dataset.usd = String(spent);
    line.textContent = 'Spend ' + usd(spent) + ' on ' + cells.length + ' instance' + (cells.length === 1 ? '' : 's');
  }

  function render() {
    renderSpend();
    renderReviewCounts();
    const app = document.getElementById('app');
    app.textContent = '';
    for (const step of data.steps) app.appendChild(renderStep(step));
    renderCompare();
  }

  function renderStep(step) {
    const view = viewOf(step);
    const counts = {};
    for (const c of step.cells) counts[c.status] = (counts[c.status] || 0) + 1;
    const summary = Object.entries(counts).map(([s, n]) => n + ' ' + s.replace('_', ' ')).join(', ');
    const section = el('section', { className: 'step', 'data-step': step.id }, [
      el('h2', { text: step.id + ' (' + step.model + (step.forEach ? ', for each ' + step.forEach : '') + ')' }),
      el('p', { className: 'counts', text: step.cells.length + ' of ' + step.planned + ' instances' + (summary ? ': ' + summary : '') + '; ' + usd(spendOf(step.cells)) }),
    ]);
    section.appendChild(controls(step, view));
    const cells = step.cells.filter((c) => matches(c, step, view));
    const rowValues = view.rows ? valuesOf(step, view.rows).filter((v) => cells.some((c) => c.values[view.rows] === v)) : [''];
    const colValues = view.cols ? valuesOf(step, view.cols).filter((v) => cells.some((c) => c.values[view.cols] === v)) : [''];
    const rowPages = Math.max(1, Math.ceil(rowValues.length / ROWS_PER_PAGE));
    view.rowPage = Math.min(view.rowPage, rowPages - 1);
    const shownRows = rowValues.slice(view.rowPage * ROWS_PER_PAGE, (view.rowPage + 1) * ROWS_PER_PAGE);
    const colPages = Math.max(1, Math.ceil(colValues.length / COLS_PER_PAGE));
    view.colPage = Math.min(view.colPage, colPages - 1);
    const shownCols = colValues.slice(view.colPage * COLS_PER_PAGE, (view.colPage + 1) * COLS_PER_PAGE);
    const byPlace = new Map();
    for (const c of cells) {
      const key = (view.rows ? c.values[view.rows] : '') + '\u0000' + (view.cols ? c.values[view.cols] : '');
      if (!byPlace.has(key)) byPlace.set(key, []);
      byPlace.get(key).push(c);
    }
    const table = el('table', { className: 'grid' });
    const head = el('tr', {}, [el('th', { className: 'corner', text: (view.rows || '') + (view.cols ? ' \u2193 / ' + view.cols + ' \u2192' : '') })]);
    for (const col of shownCols) head.appendChild(el('th', { scope: 'col', text: view.cols ? view.cols + '=' + col : '' }));
    table.appendChild(el('thead', {}, [head]));
    const body = el('tbody');
    for (const row of shownRows) {
      const tr = el('tr', {}, [el('th', { scope: 'row', text: view.rows ? view.rows + '=' + row : '' })]);
      for (const col of shownCols) {
        const td = el('td');
        for (const c of byPlace.get(row + '\u0000' + col) || []) td.appendChild(renderCell(c, step));
        tr.appendChild(td);
      }
      body.appendChild(tr);
    }
    table.appendChild(body);
    section.appendChild(el('div', { className: 'scroll' }, [table]));
    if (cells.length === 0) section.appendChild(el('p', { className: 'empty', text: 'No instance matches.' }));
    if (rowPages > 1) section.appendChild(pager('rows', view, 'rowPage', rowPages, ROWS_PER_PAGE, shownRows.length, rowValues.length));
    if (colPages > 1) section.appendChild(pager('columns', view, 'colPage', colPages, COLS_PER_PAGE, shownCols.length, colValues.length));
    return section;
  }

  /** Previous / next buttons over one dimension of the grid, so a page never holds more than ROWS_PER_PAGE × COLS_PER_PAGE places. */
  function pager(label, view, key, pages, size, shown, total) {
    const first = view[key] * size + 1;
    return el('p', { className: 'pager', 'data-pager': label }, [
      el('button', { type: 'button', text: '\u2190 ' + label, disabled: view[key] === 0 ? '' : null, onclick: () => { view[key]--; render(); } }),
      el('span', { text: ' ' + label + ' ' + first + '\u2013' + (first + shown - 1) + ' of ' + total + ' ' }),
      el('button', { type: 'button', text: label + ' \u2192', disabled: view[key] >= pages - 1 ? '' : null, onclick: () => { view[key]++; render(); } }),
    ]);
  }

  function valuesOf(step, axis) {
    const a = step.axes.find((x) => x.name === axis);
    return a ? a.values : [];
  }

  function matches(c, step, view) {
    if (view.status !== 'all') {
      const d = decisions[c.id];
      if (view.status === 'approved' || view.status === 'rejected') { if (!d || d.decision !== view.status) return false; }
      else if (view.status === 'starred') { if (!d || !d.starred) return false; }
      else if (c.status !== view.status) return false;
    }
    for (const axis of pageAxes(step, view)) {
      const wanted = view.page[axis];
      if (wanted !== undefined && wanted !== '*' && c.values[axis] !== wanted) return false;
    }
    if (view.text) {
      const hay = (c.id + ' ' + (c.error || '') + ' ' + (c.headline || '') + ' ' + Object.entries(c.values).map(([k, v]) => k + '=' + v).join(' ')).toLowerCase();
      if (!hay.includes(view.text.toLowerCase())) return false;
    }
    return true;
  }

  function select(label, options, value, onchange, attrs) {
    const s = el('select', Object.assign({ 'aria-label': label, onchange: (e) => onchange(e.target.value) }, attrs || {}));
    for (const [v, text] of options) {
      const o = el('option', { value: v, text: text });
      if (v === value) o.selected = true;
      s.appendChild(o);
    }
    return el('label', {}, [document.createTextNode(label + ' '), s]);
  }

  function controls(step, view) {
    const names = step.axes.map((a) => a.name);
    const axisOptions = [['', '(none)']].concat(names.map((n) => [n, n]));
    const bar = el('div', { className: 'controls' });
    bar.appendChild(select('rows', axisOptions, view.rows || '', (v) => { view.rows = v || undefined; if (view.cols === view.rows) view.cols = undefined; view.rowPage = 0; view.colPage = 0; render(); }, { 'data-control': 'rows' }));
    bar.appendChild(select('columns', axisOptions, view.cols || '', (v) => { view.cols = v || undefined; if (view.cols === view.rows) view.rows = undefined; view.colPage = 0; render(); }, { 'data-control': 'cols' }));
    for (const axis of pageAxes(step, view)) {
      const values = valuesOf(step, axis);
      if (view.page[axis] === undefined) view.page[axis] = values[0];
      bar.appendChild(select(axis, [['*', 'all']].concat(values.map((v) => [v, v])), view.page[axis], (v) => { view.page[axis] = v; view.rowPage = 0; view.colPage = 0; render(); }, { 'data-control': 'page' }));
    }
    const statuses = ['all', 'completed', 'reused', 'failed', 'nsfw', 'canceled', 'unknown', 'in_flight', 'pending'].concat(reviewing ? ['approved', 'rejected', 'starred'] : []);
    bar.appendChild(select('show', statuses.map((s) => [s, s.replace('_', ' ')]), view.status, (v) => { view.status = v; view.rowPage = 0; view.colPage = 0; render(); }, { 'data-control': 'status' }));
    const input = el('input', { type: 'search', placeholder: 'filter: seed=3, an error word…', value: view.text, 'data-control': 'text' });
    input.addEventListener('change', () => { view.text = input.value.trim(); view.rowPage = 0; view.colPage = 0; render(); });
    bar.appendChild(input);
    return bar;
  }

  function media(c) {
    const out = [];
    for (const f of c.files) {
      if (f.kind === 'image') {
        out.push(el('a', { href: f.path, target: '_blank', rel: 'noopener' }, [el('img', { src: f.thumb || f.path, alt: c.id, loading: 'lazy', decoding: 'async' })]));
      } else if (f.kind === 'video') {
        out.push(el('video', { src: f.path, controls: '', preload: 'none' }));
      } else if (f.kind === 'audio') {
        out.push(el('audio', { src: f.path, controls: '', preload: 'none' }));
      } else if (f.kind !== 'text') {
        out.push(el('a', { href: f.path, text: f.path.split('/').pop() }));
      }
    }
    if (c.answer !== undefined) out.push(el('pre', { className: 'answer', text: c.answer }));
    return out;
  }

  function renderCell(c, step) {
    const d = decisions[c.id] || {};
    const cell = el('div', { className: 'cell status-' + c.status + (d.decision ? ' ' + d.decision : '') + (d.starred ? ' starred' : ''), 'data-instance': c.id, 'data-status': c.status, 'data-decision': d.decision || null, tabindex: '0' });
    for (const m of media(c)) cell.appendChild(m);
    if (c.headline !== undefined) cell.appendChild(el('p', { className: 'headline', title: c.headline, text: c.headline }));
    const facts = el('div', { className: 'facts' });
    facts.appendChild(el('span', { className: 'badge', text: c.status.replace('_', ' ') }));
    if (c.rerollSeed !== undefined) facts.appendChild(el('span', { className: 'badge reroll', text: 're-rolled: seed ' + c.rerollSeed }));
    const refunded = c.costUsd === 0 && (c.status === 'failed' || c.status === 'nsfw' || c.status === 'canceled');
    if (c.costUsd !== undefined) facts.appendChild(el('span', { className: 'cost', text: refunded ? 'refunded' : usd(c.costUsd) }));
    cell.appendChild(facts);
    if (c.error) cell.appendChild(el('p', { className: 'error', text: c.error }));
    cell.appendChild(el('p', { className: 'id', text: c.id + (c.requestId ? ' \u00b7 ' + c.requestId : '') }));
    const actions = el('div', { className: 'actions' });
    const inCompare = compare.includes(c.id);
    actions.appendChild(el('button', { type: 'button', 'data-action': 'compare', 'aria-pressed': String(inCompare), text: inCompare ? 'uncompare' : 'compare', onclick: () => toggleCompare(c.id) }));
    if (reviewing) {
      // Each button does what it says, whatever the cell's state: approving an approved cell keeps
      // it approved (a toggle had silently removed approvals); clear is its own button.
      actions.appendChild(el('button', { type: 'button', 'data-action': 'approve', 'aria-pressed': String(d.decision === 'approved'), text: 'approve (a)', onclick: () => decide(c.id, { decision: 'approved' }) }));
      actions.appendChild(el('button', { type: 'button', 'data-action': 'reject', 'aria-pressed': String(d.decision === 'rejected'), text: 'reject (r)', onclick: () => decide(c.id, { decision: 'rejected' }) }));
      actions.appendChild(el('button', { type: 'button', 'data-action': 'clear', disabled: d.decision ? null : '', text: 'clear (u)', onclick: () => decide(c.id, { decision: null }) }));
      actions.appendChild(el('button', { type: 'button', 'data-action': d.starred ? 'unstar' : 'star', 'aria-pressed': String(!!d.starred), text: d.starred ? '\u2605 unstar (S)' : '\u2606 star (s)', onclick: () => decide(c.id, { starred: !d.starred }) }));
    }
    cell.appendChild(actions);
    return cell;
  }

  function toggleCompare(id) {
    const at = compare.indexOf(id);
    if (at >= 0) compare.splice(at, 1);
    else {
      compare.push(id);
      if (compare.length > 4) compare.shift();
    }
    render();
  }

  function renderCompare() {
    const strip = document.getElementById('compare');
    strip.textContent = '';
    strip.hidden = compare.length < 2;
    if (compare.length < 2) return;
    strip.appendChild(el('h2', { text: 'Compare (' + compare.length + ')' }));
    const row = el('div', { className: 'compare-row' });
    for (const id of compare) {
      for (const step of data.steps) {
        const c = step.cells.find((x) => x.id === id);
        if (c) row.appendChild(renderCell(c, step));
      }
    }
    strip.appendChild(row);
  }

  async function decide(id, change) {
    const response = await fetch('api/decisions', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(Object.assign({ instance: id }, change)) });
    if (!response.ok) {
      document.getElementById('notice').textContent = 'Could not save the decision: ' + (await response.text());
      return;
    }
    const saved = await response.json();
    decisions[id] = saved;
    // Said, not only shown: the decision as saved, in the header's live line.
    const what = change.decision !== undefined ? (change.decision === null ? 'decision cleared' : change.decision) : (change.starred ? 'starred' : 'unstarred');
    document.getElementById('saved').textContent = id + ': ' + what + ' (saved to review.json)';
    render();
    const again = document.querySelector('[data-instance="' + CSS.escape(id) + '"]');
    if (again) again.focus();
  }

  document.addEventListener('keydown', (event) => {
    const cell = event.target && event.target.closest ? event.target.closest('.cell') : null;
    if (!cell || event.target.tagName === 'INPUT' || event.target.tagName === 'SELECT') return;
    const id = cell.dataset.instance;
    if (event.key === 'a' && reviewing) decide(id, { decision: 'approved' });
    else if (event.key === 'r' && reviewing) decide(id, { decision: 'rejected' });
    else if (event.key === 'u' && reviewing) decide(id, { decision: null });
    else if (event.key === 's' && reviewing) decide(id, { starred: true });
    else if (event.key === 'S' && reviewing) decide(id, { starred: false });
    else if (event.key === 'c') toggleCompare(id);
    else if (event.key === 'j' || event.key === 'k') {
      const all = [...document.querySelectorAll('#app .cell')];
      const next = all[all.indexOf(cell) + (event.key === 'j' ? 1 : -1)];
      if (next) next.focus();
    } else return;
    event.preventDefault();
  });

  async function start() {
    if (reviewing) {
      const response = await fetch('review.json', { cache: 'no-store' });
      if (response.ok) Object.assign(decisions, await response.json());
    }
    render();
    document.documentElement.dataset.ready = 'true';
  }
  start();
})();
`;
