// Small DOM helpers: every text goes in as text (never as HTML), so uploaded content cannot run.

const PROPS = new Set(['value', 'checked', 'disabled', 'selected', 'indeterminate', 'open']);

/** h('button', {type: 'button', onclick: fn}, 'text', child, [more]) -> HTMLElement */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === 'class') el.className = value;
    else if (key === 'text') el.textContent = value;
    else if (key.startsWith('on') && typeof value === 'function') el.addEventListener(key.slice(2), value);
    else if (PROPS.has(key)) el[key] = value;
    else el.setAttribute(key, value === true ? '' : String(value));
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

export function replace(el, ...children) {
  return append(clear(el), children);
}

/** A path for a hash link: each segment encoded, the slashes kept. */
export function encodePath(path) {
  return path.split('/').map(encodeURIComponent).join('/');
}

export function decodePath(path) {
  return path.split('/').map(decodeURIComponent).join('/');
}

export function fmtDate(value) {
  if (!value) return '–';
  const date = new Date(value);
  return Number.isNaN(date.getTime()) ? String(value) : date.toLocaleString();
}

export function fmtBytes(n) {
  if (n === null || n === undefined) return '–';
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`;
  return `${(n / 1024 / 1024).toFixed(1)} MB`;
}

export function fmtNum(value, digits = 3) {
  return typeof value === 'number' ? value.toFixed(digits) : '–';
}

/** A relevance level or status as a badge. */
export function badge(value, extra = '', label = null) {
  const name = String(value || 'none');
  return h('span', {class: `badge b-${name.toLowerCase().replace(/[^a-z0-9]+/g, '-')} ${extra}`.trim()}, label || name);
}

/** A table from column headers and rows of cells (each cell: text, node or array of them). */
export function table(headers, rows, attrs = {}) {
  return h('div', {class: 'table-wrap'},
    h('table', attrs,
      h('thead', {}, h('tr', {}, headers.map((title) => h('th', {scope: 'col'}, title)))),
      h('tbody', {}, rows.map((cells) => h('tr', {}, cells.map((cell) => h('td', {}, cell)))))));
}
