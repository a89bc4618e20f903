// A small Markdown renderer for evaluation reports (headings, paragraphs, lists, tables, code, images),
// building DOM nodes only: report text is never parsed as HTML.
import {h} from './dom.js';

const INLINE = /(`[^`]+`|\*\*[^*]+\*\*|!\[[^\]]*\]\([^)\s]+\)|\[[^\]]+\]\([^)\s]+\))/;

function inline(text, image) {
  const out = [];
  for (const part of text.split(INLINE)) {
    if (!part) continue;
    let m;
    if (part.startsWith('`') && part.endsWith('`') && part.length > 1) out.push(h('code', {}, part.slice(1, -1)));
    else if (part.startsWith('**') && part.endsWith('**') && part.length > 3) out.push(h('strong', {}, part.slice(2, -2)));
    else if ((m = part.match(/^!\[([^\]]*)\]\(([^)\s]+)\)$/))) out.push(image(m[2], m[1]));
    else if ((m = part.match(/^\[([^\]]+)\]\(([^)\s]+)\)$/))) {
      out.push(/^https?:\/\//.test(m[2]) ? h('a', {href: m[2], rel: 'noopener noreferrer'}, m[1]) : m[1]);
    } else out.push(part);
  }
  return out;
}

function cells(line) {
  return line.trim().replace(/^\|/, '').replace(/\|$/, '').split('|').map((c) => c.trim());
}

/** renderMarkdown(text, (src, alt) => element) -> DocumentFragment */
export function renderMarkdown(text, image) {
  const root = document.createDocumentFragment();
  const lines = text.replace(/\r\n?/g, '\n').split('\n');
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    let m;
    if (!line.trim()) {
      i += 1;
    } else if ((m = line.match(/^(#{1,6})\s+(.*)$/))) {
      // report headings sit under the page's own h2
      root.append(h(`h${Math.min(6, m[1].length + 2)}`, {}, inline(m[2], image)));
      i += 1;
    } else if (line.startsWith('```')) {
      const body = [];
      i += 1;
      while (i < lines.length && !lines[i].startsWith('```')) body.push(lines[i++]);
      i += 1;
      root.append(h('pre', {}, body.join('\n')));
    } else if (line.trim().startsWith('|') && i + 1 < lines.length && /^\s*\|?[\s:|-]+\|?\s*$/.test(lines[i + 1])) {
      const head = cells(line);
      const align = cells(lines[i + 1]).map((c) => (c.endsWith(':') ? 'num' : ''));
      i += 2;
      const rows = [];
      while (i < lines.length && lines[i].trim().startsWith('|')) rows.push(cells(lines[i++]));
      root.append(h('div', {class: 'table-wrap'}, h('table', {class: 'report-table'},
        h('thead', {}, h('tr', {}, head.map((c, j) => h('th', {scope: 'col', class: align[j] || null}, inline(c, image))))),
        h('tbody', {}, rows.map((r) => h('tr', {}, r.map((c, j) => h('td', {class: align[j] || null}, inline(c, image)))))))));
    } else if (/^\s*[-*]\s+/.test(line)) {
      const items = [];
      while (i < lines.length && /^\s*[-*]\s+/.test(lines[i])) items.push(lines[i++].replace(/^\s*[-*]\s+/, ''));
      root.append(h('ul', {}, items.map((x) => h('li', {}, inline(x, image)))));
    } else {
      const para = [];
      while (i < lines.length && lines[i].trim() && !/^(#{1,6}\s|```|\s*\||\s*[-*]\s)/.test(lines[i])) para.push(lines[i++]);
      if (!para.length) para.push(lines[i++]);
      root.append(h('p', {}, inline(para.join(' '), image)));
    }
  }
  return root;
}
