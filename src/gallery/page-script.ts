import { PAGE_MONEY } from '../util/page-money.js';

/**
 * The contact sheet's script, inlined into gallery.html: it renders each step as a grid (rows x
 * columns, a page per combination of the other axes, rows and columns paged), with status and
 * text filters, a compare strip of 2 to 4 cells, and, when `genpipe review` serves the page,
 * approve / reject / star controls saved through the review server. Plain ES2020.
 *
 * The page holds an index of every cell (its labels' positions on the axes and its status), from
 * which it lays out the grids, counts and filters; the cells themselves come from the data files
 * beside the page, loaded as classic scripts (the only way a page opened from file:// may read
 * another file) when a screen shows them, or when a text filter needs their text. Text from the
 * run (errors, answers, labels) is only ever set as textContent.
 */
export const PAGE_SCRIPT = String.raw`
(() => {
  'use strict';
  const data = JSON.parse(document.getElementById('gallery-data').textContent);
  const reviewing = document.documentElement.dataset.review === 'on';
  const ROWS_PER_PAGE = 25;
  const COLS_PER_PAGE = 20;
  const PAGE_CELLS = data.pageCells;
  /** Decisions by instance id, as review.json has them. */
  const decisions = {};
  const compare = [];
  const views = {};
  /** Loaded cells by id: where they are and what they say. */
  const loaded = new Map();
  const stepsById = new Map();
  for (const [at, step] of data.steps.entries()) {
    step.at = at;
    step.stride = step.axes.length + 1;
    step.cells = new Array(step.count);
    step.loading = [];
    /** Decisions by cell position. */
    step.decided = new Map();
    step.positions = undefined;
    stepsById.set(step.id, step);
  }
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
${PAGE_MONEY}
  const usd = (n, kind) => (n === undefined ? '' : formatMoney(n, kind || 'total', 'usd'));
  const round6 = (n) => Math.round(n * 1e6) / 1e6;
  /** A video's poster when it has no first frame (no ffmpeg, or a file it could not read): a light 16:9 card that says "video" in its upper half, above where the browser draws its controls. */
  const VIDEO_POSTER = 'data:image/svg+xml,' + encodeURIComponent('<svg xmlns="http://www.w3.org/2000/svg" width="320" height="180" viewBox="0 0 320 180"><rect width="320" height="180" fill="#d6d6d6"/><path d="M104 34v30l26-15z" fill="#444"/><text x="186" y="62" fill="#333" font-family="sans-serif" font-size="36" text-anchor="middle">video</text></svg>');
  const notice = (text) => { document.getElementById('notice').textContent = text; };

  const labelIndexAt = (step, i, a) => step.index[i * step.stride + a];
  const statusAt = (step, i) => data.statuses[step.index[i * step.stride + step.axes.length]];
  const axisAt = (step, name) => (name === undefined ? -1 : step.axes.findIndex((a) => a.name === name));

  // The data files call this as they load: the step's position, the page's, its signature and its cells.
  const registered = new Map();
  window.__genpipeCells = (stepAt, page, sig, cells) => { registered.set(stepAt + ':' + page, { sig: sig, cells: cells }); };

  /** Loads a page of a step's cells once (a classic script: file:// allows no fetch); true when they are there. */
  function loadPage(step, page) {
    if (step.loading[page]) return step.loading[page];
    const ref = step.pages[page];
    step.loading[page] = new Promise((resolve) => {
      const script = document.createElement('script');
      script.src = ref.file;
      script.onload = () => {
        const got = registered.get(step.at + ':' + page);
        registered.delete(step.at + ':' + page);
        script.remove();
        if (!got || got.sig !== ref.sig || !Array.isArray(got.cells) || got.cells.length !== ref.count) {
          notice('The gallery was rewritten after this page was opened: reload it (' + ref.file + ' is of another write).');
          return resolve(false);
        }
        for (const [j, cell] of got.cells.entries()) {
          const i = page * PAGE_CELLS + j;
          cell.values = {};
          for (const [a, axis] of step.axes.entries()) {
            const k = labelIndexAt(step, i, a);
            if (k >= 0) cell.values[axis.name] = axis.values[k];
          }
          step.cells[i] = cell;
          loaded.set(cell.id, { step: step, at: i, cell: cell });
        }
        resolve(true);
      };
      script.onerror = () => {
        script.remove();
        notice('Could not load ' + ref.file + ': keep the gallery-data folder beside gallery.html (or reload, if the gallery was rewritten).');
        resolve(false);
      };
      document.head.appendChild(script);
    });
    return step.loading[page];
  }

  /** Loads the pages holding the cells at these positions. */
  function loadCells(step, positions) {
    const pages = new Set();
    for (const i of positions) pages.add(Math.floor(i / PAGE_CELLS));
    return Promise.all([...pages].map((p) => loadPage(step, p)));
  }

  // An instance id's step and axis values (gallery/instance-axes.ts), to place a decision of review.json on its cell.
  // A copy for the page (which imports nothing); test/gallery/page-instance-axes.test.ts runs it against the server's.
  // instance-axes: begin
  function splitLabel(label) {
    const parts = [];
    let start = 0;
    let quoted = false;
    for (let i = 0; i < label.length; i++) {
      const c = label[i];
      if (quoted && c === '\\') i++;
      else if (c === '"') quoted = !quoted;
      else if (c === ',' && !quoted) { parts.push(label.slice(start, i)); start = i + 1; }
    }
    if (start < label.length) parts.push(label.slice(start));
    return parts;
  }
  function unquote(label) {
    if (!label.startsWith('"')) return label;
    try { const value = JSON.parse(label); return typeof value === 'string' ? value : label; } catch (e) { return label; }
  }
  function upstreamIdEnd(inner) {
    const match = /^[a-z][a-z0-9_-]{0,62}(\[|$|,)/.exec(inner);
    if (!match) return -1;
    if (match[1] !== '[') return match[0].length - (match[1] === ',' ? 1 : 0);
    let depth = 0;
    let quoted = false;
    for (let i = match[0].length - 1; i < inner.length; i++) {
      const c = inner[i];
      if (quoted) { if (c === '\\') i++; else if (c === '"') quoted = false; }
      else if (c === '"') quoted = true;
      else if (c === '[') depth++;
      else if (c === ']' && --depth === 0) return i + 1;
    }
    return -1;
  }
  function instanceAxes(id) {
    const open = id.indexOf('[');
    if (open < 0 || !id.endsWith(']')) return { step: id, values: [] };
    const inner = id.slice(open + 1, -1);
    const values = [];
    let rest = inner;
    const upstreamEnd = upstreamIdEnd(inner);
    if (upstreamEnd > 0) {
      const upstream = instanceAxes(inner.slice(0, upstreamEnd));
      rest = inner.slice(upstreamEnd + 1);
      const own = splitLabel(rest).map((part) => part.slice(0, part.indexOf('=')));
      for (const [axis, label] of upstream.values) values.push([own.includes(axis) ? upstream.step + '.' + axis : axis, label]);
    }
    for (const part of rest === '' ? [] : splitLabel(rest)) {
      const eq = part.indexOf('=');
      if (eq > 0) values.push([part.slice(0, eq), unquote(part.slice(eq + 1))]);
    }
    return { step: id.slice(0, open), values: values };
  }
  // instance-axes: end
  /** The step and position of an instance's cell, or undefined when the gallery has none. */
  function cellOf(id) {
    const known = loaded.get(id);
    if (known) return known;
    const parsed = instanceAxes(id);
    const step = stepsById.get(parsed.step);
    if (!step) return undefined;
    if (!step.positions) {
      step.positions = new Map();
      for (let i = 0; i < step.count; i++) step.positions.set(step.index.slice(i * step.stride, i * step.stride + step.axes.length).join(','), i);
    }
    const key = step.axes.map(() => -1);
    for (const [axis, label] of parsed.values) {
      const a = axisAt(step, axis);
      if (a < 0) return undefined;
      key[a] = step.axes[a].values.indexOf(label);
    }
    const at = step.positions.get(key.join(','));
    return at === undefined ? undefined : { step: step, at: at };
  }
  function setDecision(id, decision) {
    decisions[id] = decision;
    const where = cellOf(id);
    if (where) where.step.decided.set(where.at, decision);
  }

  function viewOf(step) {
    if (!views[step.id]) views[step.id] = { rows: step.layout.rows, cols: step.layout.cols, page: {}, status: 'all', text: '', rowPage: 0, colPage: 0 };
    return views[step.id];
  }

  function pageAxes(step, view) {
    return step.axes.map((a) => a.name).filter((n) => n !== view.rows && n !== view.cols);
  }

  /**
   * The page of each axis beyond rows and columns, its first value until one is chosen: set before
   * the cells are picked, so the first render shows the page its selector names (not every page at
   * once, until a click re-rendered it).
   */
  function pageChoices(step, view) {
    for (const axis of pageAxes(step, view)) if (view.page[axis] === undefined) view.page[axis] = valuesOf(step, axis)[0];
    return pageAxes(step, view).map((name) => [axisAt(step, name), view.page[name]]);
  }

  /** The header's review counts: approved, rejected, starred and unreviewed of the page's cells. */
  function renderReviewCounts() {
    const line = document.getElementById('review-counts');
    if (!line) return;
    let total = 0, approved = 0, rejected = 0, starred = 0;
    for (const step of data.steps) {
      total += step.count;
      for (const d of step.decided.values()) {
        if (d && d.decision === 'approved') approved++;
        else if (d && d.decision === 'rejected') rejected++;
        if (d && d.starred) starred++;
      }
    }
    const unreviewed = total - approved - rejected;
    Object.assign(line.dataset, { approved: approved, rejected: rejected, starred: starred, unreviewed: unreviewed, total: total });
    line.textContent = approved + ' approved, ' + rejected + ' rejected, ' + starred + ' starred, ' + unreviewed + ' unreviewed of ' + total;
  }

  /** The run's net in the header: what its cells cost, each the report's figure (run-state.ts instanceCostUsd). */
  function renderSpend() {
    const line = document.getElementById('spend');
    const spent = round6(data.steps.reduce((sum, step) => sum + step.spendUsd, 0));
    const unpriced = data.steps.reduce((sum, step) => sum + step.unpriced, 0);
    const count = data.steps.reduce((sum, step) => sum + step.count, 0);
    line.dataset.usd = String(spent);
    line.dataset.unpriced = String(unpriced);
    const provisional = data.steps.some((step) => step.provisional);
    line.textContent = 'Net ' + formatSpend({ netUsd: spent, unpricedInstances: unpriced, provisional: provisional }) + ' on ' + count + ' instance' + (count === 1 ? '' : 's');
  }

  let renders = 0;
  /** Lays out every step, loads the cells its screen shows, then draws; a later render supersedes one still loading. */
  async function render() {
    const mine = ++renders;
    const plans = await Promise.all(data.steps.map(planStep));
    if (mine !== renders) return;
    renderSpend();
    renderReviewCounts();
    const app = document.getElementById('app');
    app.textContent = '';
    for (const plan of plans) app.appendChild(drawStep(plan));
    renderCompare();
  }

  /** What a step's screen shows, its cells loaded: the positions that pass its filters, its rows and columns, those in view. */
  async function planStep(step) {
    const view = viewOf(step);
    const rowAxis = axisAt(step, view.rows);
    const colAxis = axisAt(step, view.cols);
    const paged = pageChoices(step, view);
    let cells = [];
    for (let i = 0; i < step.count; i++) if (passes(step, i, view, paged)) cells.push(i);
    if (view.text) {
      // Text lives in the cells: a text filter reads every cell that passes the others.
      await loadCells(step, cells);
      const text = view.text.toLowerCase();
      cells = cells.filter((i) => step.cells[i] !== undefined && textOf(step.cells[i]).includes(text));
    }
    const present = (a) => {
      if (a < 0) return [-1];
      const seen = new Set();
      for (const i of cells) seen.add(labelIndexAt(step, i, a));
      return step.axes[a].values.map((v, k) => k).filter((k) => seen.has(k));
    };
    const rowValues = present(rowAxis);
    const colValues = present(colAxis);
    const rowPages = Math.max(1, Math.ceil(rowValues.length / ROWS_PER_PAGE));
    view.rowPage = Math.min(view.rowPage, rowPages - 1);
    const shownRows = rowValues.slice(view.rowPage * ROWS_PER_PAGE, (view.rowPage + 1) * ROWS_PER_PAGE);
    const colPages = Math.max(1, Math.ceil(colValues.length / COLS_PER_PAGE));
    view.colPage = Math.min(view.colPage, colPages - 1);
    const shownCols = colValues.slice(view.colPage * COLS_PER_PAGE, (view.colPage + 1) * COLS_PER_PAGE);
    const rowSet = new Set(shownRows);
    const colSet = new Set(shownCols);
    const placeOf = (i) => [rowAxis < 0 ? -1 : labelIndexAt(step, i, rowAxis), colAxis < 0 ? -1 : labelIndexAt(step, i, colAxis)];
    const shown = cells.filter((i) => {
      const [r, c] = placeOf(i);
      return rowSet.has(r) && colSet.has(c);
    });
    await loadCells(step, shown);
    return { step: step, view: view, matched: cells.length, rowValues: rowValues, colValues: colValues, shownRows: shownRows, shownCols: shownCols, shown: shown, placeOf: placeOf, rowPages: rowPages, colPages: colPages };
  }

  function passes(step, i, view, paged) {
    if (view.status !== 'all') {
      const d = step.decided.get(i);
      if (view.status === 'approved' || view.status === 'rejected') { if (!d || d.decision !== view.status) return false; }
      else if (view.status === 'starred') { if (!d || !d.starred) return false; }
      else if (statusAt(step, i) !== view.status) return false;
    }
    for (const [a, wanted] of paged) {
      if (wanted === undefined || wanted === '*') continue;
      const k = a < 0 ? -1 : labelIndexAt(step, i, a);
      if (k < 0 || step.axes[a].values[k] !== wanted) return false;
    }
    return true;
  }

  const textOf = (c) => (c.id + ' ' + (c.error || '') + ' ' + (c.headline || '') + ' ' + Object.entries(c.values).map(([k, v]) => k + '=' + v).join(' ')).toLowerCase();

  function drawStep(plan) {
    const step = plan.step;
    const view = plan.view;
    const counts = {};
    for (let i = 0; i < step.count; i++) {
      const status = statusAt(step, i);
      counts[status] = (counts[status] || 0) + 1;
    }
    const summary = Object.entries(counts).map(([s, n]) => n + ' ' + s.replace('_', ' ')).join(', ');
    const section = el('section', { className: 'step', 'data-step': step.id }, [
      el('h2', { text: step.id + ' (' + step.model + (step.forEach ? ', for each ' + step.forEach : '') + ')' }),
      el('p', { className: 'counts', text: step.count + ' of ' + step.planned + ' instances' + (summary ? ': ' + summary : '') + '; ' + formatSpend({ netUsd: round6(step.spendUsd), unpricedInstances: step.unpriced, provisional: step.provisional }) }),
    ]);
    section.appendChild(controls(step, view));
    const rowName = (k) => (view.rows && k >= 0 ? view.rows + '=' + valuesOf(step, view.rows)[k] : '');
    const colName = (k) => (view.cols && k >= 0 ? view.cols + '=' + valuesOf(step, view.cols)[k] : '');
    const byPlace = new Map();
    for (const i of plan.shown) {
      const [r, c] = plan.placeOf(i);
      const key = r + ':' + c;
      if (!byPlace.has(key)) byPlace.set(key, []);
      byPlace.get(key).push(i);
    }
    const table = el('table', { className: 'grid' });
    const head = el('tr', {}, [el('th', { className: 'corner', text: (view.rows || '') + (view.cols ? ' \u2193 / ' + view.cols + ' \u2192' : '') })]);
    for (const col of plan.shownCols) head.appendChild(el('th', { scope: 'col', text: colName(col) }));
    table.appendChild(el('thead', {}, [head]));
    const body = el('tbody');
    for (const row of plan.shownRows) {
      const tr = el('tr', {}, [el('th', { scope: 'row', text: rowName(row) })]);
      for (const col of plan.shownCols) {
        const td = el('td');
        for (const i of byPlace.get(row + ':' + col) || []) if (step.cells[i]) td.appendChild(renderCell(step.cells[i], step));
        tr.appendChild(td);
      }
      body.appendChild(tr);
    }
    table.appendChild(body);
    section.appendChild(el('div', { className: 'scroll' }, [table]));
    if (plan.matched === 0) section.appendChild(el('p', { className: 'empty', text: 'No instance matches.' }));
    if (plan.rowPages > 1) section.appendChild(pager('rows', view, 'rowPage', plan.rowPages, ROWS_PER_PAGE, plan.shownRows.length, plan.rowValues.length));
    if (plan.colPages > 1) section.appendChild(pager('columns', view, 'colPage', plan.colPages, COLS_PER_PAGE, plan.shownCols.length, plan.colValues.length));
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
      // Where the team reads it: its public URL in the storage sink (http or https only).
      if (typeof f.url === 'string' && /^https?:\/\//.test(f.url)) out.push(el('a', { href: f.url, className: 'public', text: 'public link', target: '_blank', rel: 'noopener' }));
      if (f.kind === 'image') {
        out.push(el('a', { href: f.path, target: '_blank', rel: 'noopener' }, [el('img', { src: f.thumb || f.path, alt: c.id, loading: 'lazy', decoding: 'async' })]));
      } else if (f.kind === 'video') {
        // Its first frame (thumbnails.ts), or a placeholder that says what it is: never a black box.
        out.push(el('video', { src: f.path, controls: '', preload: 'none', poster: f.poster || VIDEO_POSTER }));
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
    if (c.files.some((f) => f.kind === 'video')) facts.appendChild(el('span', { className: 'badge kind', text: 'video' }));
    if (c.rerollSeed !== undefined) facts.appendChild(el('span', { className: 'badge reroll', text: 're-rolled: seed ' + c.rerollSeed }));
    const refunded = c.costUsd === 0 && (c.status === 'failed' || c.status === 'nsfw' || c.status === 'canceled');
    if (c.unpriced) facts.appendChild(el('span', { className: 'cost', text: 'unpriced' }));
    else if (c.costUsd !== undefined) facts.appendChild(el('span', { className: 'cost', text: refunded ? 'refunded' : usd(c.costUsd, 'each') }));
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
      const where = loaded.get(id);
      if (where) row.appendChild(renderCell(where.cell, where.step));
    }
    strip.appendChild(row);
  }

  async function decide(id, change) {
    // Served by genpipe ui, the page carries that server's token for its writes.
    const token = document.querySelector('meta[name=genpipe-token]');
    const headers = token ? { 'content-type': 'application/json', 'x-genpipe-token': token.getAttribute('content') } : { 'content-type': 'application/json' };
    const response = await fetch('api/decisions', { method: 'POST', headers, body: JSON.stringify(Object.assign({ instance: id }, change)) });
    if (!response.ok) {
      document.getElementById('notice').textContent = 'Could not save the decision: ' + (await response.text());
      return;
    }
    const saved = await response.json();
    setDecision(id, saved);
    // Said, not only shown: the decision as saved, in the header's live line.
    const what = change.decision !== undefined ? (change.decision === null ? 'decision cleared' : change.decision) : (change.starred ? 'starred' : 'unstarred');
    document.getElementById('saved').textContent = id + ': ' + what + ' (saved to review.json)';
    await render();
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
      if (response.ok) for (const [id, decision] of Object.entries(await response.json())) setDecision(id, decision);
    }
    await render();
    document.documentElement.dataset.ready = 'true';
  }
  start();
})();
`;
